"""How much the load generator itself costs: its overhead per request and its maximum request rate at
64 concurrent streams, against a local server that answers instantly.

The server is a minimal OpenAI-compatible stub (stdlib asyncio, no model): every /v1/completions request
is answered with a stream of `--chunks` chunks and a usage chunk, so all time measured is the client's
(its asyncio streaming path, helpers.serving.fetch.open_stream, and its bookkeeping) plus the loopback. Run:

    python benchmarks/bench_loadgen.py [--requests 2000] [--concurrency 64] [--chunks 16]

It prints requests/s, streamed chunks/s and client CPU time per request (measured: this machine).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import threading
import time

from helpers.serving import client as cl
from helpers.serving.server import free_port


def _chunk(text: str, usage: dict | None = None) -> bytes:
    d = {"id": "x", "object": "text_completion", "created": 0, "model": "stub",
         "choices": [] if usage else [{"index": 0, "text": text, "finish_reason": None}]}
    if usage:
        d["usage"] = usage
    body = f"data: {json.dumps(d)}\n\n".encode()
    return f"{len(body):x}\r\n".encode() + body + b"\r\n"


async def _handle(reader, writer, chunks: int):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length) if length else b""
            if head.startswith(b"GET"):
                payload = b'{"object":"list","data":[{"id":"stub","object":"model"}]}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(payload)).encode() + b"\r\n\r\n" + payload)
                await writer.drain()
                continue
            max_tokens = json.loads(body).get("max_tokens", chunks)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(chunks):
                writer.write(_chunk("tok"))
            writer.write(_chunk("", {"prompt_tokens": 8, "completion_tokens": max_tokens, "total_tokens": 8 + max_tokens}))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _serve(port: int, chunks: int, ready: threading.Event):
    async def main():
        srv = await asyncio.start_server(lambda r, w: _handle(r, w, chunks), "127.0.0.1", port, backlog=1024)
        ready.set()
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=16, help="streamed chunks per request")
    a = ap.parse_args(argv)
    port = free_port()
    ready = threading.Event()
    threading.Thread(target=_serve, args=(port, a.chunks, ready), daemon=True).start()
    ready.wait(10)
    url = f"http://127.0.0.1:{port}"
    cl.check_reachable(url)
    prompts = ["p"] * a.requests
    asyncio.run(cl.run_requests(url, "stub", prompts[:200], a.chunks, a.concurrency))  # warm-up
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    results, duration = asyncio.run(cl.run_requests(url, "stub", prompts, a.chunks, a.concurrency))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    ok = sum(r.ok for r in results)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)  # client and stub share this process
    m = cl.summarize(results, duration)
    print(f"measured on this machine ({os.cpu_count()} CPUs), stub server in-process, {a.concurrency} streams, "
          f"{a.chunks} chunks/request")
    print(f"  completed {ok}/{len(results)} in {wall:.2f} s")
    print(f"  max request rate: {ok / duration:.0f} requests/s  ({ok * a.chunks / duration:.0f} chunks/s)")
    print(f"  wall time per request at {a.concurrency} in flight: {1e3 * duration / ok:.2f} ms "
          f"(upper bound on client overhead; includes the stub)")
    print(f"  process CPU per request (client + stub): {1e3 * cpu / ok:.2f} ms")
    print(f"  median TTFT {m['median_ttft_ms']:.2f} ms, median ITL {m['median_itl_ms']:.3f} ms (stub answers at once)")
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
