"""Servers that attack the client or lie to it (issue 47, items 1, 5 and 6), as real processes on 127.0.0.1
(tests/fixtures/hostile_server.py): every reply is bounded before it is held, a truncated or malformed one is an
error naming what arrived, token counts must agree with the stream, and each fault gets its own kind.

On 1beba90 (the hand-written HTTP/1.1 of serving/fetch.py): endless headers and a declared 2 GiB chunk were held
until the request's deadline ("timeout", with the memory they took: 1.6 GB in 20 s for the headers), a body cut
short of its Content-Length or inside a chunk came back as a whole 200 (blamed on the server lacking
include_usage), a malformed chunk size or status line surfaced as raw ValueError text, a web page and a stream
with CR-only line ends read as "empty ... `[DONE]` first" (wrong-answer), 48 content chunks counted as 16 tokens
and 16 as 1 were ok points, and usage in every chunk failed every request as "disagree"."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.serving import classify, client as cl
from helpers.serving.fetch import Deadlines, ReplyError, fetch
from helpers.serving.server import Server, ServerSpec, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
HOSTILE = str(Path(__file__).parent / "fixtures" / "hostile_server.py")
LIMIT = 30.0        # the request time limit: far beyond what a bounded reply takes, so "timeout" means unbounded


def spec(mode: str) -> ServerSpec:
    port = free_port()
    return ServerSpec(argv=[sys.executable, HOSTILE, str(port), mode], port=port, name=mode)


def one(mode: str, tmp_path, max_tokens: int = 4) -> cl.RequestResult:
    with Server(spec(mode), tmp_path / f"{mode}.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        (r,), _ = cl.run_sync(cl.run_requests(srv.spec.base_url, "fake", ["p"], max_tokens, 1, timeout_s=LIMIT))
    return r


@pytest.mark.parametrize("mode,kind,said", [
    ("headers-flood", "protocol", "more than 100 header lines"),
    ("header-huge", "protocol", "8190 bytes"),
    ("chunk-huge", "too-large", "passed"),
    ("body-endless", "too-large", "passed"),
    ("sse-flood", "too-large", "events for a request of at most 4 tokens"),
    ("truncated-length", "truncated", "short of its Content-Length (258 of 4096 bytes had come)"),
    ("truncated-chunk", "truncated", "inside a chunk"),
    ("bad-chunk-size", "protocol", "is not a hexadecimal size"),
    ("bad-status", "protocol", "its status line is"),
    ("html", "bad-body", "text/html"),
])
def test_a_hostile_reply_is_bounded_and_named(tmp_path, mode, kind, said):
    r = one(mode, tmp_path)
    assert not r.ok and r.error_kind == kind and said in r.error, (r.error_kind, r.error)
    assert "include_usage" not in r.error and "[DONE]" not in r.error


def test_what_a_cut_short_or_endless_reply_held_is_said_by_fetch(tmp_path):
    """The plain requests (health, smoke) too: a body cut short of its Content-Length is an error naming the bytes
    that arrived, never a whole reply; a chunk declared 2 GiB is read as it arrives and stopped at the body cap,
    whose error names the cap (1beba90 read the chunk whole and then said 0 body bytes had arrived)."""
    for mode, kind, said in (("truncated-length", "truncated", "258 of 4096 bytes had come"),
                             ("chunk-huge", "too-large", "passed 1048576 bytes")):
        with Server(spec(mode), tmp_path / f"{mode}.log", startup_timeout_s=30, stop_grace_s=1) as srv:
            with pytest.raises(ReplyError) as e:
                fetch(srv.spec.base_url + "/v1/completions", "POST", {"stream": True}, Deadlines.from_timeout(LIMIT),
                      max_bytes=1 << 20)
        assert e.value.kind == kind and said in str(e.value), str(e.value)


def test_a_stream_with_cr_only_line_ends_is_read(tmp_path):
    r = one("cr-only", tmp_path)
    assert r.ok and r.text == " w0 w1 w2 w3" and r.output_tokens == 4 and len(r.itl_s) == 3, r.error


def test_usage_in_every_chunk_is_read_as_cumulative(tmp_path):
    r = one("usage-every", tmp_path)
    assert r.ok and r.output_tokens == 4 and r.prompt_tokens == 4, r.error


@pytest.mark.parametrize("mode,max_tokens,said", [
    ("usage-under", 16, "usage reports 16 completion tokens, but the stream carried 48 content chunks"),
    ("usage-one", 16, "usage reports 1 completion tokens, but the stream carried 16 content chunks"),
])
def test_more_content_chunks_than_tokens_is_bad_usage(tmp_path, mode, max_tokens, said):
    r = one(mode, tmp_path, max_tokens)
    assert not r.ok and r.error_kind == "bad-usage" and said in r.error, (r.error_kind, r.error)
    row = cl.summarize([r], 1.0)
    assert row["completed"] == 0 and row["total_output_tokens"] == 0


@pytest.mark.parametrize("mode,outcome,said", [
    ("html", "error", "text/html"),              # 1beba90: wrong-answer, "`[DONE]` first"
    ("cr-only", "ok", "concurrent decodes"),     # 1beba90: wrong-answer, "`[DONE]` first"
    ("truncated-length", "error", "cut short"),  # 1beba90: error, blamed on include_usage
    ("bad-status", "error", "its status line is b'HTTX/1.1 2OO OK"),               # 1beba90: raw ValueError text
    ("bad-chunk-size", "error", "the chunk-size line b'zz\\r\\n' is not a hexadecimal size"),   # int() ValueError
])
def test_each_fault_is_classed_by_its_cause(tmp_path, mode, outcome, said):
    a = classify.attempt(mode, spec(mode), "fake", tmp_path, startup_timeout_s=30, decode_concurrency=2,
                         decode_tokens=4, request_timeout_s=LIMIT)
    assert a.outcome == outcome and said in a.detail, (a.outcome, a.detail, a.evidence)
    assert "include_usage" not in a.detail


CLIENT = textwrap.dedent('''
    import json, sys
    from helpers.serving import client as cl
    (r,), _ = cl.run_sync(cl.run_requests(sys.argv[1], "fake", ["p"], int(sys.argv[2]), 1, timeout_s=float(sys.argv[3])))
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
    print(json.dumps({"kind": r.error_kind, "error": r.error[:200], "peak_kib": int(hwm)}))
''')


def client_peak(url: str, max_tokens: int, limit_s: float) -> dict:
    """One request from a fresh client process: its error kind and its peak resident memory (VmHWM)."""
    proc = subprocess.run([sys.executable, "-c", CLIENT, url, str(max_tokens), str(limit_s)], capture_output=True,
                          text=True, timeout=limit_s + 60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["headers-flood", "chunk-huge", "sse-flood"])
def test_a_flood_leaves_the_client_small(tmp_path, mode):
    """The client's own process stays near its size at rest under a flood (1beba90: endless headers took it to 1.6 GB
    in 20 s). max_tokens is large here, so only the limits on headers, events and body bytes bound it; the
    bound is the client's resting size plus 60 MiB (its size at rest is measured first, against a good server)."""
    with Server(spec("cr-only"), tmp_path / "rest.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        rest = client_peak(srv.spec.base_url, 4, LIMIT)
    with Server(spec(mode), tmp_path / f"{mode}.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        got = client_peak(srv.spec.base_url, 1 << 14, LIMIT)
    assert got["kind"] in ("protocol", "too-large"), got
    assert got["peak_kib"] < rest["peak_kib"] + 60 * 1024, (got, rest)
