"""A server's token counts are checked, not taken on trust (issue 36, item 3), against real local servers
(tests/fixtures/fault_server.py). On 8874c48 a usage of 1000 x max_tokens, of 0 or -3 tokens while content
streamed, or a second usage chunk that disagrees each gave an "ok" point (265,628, 0 or -78 tokens/s), and a
`data: [DONE]` sent first was blamed on the server lacking stream_options.include_usage. Now each is a failed
request of its own kind (bad-usage), no throughput rests on it, and the attempt is not "ok"; the [DONE]-first
stream is named as such. Also (item 8): a refused connection says "refused", not only "Connection error."."""
import sys
from pathlib import Path

import pytest

from helpers.serving import classify, client as cl
from helpers.serving.server import Server, ServerSpec, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")


def spec(mode):
    port = free_port()
    return ServerSpec(argv=[sys.executable, FAULT, str(port), mode], port=port, name=mode)


@pytest.mark.parametrize("mode,said", [
    ("usage-over", "completion tokens for a request of at most max_tokens = 2"),
    ("usage-zero", "0 completion tokens although content streamed"),
    ("usage-negative", "expected whole numbers >= 0"),
    ("usage-twice", "two usage reports of one stream disagree: completion_tokens 2, then 6"),
])
def test_a_token_count_that_cannot_be_right_fails_the_request_and_the_attempt(tmp_path, mode, said):
    with Server(spec(mode), tmp_path / "s.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        row = cl.run_point(srv.spec.base_url, "fake", cl.Workload(4, 2), 2, 4, timeout_s=10, warmup=0)
    assert row["completed"] == 0 and row["failed"] == 4, row
    assert row["total_output_tokens"] == 0 and row["output_throughput"] == 0, row
    assert said in row["errors"], row["errors"]
    a = classify.attempt(mode, spec(mode), "fake", tmp_path, startup_timeout_s=30, request_timeout_s=10,
                         decode_tokens=2)
    assert a.outcome == "error" and a.decode_completed == 0 and said.split(":")[0] in a.detail, a


@pytest.mark.parametrize("chat", [False, True])
def test_a_stream_that_starts_with_done_is_named_so(tmp_path, chat):
    with Server(spec("done-first"), tmp_path / "s.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        row = cl.run_point(srv.spec.base_url, "fake", cl.Workload(4, 2), 1, 2, timeout_s=10, chat=chat, warmup=0)
    assert row["completed"] == 0 and "`data: [DONE]` first" in row["errors"], row["errors"]
    assert "include_usage" not in row["errors"]


def test_a_good_usage_is_still_ok(tmp_path):
    with Server(spec("ok"), tmp_path / "s.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        row = cl.run_point(srv.spec.base_url, "fake", cl.Workload(4, 2), 2, 4, timeout_s=10)
    assert row["completed"] == 4 and row["total_output_tokens"] == 8, row


def test_a_refused_connection_says_refused():
    port = free_port()     # nothing listens there
    results, _ = cl.run_sync(cl.run_requests(f"http://127.0.0.1:{port}", "fake", ["hi"], 2, 1, timeout_s=5))
    (r,) = results
    assert r.error_kind == "connect" and "refused" in r.error.lower(), r.error
