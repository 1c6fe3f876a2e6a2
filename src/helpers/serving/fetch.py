"""HTTP requests with overall deadlines, and limits on everything a server controls, over aiohttp.

A socket time limit applies to each read, so a server that sends its headers and then a byte every few
seconds (or SSE keep-alive comments only) keeps such a request waiting for ever. Here every limit is a
deadline from the start of the request:

    d = Deadlines.from_timeout(30)          # connect within 10 s, headers and the whole reply within 30 s
    reply = fetch("http://127.0.0.1:8000/v1/chat/completions", body={...}, deadlines=d)
    reply.status, reply.json(), reply.elapsed_s

A limit that passes raises RequestTimeout, which says which limit, after how long, and what had arrived
by then (the evidence a classification shows).

What a server sends is bounded before it is held (issue 47: a server sending endless headers took the hand-written
client of 1beba90 to 1.6 GB, and a declared 2 GiB chunk was read whole before any check): the HTTP/1.1 parsing is
aiohttp's (its C parser, as sglang's bench_serving uses it), with at most MAX_HEADERS header lines of at most
MAX_HEADER_LINE bytes each (the status line too), a body read as it arrives whatever a chunk declares, and
at most `max_bytes` of body. A reply that breaks any of these, or that is not HTTP, raises ReplyError naming the
URL, what was wrong and what had arrived (`kind` "protocol", "too-large" or "truncated": a body cut short of its
Content-Length, or inside a chunk, is never taken for a whole reply). One connection per request
(`Connection: close`), as before.
"""
from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import time
import urllib.parse
from dataclasses import dataclass, field
from types import SimpleNamespace

import aiohttp
from aiohttp.abc import AbstractResolver

#: the most header lines a reply may carry, and the most bytes of its status line or of one header field
MAX_HEADERS = 100
MAX_HEADER_LINE = 8190
#: the most body bytes `fetch` reads (a health check, a smoke reply, /v1/models)
MAX_BODY = 4 << 20


class RequestTimeout(TimeoutError):
    """A request's deadline passed: `phase` is "connect", "first byte" or "total"."""

    def __init__(self, url: str, phase: str, limit_s: float, elapsed_s: float, received: bytes = b"",
                 status: int | None = None):
        self.url, self.phase, self.limit_s, self.elapsed_s = url, phase, limit_s, elapsed_s
        self.received, self.status = received, status
        what = {"connect": "no connection", "first byte": "no reply (not even headers)",
                "total": "the reply did not finish"}[phase]
        got = f"; {len(received)} body bytes had arrived" if phase == "total" else ""
        head = f" (HTTP {status} headers came)" if status is not None and phase == "total" else ""
        super().__init__(f"timeout: {what} within {limit_s:g} s ({phase} deadline) from {url}{head}{got}")


class ReplyError(ValueError):
    """A reply that cannot be read as it should: `kind` "protocol" (not valid HTTP/1.1, or past a header limit),
    "too-large" (more body than allowed) or "truncated" (the connection ended inside the body); `received`: how
    many body bytes had arrived."""

    def __init__(self, url: str, kind: str, what: str, received: int = 0, status: int | None = None):
        self.url, self.kind, self.received, self.status = url, kind, received, status
        super().__init__(f"{url}: {what}")


@dataclass(frozen=True)
class Deadlines:
    """The limits of one request, in seconds from its start: to connect, to the first byte of the reply
    (its status line), and for the whole reply (its last byte)."""

    connect_s: float = 10.0
    first_byte_s: float = 600.0
    total_s: float = 600.0

    def __post_init__(self):
        for k in ("connect_s", "first_byte_s", "total_s"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"Deadlines.{k} = {v!r}: expected a positive, finite number of seconds")
        if self.first_byte_s > self.total_s or self.connect_s > self.total_s:
            raise ValueError(f"Deadlines: connect ({self.connect_s:g} s) and first byte ({self.first_byte_s:g} s) "
                             f"must come within the total ({self.total_s:g} s)")

    @classmethod
    def from_timeout(cls, timeout_s: float, connect_s: float = 10.0) -> "Deadlines":
        """A chapter's request time limit as deadlines: the whole request (and so its first byte) within
        `timeout_s`, the connection within min(connect_s, timeout_s)."""
        t = float(timeout_s)
        return cls(min(connect_s, t), t, t)

    def within(self, total_s: float) -> "Deadlines":
        """The same deadlines, none later than `total_s` (what is left of a phase's time)."""
        t = max(float(total_s), 1e-3)
        return Deadlines(min(self.connect_s, t), min(self.first_byte_s, t), min(self.total_s, t))


@dataclass
class Reply:
    url: str
    status: int
    headers: dict = field(default_factory=dict)
    body: bytes = b""
    elapsed_s: float = 0.0

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body or b"null")


#: the host name an Endpoint's requests are addressed to inside aiohttp (a reserved name that never resolves):
#: aiohttp asks _Addresses for it, even where the server's host is an IP address, which aiohttp would not look up
ENDPOINT_HOST = "endpoint.invalid"


class _Addresses(AbstractResolver):
    """aiohttp's name lookup for an Endpoint: its addresses, resolved once, in its current order (no lookup on a
    worker thread per connection); aiohttp tries them in turn."""

    def __init__(self, ep: "Endpoint"):
        self.ep = ep

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        if host != ENDPOINT_HOST:
            raise OSError(f"{host}: not this endpoint's host ({self.ep.host})")
        return [{"hostname": self.ep.host, "host": a, "port": port, "proto": 0, "flags": socket.AI_NUMERICHOST,
                 "family": socket.AF_INET6 if ":" in a else socket.AF_INET} for a in self.ep.addrs]

    async def close(self) -> None:
        pass


async def _connected(session, ctx, params) -> None:   # aiohttp's trace: a connection is set up
    ctx.trace_request_ctx.connected = True


async def _sent(session, ctx, params) -> None:        # the request's headers go to the socket (its first byte)
    ctx.trace_request_ctx.sent_at = time.perf_counter()


async def _written(session, ctx, params) -> None:     # a chunk of the request's body went to the socket (issue 46)
    ctx.trace_request_ctx.written_at = time.perf_counter()


def session(resolver: AbstractResolver | None = None) -> aiohttp.ClientSession:
    """An aiohttp session with this module's limits: a new connection per request (closed after it), no
    decompression, no cookies, aiohttp's own time limits off (the Deadlines are kept here), and a trace that marks
    when each request is connected and its first byte written. Create it inside the running event loop."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(_connected)
    trace.on_request_headers_sent.append(_sent)
    trace.on_request_chunk_sent.append(_written)
    connector = aiohttp.TCPConnector(force_close=True, limit=0, use_dns_cache=False, resolver=resolver,
                                     happy_eyeballs_delay=None)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                                 auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                 skip_auto_headers=("Accept-Encoding",), trace_configs=[trace],
                                 max_line_size=MAX_HEADER_LINE, max_field_size=MAX_HEADER_LINE, max_headers=MAX_HEADERS)


def _said(e: BaseException) -> str:
    """aiohttp's message for a parse error, on one line and short."""
    cause = e.__cause__ or e
    text = getattr(cause, "message", None) or str(cause)
    return re.sub(r"\s+", " ", str(text)).strip()[:240]


class StreamReply:
    """An open reply whose status line and headers are in: `status`, `headers` (lower-case names), `sent_at`
    (time.perf_counter() when the request's first byte was written, after the connection was set up),
    `written_at` (its body's last byte written), `headers_at` (when the headers were in), `received` (body
    bytes read so far); `chunks(max_bytes)` yields the
    body as it arrives, `read(max_bytes)` the start of it; `close()`."""

    def __init__(self, url: str, resp: aiohttp.ClientResponse, sent_at: float, headers_at: float):
        self.url, self.resp, self.status = url, resp, resp.status
        self.headers = {k.lower(): v for k, v in resp.headers.items()}
        self.sent_at, self.headers_at, self.received = sent_at, headers_at, 0

    async def chunks(self, max_bytes: int | None = None):
        """The body's bytes as they arrive (chunked coding decoded). More than `max_bytes` in all raises
        ReplyError "too-large"; a body cut short of its Content-Length or inside a chunk raises "truncated", a
        malformed one "protocol", each naming what had arrived."""
        it = self.resp.content.iter_any().__aiter__()
        while True:
            try:
                data = await it.__anext__()
            except StopAsyncIteration:
                return
            except aiohttp.ClientPayloadError as e:
                said = _said(e)
                kind = "truncated" if "not enough data" in said.lower() else "protocol"
                what = ("the reply was cut short: the connection ended inside its body" if kind == "truncated" else
                        "the reply's body is not valid HTTP/1.1")
                raise ReplyError(self.url, kind, f"{what} after {self.received} body bytes had been read "
                                 f"(HTTP {self.status}; {said})", self.received, self.status) from None
            except aiohttp.ClientConnectionError as e:
                raise ReplyError(self.url, "truncated", f"the reply was cut short: the connection failed after "
                                 f"{self.received} body bytes (HTTP {self.status}; {type(e).__name__}: {_said(e)})",
                                 self.received, self.status) from None
            self.received += len(data)
            if max_bytes is not None and self.received > max_bytes:
                raise ReplyError(self.url, "too-large", f"the reply's body passed {max_bytes} bytes, the most this "
                                 f"client reads of such a reply (HTTP {self.status})", self.received, self.status)
            yield data

    async def read(self, max_bytes: int = 1 << 20) -> bytes:
        """The body, or its first `max_bytes` where it is longer (an error reply's text, a whole JSON reply)."""
        out = bytearray()
        async for data in self.chunks():
            out.extend(data[:max_bytes - len(out)])
            if len(out) >= max_bytes:
                break
        return bytes(out)

    def close(self) -> None:
        self.resp.close()


async def _open(s: aiohttp.ClientSession, url: str, method: str, data: bytes | None, headers: dict,
                deadlines: Deadlines, t0: float, target: str | None = None, **kw) -> StreamReply:
    """Send one request on `s` and return once its reply's headers are in, within `deadlines` from `t0` (a
    time.perf_counter() instant: the request's start). `url` names the request in messages; `target`, where given,
    is where aiohttp sends it (an Endpoint's)."""
    mark = SimpleNamespace(connected=False, sent_at=None, written_at=None)
    left = deadlines.connect_s - (time.perf_counter() - t0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=max(left, 1e-3))
    try:
        resp = await asyncio.wait_for(
            s.request(method, target or url, data=data, headers=headers, timeout=timeout, trace_request_ctx=mark,
                      allow_redirects=False, **kw),
            max(deadlines.first_byte_s - (time.perf_counter() - t0), 0))
    except asyncio.TimeoutError:   # aiohttp's connect limit (ConnectionTimeoutError) is one too
        elapsed = time.perf_counter() - t0
        if not mark.connected:
            raise RequestTimeout(url, "connect", deadlines.connect_s, elapsed) from None
        raise RequestTimeout(url, "first byte", deadlines.first_byte_s, elapsed) from None
    except aiohttp.ClientConnectorError as e:   # refused, unreachable, no such host: the OS's own error
        raise (e.os_error if isinstance(e.os_error, OSError) else ConnectionError(f"{url}: {e}")) from e
    except aiohttp.ServerDisconnectedError:
        raise ConnectionError(f"{url}: the server closed the connection without sending a reply") from None
    except aiohttp.ClientResponseError as e:   # aiohttp's parser refused the status line or the headers
        raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: {_said(e)} (this client reads at most "
                         f"{MAX_HEADERS} header lines of {MAX_HEADER_LINE} bytes each)") from None
    reply = StreamReply(url, resp, mark.sent_at or time.perf_counter(), time.perf_counter())
    reply.written_at = mark.written_at or reply.sent_at   # the body's last byte written (issue 46: phases)
    return reply


async def afetch(url: str, method: str = "GET", body=None, deadlines: Deadlines = Deadlines(),
                 read_body: bool = True, max_bytes: int = MAX_BODY) -> Reply:
    """One request within `deadlines` (see the module docstring). `body`: a JSON-able object (POSTed as
    JSON). `read_body=False` returns once the headers are in. Raises RequestTimeout, or OSError /
    ConnectionError when nothing listens, or ReplyError (a ValueError) for a reply that is not HTTP, cut short or
    longer than `max_bytes`."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"URL {url!r}: expected http://HOST:PORT/PATH")
    headers = {"Accept": "application/json, text/event-stream", "User-Agent": "glm5-book"}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    t0 = time.perf_counter()
    async with session() as s:
        reply = await _open(s, url, method, data, headers, deadlines, t0)
        try:
            if not read_body or method == "HEAD" or reply.status in (204, 304):
                return Reply(url, reply.status, reply.headers, b"", time.perf_counter() - t0)
            got = bytearray()

            async def read_all():
                async for piece in reply.chunks(max_bytes):
                    got.extend(piece)
            try:
                await asyncio.wait_for(read_all(), max(deadlines.total_s - (time.perf_counter() - t0), 0))
            except asyncio.TimeoutError:
                raise RequestTimeout(url, "total", deadlines.total_s, time.perf_counter() - t0, bytes(got),
                                     reply.status) from None
            return Reply(url, reply.status, reply.headers, bytes(got), time.perf_counter() - t0)
        finally:
            reply.close()


@dataclass
class Endpoint:
    """Where a run's requests go: the server's base URL, its host resolved once (so no request waits for a
    name lookup on a worker thread), the headers every request carries, and the aiohttp session its requests
    share (one connection each). Close it (`await ep.aclose()`, or `async with`) when the run ends."""

    base_url: str
    host: str
    port: int
    ssl: bool
    addrs: list
    api_key: str = "none"
    session: aiohttp.ClientSession | None = field(default=None, repr=False)

    @classmethod
    async def resolve(cls, base_url: str, api_key: str = "none") -> "Endpoint":
        """The endpoint of `base_url` (http://HOST:PORT) with its host's addresses; a host that does not resolve
        is kept by name, so each request fails with the lookup's own error (a connect failure), not the run."""
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"URL {base_url!r}: expected http://HOST:PORT")
        port = u.port or (443 if u.scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(u.hostname, port, type=socket.SOCK_STREAM)
            addrs = list(dict.fromkeys(i[4][0] for i in infos)) or [u.hostname]
        except OSError:
            addrs = [u.hostname]
        ep = cls(base_url.rstrip("/"), u.hostname, port, u.scheme == "https", addrs, api_key)
        ep.session = session(_Addresses(ep))
        return ep

    def answered(self, reply: StreamReply) -> None:
        """The address that answered `reply` goes first next time."""
        conn = reply.resp.connection
        transport = conn.transport if conn is not None else None   # None where the reply was in before this
        peer = transport.get_extra_info("peername") if transport is not None else None
        if peer and peer[0] in self.addrs and self.addrs[0] != peer[0]:
            self.addrs.insert(0, self.addrs.pop(self.addrs.index(peer[0])))

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def __aenter__(self) -> "Endpoint":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


async def open_stream(ep: Endpoint, path: str, body, deadlines: Deadlines, t0: float) -> StreamReply:
    """POST `body` (JSON) to `path` of `ep` on a connection of its own and return once the reply's headers are
    in, within `deadlines` counted from `t0` (a time.perf_counter() instant: the request's start). Raises
    RequestTimeout (connect or first byte), OSError / ConnectionError (refused; closed before a reply) or
    ReplyError (a reply that is not HTTP, or past the header limits)."""
    host = f"[{ep.host}]" if ":" in ep.host else ep.host
    headers = {"Host": f"{host}:{ep.port}", "Accept": "text/event-stream, application/json",
               "User-Agent": "glm5-book", "Content-Type": "application/json", "Authorization": f"Bearer {ep.api_key}"}
    target = f"{'https' if ep.ssl else 'http'}://{ENDPOINT_HOST}:{ep.port}{path}"
    reply = await _open(ep.session, ep.base_url + path, "POST", json.dumps(body).encode(), headers, deadlines, t0,
                        target, **({"server_hostname": ep.host} if ep.ssl else {}))
    ep.answered(reply)
    return reply


def run(coro):
    """Run a coroutine to completion from synchronous code, also inside a running event loop (a Jupyter
    kernel), where it runs in a fresh loop on a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


def fetch(url: str, method: str = "GET", body=None, deadlines: Deadlines = Deadlines(), read_body: bool = True,
          max_bytes: int = MAX_BODY) -> Reply:
    """`afetch` from synchronous code."""
    if body is not None and method == "GET":
        method = "POST"
    return run(afetch(url, method, body, deadlines, read_body, max_bytes))
