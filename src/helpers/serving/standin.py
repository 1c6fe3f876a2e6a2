"""A stand-in OpenAI-style server that streams completions on a known schedule (stdlib only).

Each request: the first chunk after `ttft_s`, then `tokens` chunks `interval_s` apart, each carrying
`tokens_per_chunk` tokens of text, then a usage chunk and `data: [DONE]`. With `knee`, the interval grows
with load: interval_s * (1 + max(0, in_flight - knee)) - a server whose latency rises at a known concurrency,
for testing capacity searches and measuring the client's own overhead. With `past_knee` as well, every request
that arrives past the knee is slowed by that one factor instead (a step: TTFT `ttft_s` up to the knee,
`ttft_s * past_knee` past it), so a test can put an SLO far from both sides of the knee: the failing side fails
whatever the client's overhead (overhead only adds), and the passing side has the gap between the two levels.

`GET /standin/log?since=N` answers the server's own record of each request from the N-th on (issue 46): when its
connection was accepted, when its request had been read, when its first chunk was flushed and when its stream
ended (time.perf_counter() of the server's process: on Linux the same clock as a client's on the same machine),
so a client's TTFT can be set beside the server's own and the spread of a burst's arrivals read.

    with StandIn(ttft_s=0.02, interval_s=0.01) as srv:   # srv.url -> "http://127.0.0.1:PORT"
        ...
"""
from __future__ import annotations

import collections
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        srv = self.server
        srv.accepted.pop(id(self.request), None)
        if self.path.startswith("/standin/log"):
            since = int(self.path.partition("since=")[2] or 0)
            with srv.lock:   # `since` counts every request logged; the log keeps the last 100,000
                first = srv.logged - len(srv.log)
                body = json.dumps({"count": srv.logged, "requests": list(srv.log)[max(since - first, 0):]}).encode()
            return self._send(200, body, "application/json")
        body = json.dumps({"object": "list", "data": [{"id": "standin", "object": "model"}]}).encode()
        self._send(200, body, "application/json")

    def _send(self, code, body, ctype):
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        srv = self.server
        rec = {"accepted": srv.accepted.pop(id(self.request), None), "read": None, "first": None, "end": None,
               "port": self.client_address[1]}
        req = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        n = int(req.get("max_tokens") or 16)
        rec["read"], rec["tokens"] = time.perf_counter(), n
        with srv.lock:
            srv.in_flight += 1
            load = srv.in_flight
            srv.loads.append(load)
        self._counted = True
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            slow = srv.slowdown(load)
            time.sleep(srv.ttft_s * slow)
            k = srv.tokens_per_chunk
            sent = 0
            while sent < n:
                if sent:
                    time.sleep(srv.interval_s * slow * k)
                step = min(k, n - sent)
                self._event({"choices": [{"index": 0, "text": " t" * step, "finish_reason": None}]})
                if not sent:
                    rec["first"] = time.perf_counter()
                sent += step
            # out of flight before the client can see the end: a closed-loop client sends its next request the
            # moment it reads [DONE], and a count still holding this one would put that request past the knee
            # (on a loaded machine a handler thread often ran again only after that, and a load that holds "failed")
            self._leave()
            self._event({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": n + 4}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            rec["end"] = time.perf_counter()
        except (BrokenPipeError, ConnectionResetError):   # the client hung up mid-stream: its choice, not an error
            self.close_connection = True
        finally:
            self._leave()
            with srv.lock:
                srv.log.append(rec)
                srv.logged += 1
        self.close_connection = True

    def _leave(self):
        """Take this request out of the in-flight count, once."""
        if self._counted:
            self._counted = False
            with self.server.lock:
                self.server.in_flight -= 1

    def _event(self, payload):
        payload = {"id": "cmpl-standin", "object": "text_completion", "created": 0, "model": "standin", **payload}
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    knee: int | None = None
    past_knee: float | None = None

    def slowdown(self, load: int) -> float:
        """The factor on a request's latency that arrived with `load` in flight (itself included)."""
        if not self.knee or load <= self.knee:
            return 1.0
        return self.past_knee if self.past_knee is not None else 1.0 + (load - self.knee)

    # socketserver's default listen backlog is 5: a burst of more new connections than that while the accept
    # thread waits for the GIL (a loaded test process) has its extra SYNs dropped, and Linux resends them only
    # after 1 s - a concurrency-8 point then took ~1.08 s and read 7.4 requests/s against 24 one at a time
    # (the rate-sweep test's failure in the full suite). Every request opens its own connection here.
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        """A client that hung up before its request was read (a tool closing its spare connections) is no error."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)

    def process_request(self, request, client_address):
        """Note when each connection was accepted (GET /standin/log), then serve it on a thread of its own."""
        self.accepted[id(request)] = time.perf_counter()
        super().process_request(request, client_address)


class StandIn:
    def __init__(self, ttft_s: float = 0.02, interval_s: float = 0.01, tokens_per_chunk: int = 1,
                 knee: int | None = None, host: str = "127.0.0.1", past_knee: float | None = None):
        if past_knee is not None and (knee is None or not past_knee >= 1):
            raise ValueError(f"past_knee={past_knee!r}: a factor of at least 1, given with a knee")
        self.httpd = _Server((host, 0), _Handler)
        self.httpd.daemon_threads = True
        h = self.httpd
        h.ttft_s, h.interval_s, h.tokens_per_chunk, h.knee, h.past_knee = ttft_s, interval_s, tokens_per_chunk, knee, past_knee
        h.in_flight, h.lock = 0, threading.Lock()
        h.loads = collections.deque(maxlen=100_000)   # in flight, this one included, as each request arrived
        h.log = collections.deque(maxlen=100_000)     # each request's times (GET /standin/log)
        h.logged, h.accepted = 0, {}                  # requests logged in all; id(socket) -> when it was accepted
        self.url = f"http://{host}:{h.server_address[1]}"
        self._t = threading.Thread(target=h.serve_forever, daemon=True)

    @property
    def loads(self) -> list[int]:
        """The number of requests in flight, each one included, as each arrived (the last 100,000, in order)."""
        with self.httpd.lock:
            return list(self.httpd.loads)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self._t.join(5)


class StandInProcess:
    """The stand-in in a process of its own (`python -m helpers.serving.standin TTFT INTERVAL [KNEE [PAST_KNEE]]`), so that a
    client in this process does not share its interpreter lock with the server it measures."""

    def __init__(self, ttft_s: float = 0.02, interval_s: float = 0.01, knee: int | None = None,
                 past_knee: float | None = None):
        self.args = [str(ttft_s), str(interval_s)] + ([str(int(knee))] if knee else []) + \
            ([str(past_knee)] if knee and past_knee else [])
        self.proc, self.url = None, ""

    def __enter__(self):
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-m", "helpers.serving.standin", *self.args],
                                     stdout=subprocess.PIPE, text=True)
        self.url = (self.proc.stdout.readline() or "").strip()
        if not self.url.startswith("http"):
            self.__exit__()
            raise RuntimeError(f"the stand-in server did not start (it printed {self.url[:80]!r})")
        return self

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:  # noqa: BLE001 - it would not stop: kill it
                self.proc.kill()
                self.proc.wait(10)


if __name__ == "__main__":  # python -m helpers.serving.standin TTFT INTERVAL [KNEE [PAST_KNEE]]: serve until interrupted
    import sys
    a = sys.argv[1:5]
    with StandIn(*(float(x) for x in a[:2]), knee=int(a[2]) if len(a) > 2 else None,
                 past_knee=float(a[3]) if len(a) > 3 else None) as s:
        print(s.url, flush=True)
        threading.Event().wait()
