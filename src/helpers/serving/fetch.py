"""HTTP requests with overall deadlines: to connect, to the first byte of the reply, and for the whole reply.

A socket time limit applies to each read, so a server that sends its headers and then a byte every few
seconds (or SSE keep-alive comments only) keeps such a request waiting for ever. Here every limit is a
deadline from the start of the request:

    d = Deadlines.from_timeout(30)          # connect within 10 s, headers and the whole reply within 30 s
    reply = fetch("http://127.0.0.1:8000/v1/chat/completions", body={...}, deadlines=d)
    reply.status, reply.json(), reply.elapsed_s

A limit that passes raises RequestTimeout, which says which limit, after how long, and what had arrived
by then (the evidence a classification shows). Plain HTTP/1.1 over asyncio streams (standard library
only; https through ssl), one connection per request (`Connection: close`).

What a server sends is bounded before it is held (issue 47: a server sending endless headers took this client to
1.6 GB in 20 s, and a declared 2 GiB chunk was read whole before any check): at most MAX_HEADERS header lines
(trailers too) of at most MAX_LINE bytes each (the status line and a chunk-size line too), a chunk read as it
arrives whatever its size line declares, and at most `max_bytes` of body. A reply that breaks one of these, or
is not HTTP/1.1 (a status line, a header, a Content-Length or a chunk-size line that does not parse), raises
ReplyError naming the URL, what was wrong and what had arrived; so does a body cut short of its Content-Length
or inside a chunk (`kind` "protocol", "too-large", "truncated"), which is never taken for a whole reply.

Why not a library: issue 47 asked for aiohttp or httpcore unless a paired benchmark showed one distorting TTFT by
more than 5 % at 64 in flight. aiohttp 3.14 (its C parser, one session per run, a connection per request, the
same client code above it) did: benchmarks/bench_http_layer.py on the 2-core machine (load 6-9, 6 pairs, the
stand-in at TTFT 50 ms), median TTFT 85 ms against this module's 62 (per-pair ratio of this module's to
aiohttp's 0.85, range 0.47-1.05), CPU 1.47 against 1.27 ms a request; against 1beba90's client, aiohttp read TTFT
+15 % and +39 % (two sessions) where this module reads -2 % to +5 % (medians of three sessions of 8-12 pairs at
load 4-7) and CPU -3 % to +13 %; benchmarks/bench_loadgen.py (64 in flight, a stub answering at once) 0.61 ms of
CPU a request against 1beba90's 0.58. httpcore parses with h11, in pure Python (some 15-35 us a chunk measured
here). The limits are therefore
written here, each as the RFC 9112 rule it checks and each with a test against a real hostile server
(tests/test_serving_hostile.py; the aiohttp variant is commit 01cf463 of issue 47's branch).
"""
from __future__ import annotations

import asyncio
import json
import math
import re
import time
import urllib.parse
from dataclasses import dataclass, field


#: the most header lines a reply (or its trailers) may carry, and the most bytes of one line of its head (the
#: status line, a header, a chunk-size line)
MAX_HEADERS = 100
MAX_LINE = 8190
#: the most body bytes `fetch` reads (a health check, a smoke reply, /v1/models)
MAX_BODY = 4 << 20
_STATUS = re.compile(rb"HTTP/1\.[01] ([1-9][0-9]{2})(?: [^\r\n]*)?\r?\n")
_CHUNK = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?\r?\n")


class ReplyError(ValueError):
    """A reply that cannot be read as it should: `kind` "protocol" (not valid HTTP/1.1, or past a limit on its
    head), "too-large" (more body than allowed) or "truncated" (the connection ended inside the body);
    `received`: how many body bytes had arrived."""

    def __init__(self, url: str, kind: str, what: str, received: int = 0, status: int | None = None):
        self.url, self.kind, self.received, self.status = url, kind, received, status
        super().__init__(f"{url}: {what}")


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


async def afetch(url: str, method: str = "GET", body=None, deadlines: Deadlines = Deadlines(),
                 read_body: bool = True, max_bytes: int = MAX_BODY) -> Reply:
    """One request within `deadlines` (see the module docstring). `body`: a JSON-able object (POSTed as
    JSON). `read_body=False` returns once the headers are in. Raises RequestTimeout, or OSError /
    ConnectionError when nothing listens, or ReplyError (a ValueError) for a reply that is not HTTP/1.1, cut
    short, or longer than `max_bytes`."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"URL {url!r}: expected http://HOST:PORT/PATH")
    port = u.port or (443 if u.scheme == "https" else 80)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    data = b"" if body is None else json.dumps(body).encode()
    t0 = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(u.hostname, port, ssl=u.scheme == "https" or None), deadlines.connect_s)
    except asyncio.TimeoutError:
        raise RequestTimeout(url, "connect", deadlines.connect_s, time.monotonic() - t0) from None
    status, headers, got = None, {}, bytearray()

    def left(limit: float) -> float:
        return limit - (time.monotonic() - t0)

    try:
        head = [f"{method} {path} HTTP/1.1", f"Host: {u.hostname}:{port}", "Connection: close",
                "Accept: application/json, text/event-stream", "User-Agent: glm5-book"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)

        try:
            status = await asyncio.wait_for(_read_head(url, reader, writer, headers),
                                            max(left(deadlines.first_byte_s), 0))
        except asyncio.TimeoutError:
            raise RequestTimeout(url, "first byte", deadlines.first_byte_s, time.monotonic() - t0) from None
        if not read_body or method == "HEAD" or status in (204, 304):
            return Reply(url, status, headers, b"", time.monotonic() - t0)

        try:
            await asyncio.wait_for(_read_body(url, reader, status, headers, got, max_bytes),
                                   max(left(deadlines.total_s), 0))
        except asyncio.TimeoutError:
            raise RequestTimeout(url, "total", deadlines.total_s, time.monotonic() - t0, bytes(got), status) from None
        return Reply(url, status, headers, bytes(got), time.monotonic() - t0)
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 1.0)
        except (asyncio.TimeoutError, OSError):
            pass


async def _line(url: str, reader, what: str) -> bytes:
    """One line of a reply's head (at most MAX_LINE bytes; the stream's own limit, 64 KiB, bounds the read)."""
    try:
        line = await reader.readline()
    except ValueError:   # asyncio's LimitOverrunError: no line end within the stream's limit
        raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: {what} longer than {MAX_LINE} bytes") from None
    if len(line) > MAX_LINE + 2:
        raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: {what} of {len(line)} bytes, longer than "
                         f"{MAX_LINE} (the most this client reads)")
    return line


async def _read_head(url: str, reader, writer, headers: dict) -> int:
    """Send what was written, read the status line and the headers (into `headers`, names in lower case, at most
    MAX_HEADERS lines); returns the status."""
    await writer.drain()
    line = await _line(url, reader, "the status line")
    if not line:
        raise ConnectionError(f"{url}: the server closed the connection without sending a reply")
    m = _STATUS.fullmatch(line)
    if not m:
        raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: its status line is {line[:80]!r}, not "
                         "'HTTP/1.1 NNN reason'")
    await _fields(url, reader, headers, "header")
    if "chunked" not in headers.get("transfer-encoding", "").lower() and "content-length" in headers:
        if not re.fullmatch(r"[0-9]{1,18}", headers["content-length"]):
            raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: Content-Length "
                             f"{headers['content-length'][:40]!r} is not one whole number of bytes")
    return int(m.group(1))


async def _fields(url: str, reader, headers: dict, what: str) -> None:
    """Header (or trailer) lines up to the empty line, into `headers`: at most MAX_HEADERS of them."""
    for _ in range(MAX_HEADERS + 1):
        h = await _line(url, reader, f"a {what} line")
        if h in (b"\r\n", b"\n"):
            return
        if not h:
            raise ReplyError(url, "truncated", f"the reply was cut short: the connection ended inside its {what}s")
        k, sep, v = h.decode("latin-1").partition(":")
        if not sep or not k.strip() or k != k.strip():
            raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: a {what} line {h[:80]!r} is not "
                             "'Name: value'")
        k = k.lower()
        if k == "content-length" and k in headers and headers[k] != v.strip():
            raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: two Content-Length headers disagree "
                             f"({headers[k][:20]!r}, {v.strip()[:20]!r})")
        headers[k] = v.strip()
    raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: more than {MAX_HEADERS} {what} lines (the most "
                     "this client reads)")


async def _body(url: str, reader, status: int, headers: dict, max_bytes: int | None = None):
    """The body's bytes as they arrive: chunked transfer coding decoded (each chunk read as it arrives, whatever
    its size line declares), by Content-Length, or to the end of the connection. More than `max_bytes` raises
    ReplyError "too-large"; a connection that ends inside a chunk or short of the Content-Length, "truncated"; a
    chunk framing that does not parse, "protocol"."""
    got = 0

    def cut(what: str) -> ReplyError:
        return ReplyError(url, "truncated", f"the reply was cut short: the connection ended {what} (HTTP {status}, "
                          f"{got} body bytes in all)", got, status)

    def too_large() -> ReplyError:
        return ReplyError(url, "too-large", f"the reply's body passed {max_bytes} bytes, the most this client reads "
                          f"of such a reply (HTTP {status})", got, status)

    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            try:   # a chunk-size line (read here, not through _line: this runs once a streamed event)
                line = await reader.readline()
            except ValueError:
                line = b"?" * (MAX_LINE + 3)
            m = _CHUNK.fullmatch(line) if len(line) <= MAX_LINE + 2 else None
            if not m:
                if not line:
                    raise cut("before its last chunk")
                raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: the chunk-size line {line[:40]!r} "
                                 f"is not a hexadecimal size (after {got} body bytes)", got, status)
            size = left = int(m.group(1), 16)
            if size == 0:
                await _fields(url, reader, {}, "trailer")
                return
            while left:   # as it arrives, whatever the size line declared
                data = await reader.read(min(65536, left))
                if not data:
                    raise cut(f"inside a chunk ({size - left} of its {size} bytes had come)")
                got += len(data)
                left -= len(data)
                if max_bytes is not None and got > max_bytes:
                    raise too_large()
                yield data
            try:
                end = await reader.readline()
            except ValueError:   # no line end within the stream's limit
                end = b"?" * 40
            if end != b"\r\n" and end != b"\n":
                if not end:
                    raise cut("after a chunk, before the next")
                raise ReplyError(url, "protocol", f"not a valid HTTP/1.1 reply: a chunk of {size} bytes is followed by "
                                 f"{end[:40]!r}, not its line end", got, status)
    n = int(headers["content-length"]) if "content-length" in headers else None
    left = (1 << 62) if n is None else n
    while left:
        data = await reader.read(min(65536, left))
        if not data:
            break
        got += len(data)
        left -= len(data)
        if max_bytes is not None and got > max_bytes:
            raise too_large()
        yield data
    if n is not None and got < n:
        raise cut(f"short of its Content-Length ({got} of {n} bytes had come)")


async def _read_body(url: str, reader, status: int, headers: dict, got: bytearray, max_bytes: int) -> None:
    """Read the body into `got` (at most `max_bytes`: more raises ReplyError), so that what came before a deadline
    is kept."""
    async for data in _body(url, reader, status, headers, max_bytes):
        got.extend(data)


@dataclass
class Endpoint:
    """Where a run's requests go: the server's base URL, its host resolved once (so no request waits for a
    name lookup on a worker thread), and the headers every request carries."""

    base_url: str
    host: str
    port: int
    ssl: bool
    addrs: list
    api_key: str = "none"

    @classmethod
    async def resolve(cls, base_url: str, api_key: str = "none") -> "Endpoint":
        """The endpoint of `base_url` (http://HOST:PORT) with its host's addresses; a host that does not resolve
        is kept by name, so each request fails with the lookup's own error (a connect failure), not the run."""
        import socket

        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"URL {base_url!r}: expected http://HOST:PORT")
        port = u.port or (443 if u.scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(u.hostname, port, type=socket.SOCK_STREAM)
            addrs = list(dict.fromkeys(i[4][0] for i in infos)) or [u.hostname]
        except OSError:
            addrs = [u.hostname]
        return cls(base_url.rstrip("/"), u.hostname, port, u.scheme == "https", addrs, api_key)

    async def connect(self):
        """(reader, writer) of a new connection: the addresses in turn, the one that answered first next time."""
        for i, addr in enumerate(self.addrs):
            try:
                rw = await asyncio.open_connection(addr, self.port, ssl=self.ssl or None,
                                                   server_hostname=self.host if self.ssl else None)
            except OSError:
                if i == len(self.addrs) - 1:
                    raise
                continue
            if i:
                self.addrs.insert(0, self.addrs.pop(i))
            return rw


class StreamReply:
    """An open reply whose status line and headers are in: `status`, `headers`, `sent_at` (time.perf_counter()
    when the request's first byte was written, after the connection was set up), `headers_at` (when the
    headers were in); `chunks(max_bytes)` yields the body as it arrives (see _body: a reply cut short, malformed or
    longer than `max_bytes` raises ReplyError), `read(max_bytes)` the start of it; `close()`."""

    def __init__(self, reader, writer, status: int, headers: dict, sent_at: float, headers_at: float, url: str = ""):
        self.reader, self.writer, self.status, self.headers = reader, writer, status, headers
        self.sent_at, self.headers_at, self.url = sent_at, headers_at, url

    def chunks(self, max_bytes: int | None = None):
        """The body's bytes as they arrive (an async iterator; see _body)."""
        return _body(self.url, self.reader, self.status, self.headers, max_bytes)

    async def read(self, max_bytes: int = 1 << 20) -> bytes:
        """The body, or its first `max_bytes` where it is longer (an error reply's text, a whole JSON reply)."""
        out = bytearray()
        async for data in self.chunks():
            out.extend(data[:max_bytes - len(out)])
            if len(out) >= max_bytes:
                break
        return bytes(out)

    def close(self) -> None:
        self.writer.close()


async def open_stream(ep: Endpoint, path: str, body, deadlines: Deadlines, t0: float) -> StreamReply:
    """POST `body` (JSON) to `path` of `ep` on a connection of its own and return once the reply's headers are
    in, within `deadlines` counted from `t0` (a time.perf_counter() instant: the request's start). Raises
    RequestTimeout (connect or first byte), OSError / ConnectionError (refused; closed before a reply) or
    ReplyError (a reply that is not HTTP/1.1, or past the limits on its head)."""
    url = ep.base_url + path
    data = json.dumps(body).encode()
    try:
        reader, writer = await asyncio.wait_for(ep.connect(), max(deadlines.connect_s - (time.perf_counter() - t0), 0))
    except asyncio.TimeoutError:
        raise RequestTimeout(url, "connect", deadlines.connect_s, time.perf_counter() - t0) from None
    head = [f"POST {path} HTTP/1.1", f"Host: {ep.host}:{ep.port}", "Connection: close",
            "Accept: text/event-stream, application/json", "User-Agent: glm5-book", "Content-Type: application/json",
            f"Authorization: Bearer {ep.api_key}", f"Content-Length: {len(data)}"]
    try:
        sent_at = time.perf_counter()
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        headers: dict = {}
        written = []

        async def head():   # the request's last byte handed to the kernel (issue 46: phases), then the reply's head
            await writer.drain()
            written.append(time.perf_counter())
            return await _read_head(url, reader, writer, headers)
        try:
            status = await asyncio.wait_for(head(), max(deadlines.first_byte_s - (time.perf_counter() - t0), 0))
        except asyncio.TimeoutError:
            raise RequestTimeout(url, "first byte", deadlines.first_byte_s, time.perf_counter() - t0) from None
    except BaseException:
        writer.close()
        raise
    reply = StreamReply(reader, writer, status, headers, sent_at, time.perf_counter(), url)
    reply.written_at = written[0] if written else sent_at
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
