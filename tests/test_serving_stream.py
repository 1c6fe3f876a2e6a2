"""The client's own streaming path (issue 38, parity with GuideLLM): server-sent events read as they arrive over
a connection of its own, chunked or not, and each request's `sent_s` (its first byte written, where GuideLLM
starts its clock) kept beside its TTFT. Against real local servers (the stand-in, and a chunked SSE server
here that splits events across chunks)."""
import asyncio
import json
import threading
import time

import pytest

from helpers.serving import client as cl
from helpers.serving.fetch import Deadlines, Endpoint
from helpers.serving.standin import StandIn

pytestmark = pytest.mark.timeout(120)


async def _gen(pieces):
    for p in pieces:
        yield p


def _collect(pieces):
    async def go():
        return [d async for d in cl.sse_data(_gen(pieces))]
    return asyncio.run(go())


def test_sse_events_split_anywhere_are_read_whole():
    stream = (b': keep-alive\n\ndata: {"a": 1}\r\n\r\ndata: {"b":\ndata: 2}\n\nevent: x\ndata: [DONE]\n\n')
    whole = _collect([stream])
    assert whole == ['{"a": 1}', '{"b":\n2}', "[DONE]"]
    for cut in range(1, len(stream)):                      # every split point of the bytes gives the same events
        assert _collect([stream[:cut], stream[cut:]]) == whole, cut
    assert _collect([stream[i:i + 1] for i in range(len(stream))]) == whole


def test_sent_s_is_before_the_first_token_and_leaves_the_servers_wait_after_it():
    with StandIn(ttft_s=0.05, interval_s=0.005) as srv:
        res, _ = cl.run_sync(cl.run_requests(srv.url, "standin", ["p"] * 4, 8, 2, timeout_s=30))
    assert all(r.ok for r in res), [r.error for r in res]
    for r in res:
        assert 0 < r.sent_s < r.ttft_s < r.e2e_s
        assert r.ttft_s - r.sent_s >= 0.05          # the stand-in waits its TTFT after the request arrived
        assert len(r.itl_s) == 7 and r.output_tokens == 8 and r.text == " t" * 8


class _ChunkedSSE:
    """A real asyncio server on 127.0.0.1 that answers every request with a chunked SSE stream whose events are
    split across transfer chunks, content GAP_S apart, then usage and [DONE]. The k-th connection's first content
    reads "one<k>", and `writes[k]` records (time.perf_counter()) the instant before each of its events was
    written: the server's own record, which a test sets beside the client's time stamps (one clock, one process)."""

    GAP_S = 1.0

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.writes: list[list[float]] = []

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        n = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
        await reader.readexactly(n)
        k, stamps = len(self.writes), []
        self.writes.append(stamps)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        events = [{"choices": [{"index": 0, "text": t}]} for t in (f"one{k}", "two")]
        events.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
        body = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        for i, ev in enumerate(body):
            stamps.append(time.perf_counter())
            for part in (ev[:7], ev[7:]):                  # each event in two transfer chunks
                writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await writer.drain()
            if i == 0:
                await asyncio.sleep(self.GAP_S)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    def __enter__(self):
        self.thread.start()
        self.ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.mark.integration
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_chunked_stream_is_read_as_it_arrives(host):
    """Each request's first token is stamped before its server even wrote the second event, a whole GAP_S
    later (a client that read the stream to its end first would stamp both after it), and the second token
    after the server wrote it. Both are set against the server's own record, not a wall-clock constant: a
    loaded machine fails the first only if it holds the client back for the whole gap (1 s), and never the
    second. (With a 0.3-s gap and `GAP_S <= itl + 1 ms`, one run on a loaded machine read 0.298.)"""
    sse = _ChunkedSSE()
    with sse as url:
        async def go():
            ep = await Endpoint.resolve(url.replace("127.0.0.1", host))
            t_origin = time.perf_counter()
            res = await asyncio.gather(*(cl.one_request(ep, "m", p, 2, t_origin, Deadlines.from_timeout(20), False)
                                         for p in ("p", "q")))
            return t_origin, res
        t_origin, res = asyncio.run(go())
    assert all(r.ok for r in res), [r.error for r in res]
    assert sorted(r.text for r in res) == ["one0two", "one1two"]
    for r in res:
        assert r.output_tokens == 2 and r.prompt_tokens == 3
        first, second, usage, done = sse.writes[int(r.text[3])]
        got_first = t_origin + r.start_s + r.ttft_s
        got_second = got_first + r.itl_s[0]
        assert first <= got_first < second <= got_second     # the first token timed on arrival, not at the end
        assert t_origin + r.start_s + r.e2e_s >= done           # the stream ends after the server's last event


def test_an_endpoint_tries_each_address_of_its_host():
    """A host name may resolve to an address nothing listens on (localhost's ::1 beside 127.0.0.1): the next is
    tried, and the one that answered goes first; where none answers the request fails as a refused connection."""
    with StandIn() as srv:
        async def go(addrs):
            ep = await Endpoint.resolve(srv.url)
            ep.addrs = addrs
            r = await cl.one_request(ep, "standin", "p", 4, time.perf_counter(), Deadlines.from_timeout(10), False)
            return r, ep.addrs
        r, order = asyncio.run(go(["127.0.0.2", "127.0.0.1"]))    # the stand-in listens on 127.0.0.1 only
        assert r.ok and order == ["127.0.0.1", "127.0.0.2"], r.error
        r, _ = asyncio.run(go(["127.0.0.2"]))
    assert r.error_kind == "connect" and "refused" in r.error.lower(), r.error
