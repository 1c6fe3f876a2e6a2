"""The load generator: concurrent streaming requests, each on a connection of its own over asyncio streams
(helpers.serving.fetch.open_stream: HTTP/1.1, server-sent events read as they arrive), and the metrics of
sglang's bench_serving computed from them. (Until issue 38 the requests went through `openai.AsyncOpenAI`: what
it did before a request's first byte was written, the SDK's request building and httpx/anyio's connection set-up,
sat inside every TTFT and E2E; measured on the 2-core machine at load 2-5, medians of 1.7-4.6 ms at concurrency 1
and 12.4 ms at 4 (0.6 and 1.4-1.6 ms now), 30-85 ms for a run's first request; benchmarks/bench_parity.py.)

Definitions (as in `python -m sglang.bench_serving`, which also opens a connection per request):
- TTFT: from the start of a request (before its connection is set up) to its first non-empty streamed chunk.
  Each result also keeps `sent_s`, the time to its first byte written: GuideLLM starts its clock there
  (at the first header write), so its TTFT and E2E leave the connection's set-up out.
- ITL: the gaps between successive non-empty chunks of a request (a chunk may hold several tokens).
- TPOT of a request: (E2E latency - TTFT) / (output tokens - 1), for requests with more than one token.
- E2E latency: from the start of a request (as TTFT) to the end of its stream.
- duration: from the start of the point to the completion of its last request.
- output throughput: sum of output tokens / duration; total throughput: (input + output) / duration;
  request throughput: completed requests / duration.
- achieved concurrency: sum of E2E latencies / duration.
Token counts come from the server's `usage` (the last chunk), never from counting chunks. Statistics:
mean, median, p90, p99 (numpy percentiles) over completed requests; failures are counted apart.

Every request runs within overall deadlines (helpers.serving.fetch.Deadlines, from the chapter's request
time limit): to connect, to the reply's headers, and for the whole stream. A server that trickles bytes
or sends SSE keep-alive comments only is cut off at the limit, and the failure says so
(`error_kind` "timeout"); the other kinds are "connect", "http", "error-body" (an error inside a 200
reply), "bad-body" (a 200 reply that is not an event stream: a web page, events that are not JSON), "protocol"
(not valid HTTP/1.1, or past its header limits: helpers.serving.fetch), "too-large" (more body, or a longer
event, than the client reads), "truncated" (the connection ended inside the body: short of its Content-Length or
inside a chunk), "empty" (a well-formed reply with no content, or a stream that ended before its first chunk),
"no-usage", "bad-usage" (token counts that cannot be right: helpers.serving.usage; such a request is not ok, so
no throughput rests on its count), "not-run" (a request its point's time limit kept from starting: counted as
`not_run`, not as failed) and "exception".
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Sequence

import numpy as np

from helpers.serving.fetch import (Deadlines, Endpoint, ReplyError, RequestTimeout, fetch, open_stream,
                                   run as _run_coro)
from helpers.serving.sse import EventTooLong, sse_data
from helpers.serving.usage import tokens, usage_problem

STATS = ("mean", "median", "p90", "p99")


class BenchmarkError(ValueError):
    """A benchmark cannot run with the given inputs."""


class ServerUnreachable(ConnectionError):
    """Nothing answers at the server URL."""


#: the most tokens one side of a request may have (2^20: beyond every served model's context)
MAX_TOKENS = 1 << 20


@dataclass(frozen=True)
class Workload:
    """Fixed-length random requests: `input_len` prompt tokens, `output_len` generated tokens."""

    input_len: int
    output_len: int

    def __post_init__(self):
        for k in ("input_len", "output_len"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS:
                raise BenchmarkError(f"Workload.{k} = {str(v)[:40]}: expected a whole number of tokens from 1 to "
                                     f"{MAX_TOKENS} (a request longer than any model's context is a typo)")

    @property
    def name(self) -> str:
        return f"{self.input_len}/{self.output_len}"

    @classmethod
    def parse(cls, text: str) -> "Workload":
        """'256/256' -> Workload(256, 256)."""
        try:
            a, b = str(text).split("/")
            return cls(int(a), int(b))
        except (ValueError, TypeError):
            raise BenchmarkError(
                f"workload {str(text)[:60]!r} is not 'INPUT/OUTPUT' token counts (e.g. '256/256' or '128/512')") from None


@dataclass
class RequestResult:
    ok: bool
    start_s: float = 0.0                 # seconds from the point's start
    sent_s: float = float("nan")         # from the request's start to its first byte written (connection set up)
    written_s: float = float("nan")      # ... to its last byte written (issue 46: the request's phases)
    headers_s: float = float("nan")      # ... to the reply's status line and headers in (its first byte)
    ttft_s: float = float("nan")
    e2e_s: float = float("nan")
    itl_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    text: str = ""
    error: str = ""
    error_kind: str = ""                 # "" when ok; else timeout, connect, http, error-body, empty, no-usage,
    #                                      bad-usage, exception


def check_concurrencies(concurrencies: Sequence[int]) -> list[int]:
    if isinstance(concurrencies, (str, bytes)) or not hasattr(concurrencies, "__iter__"):
        raise BenchmarkError(f"concurrencies = {concurrencies!r}: expected a list of positive integers, e.g. [1, 4, 16]")
    out = []
    for c in concurrencies:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise BenchmarkError(
                f"concurrency {c!r} is not allowed: expected a positive integer (requests in flight), e.g. 1, 8, 64")
        out.append(int(c))
    if not out:
        raise BenchmarkError("concurrencies is empty: give at least one positive integer, e.g. [1]")
    return out


def check_reachable(base_url: str, timeout_s: float = 5.0, path: str = "/v1/models") -> dict:
    """GET <base_url><path> within `timeout_s` in all; raise ServerUnreachable naming the URL if nothing
    answers in time."""
    if not base_url.startswith(("http://", "https://")):
        raise BenchmarkError(f"server URL {base_url!r}: expected http://HOST:PORT (e.g. http://127.0.0.1:8000)")
    url = base_url.rstrip("/") + path
    try:
        r = fetch(url, deadlines=Deadlines(timeout_s, timeout_s, timeout_s))
    except (RequestTimeout, ConnectionError, OSError, ValueError) as e:
        raise ServerUnreachable(
            f"cannot reach the server at {base_url} ({e}); start it, or fix the URL "
            "(the `server_url` parameter)") from None
    if r.status != 200:
        raise ServerUnreachable(f"{url} answered HTTP {r.status}; is this an OpenAI-compatible server?")
    try:
        return r.json() or {}
    except ValueError:
        raise ServerUnreachable(f"{url} answered HTTP 200 with a body that is not JSON ({r.text[:120]!r}); "
                                "is this an OpenAI-compatible server?") from None


def served_model(base_url: str) -> str:
    """The first model id the server lists at /v1/models."""
    data = check_reachable(base_url).get("data") or []
    if not data:
        raise ServerUnreachable(f"{base_url}/v1/models lists no model; pass the model name explicitly")
    return data[0]["id"]


def make_prompts(n: int, input_len: int, tokenizer=None, seed: int = 0) -> list[str]:
    """`n` random prompts of about `input_len` tokens.

    With a tokenizer (as sglang's `random-ids`): random ids from its ordinary vocabulary, decoded to
    text. Without: random common words, about one token each. The server's usage reports the real
    prompt length either way."""
    rng = random.Random(seed)
    if tokenizer is not None:
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        ids = [i for i in range(len(tokenizer)) if i not in special]
        out = []
        for _ in range(n):
            toks = [rng.choice(ids) for _ in range(input_len)]
            for _ in range(4):  # decoding and re-encoding merges tokens: top up / trim to the length
                text = tokenizer.decode(toks)
                toks = tokenizer.encode(text, add_special_tokens=False)
                if len(toks) == input_len:
                    break
                toks = toks[:input_len] + [rng.choice(ids) for _ in range(input_len - len(toks))]
            out.append(tokenizer.decode(toks))
        return out
    words = ("time data model token server value layer batch cache query point range world light "
             "water house paper music table river stone night green").split()
    return [" ".join(rng.choice(words) for _ in range(input_len)) for _ in range(n)]


def parse_reply(status: int, text: str, chat: bool = True) -> tuple[str, str, str]:
    """(content, kind, error) of a whole completion reply (JSON, not a stream): the one reader of such replies,
    for the smoke test and for a stream request answered with a plain JSON body. `kind` is "" (content), http,
    bad-body, error-body (an error object inside an HTTP 200 reply: sglang's NaN message) or empty."""
    import json

    shown = text[:300]
    if status != 200:
        return "", "http", f"HTTP {status}: {shown}"
    try:
        d = json.loads(text)
    except ValueError:
        return "", "bad-body", f"HTTP 200 with a body that is not JSON: {shown!r}"
    if isinstance(d, dict) and d.get("error"):
        err = d["error"]
        msg = err.get("message", "") if isinstance(err, dict) else str(err)
        return "", "error-body", f"error in an HTTP 200 reply: {msg}"[:300]
    where = "choices[0].message.content" if chat else "choices[0].text"
    try:
        content = d["choices"][0]["message"]["content"] if chat else d["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return "", "bad-body", f"HTTP 200 without {where}: {shown!r}"[:300]
    if not content:
        return "", "empty", ""
    return str(content), "", ""


class _WholeReply(Exception):
    """A stream request answered with a whole JSON reply: its kind and error (parse_reply)."""

    def __init__(self, kind: str, error: str):
        super().__init__(error)
        self.kind, self.error = kind, error


class _StatusError(Exception):
    """A reply whose status is not 200: the status and the start of its body."""

    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


class _TooMany(Exception):
    """A stream that carried more events than a request of its max_tokens can have (EVENTS_PER_TOKEN)."""

    kind = "too-large"


class _StreamError(Exception):
    """An error object inside a 200 stream (`data: {"error": {...}}`)."""

    def __init__(self, err):
        msg = err.get("message") if isinstance(err, dict) else None
        self.detail = json.dumps(err, default=str)[:300]
        super().__init__(msg or "an error occurred during streaming")


def request_body(model: str, prompt: str, max_tokens: int, chat: bool) -> tuple[str, dict]:
    """(path, JSON body) of one streamed completion request, usage included (stream_options.include_usage)."""
    body = {"model": model, "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if chat:
        return "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": prompt}]}
    return "/v1/completions", {**body, "prompt": prompt}


#: the most body bytes one stream may send: STREAM_BYTES_BASE plus STREAM_BYTES_PER_TOKEN for each token asked
#: for (a chunk of one token is some 100-300 bytes of JSON; this leaves room for logprobs and long ids)
STREAM_BYTES_BASE, STREAM_BYTES_PER_TOKEN = 1 << 20, 16 << 10
#: the most events one stream may carry: EVENTS_PER_TOKEN for each token asked for, and EVENTS_EXTRA more (a
#: role chunk, a finish chunk, usage): a server streams at most one event a token, so a flood of events is cut
#: off as soon as it is one, not held until the request's deadline
EVENTS_PER_TOKEN, EVENTS_EXTRA = 4, 16


async def one_request(endpoint: Endpoint, model: str, prompt: str, max_tokens: int, t_origin: float,
                      deadlines: Deadlines, chat: bool) -> RequestResult:
    """One streamed request on a connection of its own (fetch.open_stream): its timings, text and usage. The
    clock starts before the connection is set up (as sglang's bench_serving, which opens a session per
    request); `sent_s` says when the request's first byte was written (where GuideLLM starts its clock)."""
    res = RequestResult(ok=False)
    t0 = time.perf_counter()
    res.start_s = t0 - t_origin
    state = {"last": None, "chunks": 0, "headers_s": None, "t0": t0, "done": False, "chunks_at": [],
             "most": EVENTS_PER_TOKEN * max_tokens + EVENTS_EXTRA, "most_tokens": max_tokens}
    parts, usages, seen = [], [], {}
    path, body = request_body(model, prompt, max_tokens, chat)

    async def stream_it():
        reply = await open_stream(endpoint, path, body, deadlines, t0)
        state["headers_s"] = res.headers_s = reply.headers_at - t0
        res.sent_s, res.written_s = reply.sent_at - t0, reply.written_at - t0
        try:
            await _read_stream(reply, chat, max_tokens, res, state, parts, usages, seen)
        finally:
            reply.close()

    try:
        await asyncio.wait_for(stream_it(), deadlines.total_s)
        res.e2e_s = time.perf_counter() - t0
        res.text = "".join(parts)
        _count(res, usages, state, max_tokens, seen)
    except Exception as e:  # noqa: BLE001 - every failure is recorded, none stops the point
        res.e2e_s = time.perf_counter() - t0
        res.text = "".join(parts)
        res.error_kind, res.error = _failure(e, deadlines, state, res.text)
    return res


async def _read_stream(reply, chat: bool, max_tokens: int, res: RequestResult, state: dict, parts: list,
                       usages: list, seen: dict) -> None:
    """Read one reply: an error status, a whole JSON reply or a body that is not an event stream raise; the
    events of a stream are taken as they arrive, up to `[DONE]`."""
    ctype = reply.headers.get("content-type", "").lower()
    if reply.status != 200:
        raise _StatusError(reply.status, _error_text((await reply.read(1 << 16)).decode("utf-8", "replace")))
    if "json" in ctype and "event-stream" not in ctype:   # not a stream: read it as the smoke test does
        text = (await reply.read()).decode("utf-8", "replace")
        _, kind, err = parse_reply(reply.status, text, chat)
        raise _WholeReply(kind or "bad-body", err or f"the server answered a stream request with a whole JSON "
                          f"reply instead of a stream: {text[:200]!r}")
    if ctype and "event-stream" not in ctype:             # a web page, plain text: named, not read as a stream
        text = (await reply.read(1 << 12)).decode("utf-8", "replace")
        raise _WholeReply("bad-body", f"HTTP 200 with Content-Type {ctype!r}, not an event stream "
                          f"(text/event-stream): {text[:200]!r}")
    cap = STREAM_BYTES_BASE + STREAM_BYTES_PER_TOKEN * max_tokens
    async for data in sse_data(reply.chunks(cap), seen):
        now = time.perf_counter()
        if data.startswith("[DONE]"):
            state["done"] = True
            break
        _chunk(json.loads(data), now, chat, res, state, parts, usages)


def _chunk(d, now: float, chat: bool, res: RequestResult, state: dict, parts: list, usages: list) -> None:
    """Take one streamed chunk (parsed JSON) received at `now`: its content's timing and text, then its usage
    (with the content chunks so far, this one included: usage.usage_problem reads them)."""
    if isinstance(d, dict) and d.get("error"):
        raise _StreamError(d["error"])
    state["chunks"] += 1
    if state["chunks"] > state["most"]:
        raise _TooMany(f"the stream carried more than {state['most']} events for a request of at most "
                       f"{state['most_tokens']} tokens (at most {EVENTS_PER_TOKEN} events a token and "
                       f"{EVENTS_EXTRA} more are read): the server sends more than it was asked for")
    if not isinstance(d, dict):
        return
    text = ""
    choices = d.get("choices")
    if choices and isinstance(choices[0], dict):
        c = choices[0]
        text = ((c.get("delta") or {}).get("content") or "") if chat else (c.get("text") or "")
    if text:
        if state["last"] is None:
            res.ttft_s = now - state["t0"]
        else:
            res.itl_s.append(now - state["last"])
        state["last"] = now
        parts.append(str(text))
    if d.get("usage") is not None:
        u = d["usage"]
        usages.append(SimpleNamespace(**u) if isinstance(u, dict) else SimpleNamespace())
        state["chunks_at"].append(len(parts))


def _count(res: RequestResult, usages: list, state: dict, max_tokens: int, seen: dict) -> None:
    """A stream that ended: its token counts from the usage chunk; ok unless it had no chunk at all, no usage,
    usage that cannot be right (usage.usage_problem) or no content."""
    if not usages:
        if state["chunks"] == 0:
            if seen.get("other"):
                res.error_kind = "bad-body"
                res.error = (f"the body is not an event stream: no `data:` event, and a line {seen['other']!r} "
                             "(the server must stream text/event-stream)")
            else:
                res.error_kind = "empty"
                res.error = ("the stream ended before its first chunk: " + (
                    "the server sent `data: [DONE]` first" if state["done"] else
                    "the server ended it without a `data:` event") + " (no content and no token counts)")
            return
        res.error_kind = "no-usage"
        res.error = "the stream carried no usage (token counts); the server must support stream_options.include_usage"
        return
    why = usage_problem(usages, max_tokens, len(res.itl_s) + (state["last"] is not None), state["chunks_at"])
    if why:
        res.error_kind, res.error = "bad-usage", why
        return
    res.prompt_tokens = tokens(usages[-1], "prompt_tokens")
    res.output_tokens = tokens(usages[-1], "completion_tokens")
    if state["last"] is None:
        res.error_kind = "empty"
        res.error = f"empty reply: the stream was well formed but carried no content ({res.output_tokens} tokens)"
        return
    res.ok = True


def _failure(e: Exception, deadlines: Deadlines, state: dict, text: str) -> tuple[str, str]:
    """(error_kind, error) of a request that raised `e`; `text`: the content that came before it."""
    if isinstance(e, RequestTimeout):
        return "timeout", str(e)
    if isinstance(e, asyncio.TimeoutError):
        heads = "no headers" if state["headers_s"] is None else f"headers after {state['headers_s']:.2f} s"
        return "timeout", (f"timeout: the reply did not finish within {deadlines.total_s:g} s (total deadline; "
                           f"{heads}, {state['chunks']} chunk(s), {len(text)} characters of content)")
    if isinstance(e, (ReplyError, EventTooLong, _TooMany)):   # not HTTP, past a limit, cut short: what came is named
        return e.kind, (f"{e} ({state['chunks']} chunk(s), {len(text)} characters of content had been read)")[:500]
    if isinstance(e, _WholeReply):
        return e.kind, e.error[:500]
    if isinstance(e, _StatusError):
        return "http", str(e)[:500]
    if isinstance(e, _StreamError):
        return "error-body", f"error in the reply: {e} {e.detail}"[:500]
    if isinstance(e, ValueError) and state["headers_s"] is not None:   # a `data:` event that is not JSON
        return "bad-body", f"an event of the stream is not JSON ({type(e).__name__}: {e})"[:500]
    if isinstance(e, OSError) and state["headers_s"] is None:   # refused, reset, closed before a reply
        return "connect", f"{type(e).__name__}: {e}{_causes(e)}"[:500]
    return "exception", f"{type(e).__name__}: {e}"[:500]


def _causes(e: BaseException) -> str:
    """' (Cause: message; ...)' from the exceptions that caused `e`, or '' where there are none."""
    said, seen, c = [], set(), e.__cause__ or e.__context__
    while c is not None and id(c) not in seen and len(said) < 3:
        seen.add(id(c))
        text = f"{type(c).__name__}: {c}"
        if str(c) and text not in said:
            said.append(text)
        c = c.__cause__ or c.__context__
    return f" ({'; '.join(said)})" if said else ""


def _error_text(body: str) -> str:
    """An error reply's body for the message: its `error` object (as JSON) where it has one, else its text."""
    try:
        d = json.loads(body)
    except ValueError:
        return body[:300]
    if isinstance(d, dict) and "error" in d:
        d = d["error"]
    return json.dumps(d, default=str)[:300] if not isinstance(d, str) else d[:300]


@dataclass(frozen=True)
class Window:
    """When a point's requests may start and when they must end (time.monotonic() instants; None: no bound).
    No request starts after `stop` (the point's own time limit: those in flight run on, within their own
    deadlines, so a point ends at most one request time limit after it); none runs past `end` (the phase's or
    the study's end: a request in flight there is cut off). A request that could not start is recorded as not
    run (error_kind "not-run"), not as a failure of the server."""

    stop: float | None = None
    end: float | None = None

    @classmethod
    def of(cls, limit_s: float | None = None, until: float | None = None) -> "Window":
        """The window of a point starting now with a time limit of `limit_s` seconds, inside a phase ending at `until`."""
        stop = None if limit_s is None else time.monotonic() + float(limit_s)
        if until is not None:
            stop = until if stop is None else min(stop, until)
        return cls(stop, until)

    def deadlines(self, d: Deadlines) -> Deadlines | None:
        """`d` for a request starting now (cut to the window's end), or None where it may not start."""
        now = time.monotonic()
        if (self.stop is not None and now >= self.stop) or (self.end is not None and now >= self.end):
            return None
        return d if self.end is None else d.within(self.end - now)

    @staticmethod
    def not_run(start_s: float) -> RequestResult:
        return RequestResult(ok=False, error_kind="not-run", start_s=start_s,
                             error="not run: the point's time limit had passed before it could start")


async def run_requests(base_url: str, model: str, prompts: Sequence[str], max_tokens: int, concurrency: int,
                       timeout_s: float = 600.0, chat: bool = False, api_key: str = "none",
                       deadlines: Deadlines | None = None, until: float | None = None,
                       limit_s: float | None = None) -> tuple[list[RequestResult], float]:
    """Send every prompt with at most `concurrency` in flight; return (results, duration_s). Each request
    runs within `deadlines` (default: Deadlines.from_timeout(timeout_s)). With `limit_s` (seconds from now) no
    request starts after it; with `until` (a time.monotonic() instant: the end of the phase the requests belong
    to) none starts or runs past it (Window). A request that could not start is "not-run"."""
    (concurrency,) = check_concurrencies([concurrency])
    d = deadlines or Deadlines.from_timeout(timeout_s)
    window = Window.of(limit_s, until)
    sem = asyncio.Semaphore(concurrency)
    t_origin = time.perf_counter()

    async def gated(p):
        async with sem:
            dd = window.deadlines(d)
            if dd is None:
                return Window.not_run(time.perf_counter() - t_origin)
            return await one_request(endpoint, model, p, max_tokens, t_origin, dd, chat)

    endpoint = await Endpoint.resolve(base_url, api_key)
    results = await asyncio.gather(*(gated(p) for p in prompts))
    return list(results), time.perf_counter() - t_origin


def run_sync(coro):
    """Run a coroutine to completion, also from inside a running event loop (a Jupyter kernel), where it
    runs in a fresh loop on a worker thread."""
    return _run_coro(coro)


def _stats(prefix: str, values_s: Sequence[float]) -> dict:
    v = np.asarray([x for x in values_s if np.isfinite(x)], dtype=float) * 1e3
    if not len(v):
        return {f"{s}_{prefix}_ms": float("nan") for s in STATS}
    return {f"mean_{prefix}_ms": float(v.mean()), f"median_{prefix}_ms": float(np.median(v)),
            f"p90_{prefix}_ms": float(np.percentile(v, 90)), f"p99_{prefix}_ms": float(np.percentile(v, 99))}


def summarize(results: Sequence[RequestResult], duration_s: float) -> dict:
    """bench_serving's metrics for one point (see the module docstring for the definitions)."""
    ok = [r for r in results if r.ok]
    not_run = sum(1 for r in results if r.error_kind == "not-run")
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens for r in ok)
    tpot = [(r.e2e_s - r.ttft_s) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    itl = [x for r in ok for x in r.itl_s]
    row = {
        "completed": len(ok), "failed": len(results) - len(ok) - not_run, "not_run": not_run, "duration_s": duration_s,
        "total_input_tokens": in_tok, "total_output_tokens": out_tok,
        "request_throughput": len(ok) / duration_s if duration_s > 0 else float("nan"),
        "output_throughput": out_tok / duration_s if duration_s > 0 else float("nan"),
        "total_throughput": (in_tok + out_tok) / duration_s if duration_s > 0 else float("nan"),
        "achieved_concurrency": sum(r.e2e_s for r in ok) / duration_s if duration_s > 0 else float("nan"),
    }
    row["per_stream_output_throughput"] = (
        float(np.mean([(r.output_tokens) / r.e2e_s for r in ok if r.e2e_s > 0])) if ok else float("nan"))
    row.update(_stats("ttft", [r.ttft_s for r in ok]))
    row.update(_stats("itl", itl))
    row.update(_stats("tpot", tpot))
    row.update(_stats("e2e_latency", [r.e2e_s for r in ok]))
    row["timed_out"] = sum(1 for r in results if r.error_kind == "timeout")
    errors = sorted({r.error for r in results if not r.ok})
    row["errors"] = " | ".join(errors)[:1000]
    return row


def requests_for(concurrency: int, per_concurrency: int = 5, minimum: int = 1) -> int:
    """Requests for one point: `per_concurrency` x concurrency (sglang's steady-state rule), at least `minimum`."""
    if per_concurrency < 1:
        raise BenchmarkError(f"requests per concurrency = {per_concurrency}: expected >= 1 (sglang's docs advise 5)")
    return max(minimum, per_concurrency * concurrency)


def run_point(base_url: str, model: str, workload: Workload, concurrency: int, num_requests: int,
              tokenizer=None, seed: int = 0, timeout_s: float = 600.0, chat: bool = False,
              warmup: int = 1) -> dict:
    """Benchmark one (workload, concurrency) point and return its metric row (bench_serving's fields)."""
    (concurrency,) = check_concurrencies([concurrency])
    if num_requests < 1:
        raise BenchmarkError(f"num_requests = {num_requests}: expected at least 1")
    prompts = make_prompts(num_requests + warmup, workload.input_len, tokenizer, seed)
    late = []
    if warmup:
        warm, _ = run_sync(run_requests(base_url, model, prompts[:warmup], min(workload.output_len, 8), 1, timeout_s,
                                        chat))
        late = [r for r in warm if r.error_kind == "timeout"]
    if late:   # the server did not answer the warm-up in time: the point's requests would only wait as long again
        results = [RequestResult(ok=False, error_kind="timeout",
                                 error=f"not sent: the warm-up request ran out of time ({late[0].error})"[:500])
                   for _ in range(num_requests)]
        duration = 0.0
    else:
        results, duration = run_sync(run_requests(base_url, model, prompts[warmup:], workload.output_len,
                                                  concurrency, timeout_s, chat))
    row = {"workload": workload.name, "input_len": workload.input_len, "output_len": workload.output_len,
           "concurrency": concurrency, "num_requests": num_requests}
    row.update(summarize(results, duration))
    return row


# -- sglang's own benchmark output -----------------------------------------------------------------
_BENCH_FIELDS = {
    "duration": "duration_s", "completed": "completed", "total_input_tokens": "total_input_tokens",
    "total_output_tokens": "total_output_tokens", "request_throughput": "request_throughput",
    "output_throughput": "output_throughput", "concurrency": "achieved_concurrency",
    "max_concurrency": "concurrency", "random_input_len": "input_len", "random_output_len": "output_len",
}


def parse_bench_serving_jsonl(path) -> "pd.DataFrame":  # noqa: F821
    """Rows of `python -m sglang.bench_serving --output-file X.jsonl` in this module's columns."""
    import json

    import pandas as pd

    rows = []
    for n, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            raise BenchmarkError(f"{path}, line {n}: not JSON; expected bench_serving's --output-file lines") from None
        row = {new: d.get(old) for old, new in _BENCH_FIELDS.items()}
        if row["duration_s"] and row["total_input_tokens"] is not None:
            row["total_throughput"] = (row["total_input_tokens"] + row["total_output_tokens"]) / row["duration_s"]
        for m in ("ttft", "tpot", "itl", "e2e_latency"):
            for s in ("mean", "median", "p90", "p99"):
                row[f"{s}_{m}_ms"] = d.get(f"{s}_{m}_ms")
        if row["input_len"] and row["output_len"]:
            row["workload"] = f"{row['input_len']}/{row['output_len']}"
        row["failed"] = (d.get("num_prompts") or row["completed"] or 0) - (row["completed"] or 0) if d.get("num_prompts") else 0
        row["tool"] = "sglang.bench_serving"
        rows.append(row)
    return pd.DataFrame(rows)
