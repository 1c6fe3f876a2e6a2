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
"""
from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.parse
from dataclasses import dataclass, field


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
                 read_body: bool = True, max_bytes: int = 4 << 20) -> Reply:
    """One request within `deadlines` (see the module docstring). `body`: a JSON-able object (POSTed as
    JSON). `read_body=False` returns once the headers are in. Raises RequestTimeout, or OSError /
    ConnectionError when nothing listens, or ValueError for a reply that is not HTTP."""
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
            await asyncio.wait_for(_read_body(reader, headers, got, max_bytes), max(left(deadlines.total_s), 0))
        except asyncio.TimeoutError:
            raise RequestTimeout(url, "total", deadlines.total_s, time.monotonic() - t0, bytes(got), status) from None
        except asyncio.IncompleteReadError as e:
            got.extend(e.partial)
        return Reply(url, status, headers, bytes(got), time.monotonic() - t0)
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 1.0)
        except (asyncio.TimeoutError, OSError):
            pass


async def _read_head(url: str, reader, writer, headers: dict) -> int:
    """Send what was written, read the status line and the headers (into `headers`); returns the status."""
    await writer.drain()
    line = await reader.readline()
    if not line:
        raise ConnectionError(f"{url}: the server closed the connection without sending a reply")
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"{url}: not an HTTP reply: {line[:80]!r}")
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1])


async def _body(reader, headers: dict):
    """The body's bytes as they arrive: chunked transfer coding decoded, by Content-Length, or to the end of
    the connection."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return
            yield await reader.readexactly(size)
            await reader.readline()
    n = int(headers.get("content-length", "-1") or -1)
    got = 0
    while n < 0 or got < n:
        data = await reader.read(65536 if n < 0 else min(65536, n - got))
        if not data:
            return
        got += len(data)
        yield data


async def _read_body(reader, headers: dict, got: bytearray, max_bytes: int) -> None:
    """Read the body into `got` (at most about `max_bytes`), so that what came before a deadline is kept."""
    async for data in _body(reader, headers):
        got.extend(data)
        if len(got) >= max_bytes:
            return


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
    when the request's first byte was written, after the connection was set up), `written_at` (its last byte
    handed to the kernel), `headers_at` (when the headers were in); `chunks()` yields the body as it arrives,
    `read(max_bytes)` all of it; `close()`."""

    def __init__(self, reader, writer, status: int, headers: dict, sent_at: float, headers_at: float):
        self.reader, self.writer, self.status, self.headers = reader, writer, status, headers
        self.sent_at, self.headers_at = sent_at, headers_at

    def chunks(self):
        """The body's bytes as they arrive (an async iterator; see _body)."""
        return _body(self.reader, self.headers)

    async def read(self, max_bytes: int = 1 << 20) -> bytes:
        out = bytearray()
        async for data in self.chunks():
            out.extend(data)
            if len(out) >= max_bytes:
                break
        return bytes(out)

    def close(self) -> None:
        self.writer.close()


async def open_stream(ep: Endpoint, path: str, body, deadlines: Deadlines, t0: float) -> StreamReply:
    """POST `body` (JSON) to `path` of `ep` on a connection of its own and return once the reply's headers are
    in, within `deadlines` counted from `t0` (a time.perf_counter() instant: the request's start). Raises
    RequestTimeout (connect or first byte), OSError / ConnectionError (refused; closed before a reply) or
    ValueError (a reply that is not HTTP)."""
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

        async def head():   # the request's last byte handed to the kernel, then the reply's status and headers
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
    reply = StreamReply(reader, writer, status, headers, sent_at, time.perf_counter())
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
          max_bytes: int = 4 << 20) -> Reply:
    """`afetch` from synchronous code."""
    if body is not None and method == "GET":
        method = "POST"
    return run(afetch(url, method, body, deadlines, read_body, max_bytes))
