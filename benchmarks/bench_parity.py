"""Parity of the book's client with AIPerf, inference-perf and GuideLLM on one local server (issues 38, 46): the
medians of TTFT, TPOT, ITL and E2E of each at concurrency 1, 4 and 16 and at two Poisson request rates, and their
ratios (book / tool), taken like with like.

The server is the stand-in (helpers.serving.standin, in its own process: first chunk after --ttft-s, then one
token every --interval-s, one token a chunk), so the medians every client should report are known. Every client
uses /v1/completions, streams, and sends --requests requests of --input-tokens/--output-tokens at each point; at each
point the book's client runs first, then the tools in an order rotated each repeat.

The stand-in also keeps its own record of every request (GET /standin/log): after each client's run the script reads
the stand-in's TTFT of the same requests (from the connection accepted to the first chunk flushed) and how close
together the client put its first burst of a concurrency point, and prints them beside each client's TTFT. A client
whose TTFT differs from another's by as much as the server's own TTFT of its requests does measures alike: the two
loaded the server differently (a tighter burst waits longer for the stand-in's one accepting thread); a difference
that the server's figure does not share is the client's own reading.

None of the tools is a dependency of the book: install each in a virtual environment of its own (inference-perf
0.7.0 needs Python 3.12) and point the options at their executables; a tool not given is left out:

    python3.11 -m venv T/aiperf && T/aiperf/bin/pip install aiperf==0.13.0
    python3.12 -m venv T/infperf && T/infperf/bin/pip install inference-perf==0.7.0
    python3.11 -m venv T/guidellm && T/guidellm/bin/pip install guidellm==0.8.1
    .venv/bin/python benchmarks/bench_parity.py --aiperf T/aiperf/bin/aiperf --inference-perf \\
        T/infperf/bin/inference-perf --guidellm T/guidellm/bin/guidellm --tokenizer /tmp/glm5-book-models/tiny-XXXX

--tokenizer is any local Hugging Face tokenizer folder (the tiny model chapter 03 builds has one): the tools need
one for their synthetic prompts; the stand-in does not read prompts. AIPerf 0.13.0 refuses a local tokenizer folder
under HF_HUB_OFFLINE=1, so it runs without that variable (it reads the folder and reaches no network).

Where each clock starts, read in the tools' sources (data/reference/serving_metric_names.csv): the book, AIPerf and
inference-perf start before the connection is set up; GuideLLM at its first header write. The stand-in closes every
connection, so each request of every client opens one. "From send" is from the request's first byte written: the
book's `sent_s`, AIPerf's TTFT less its own http_req_blocked, _dns_lookup and _connecting (its per-request trace),
GuideLLM's own figure; inference-perf keeps no per-request trace, so it is compared from its own start only (with
the book's from its own start). A last TTFT row starts once the request is written (the book's `written_s`, AIPerf's
http_req_sending added to the set-up): AIPerf's own sending took 5-6 ms a request on the 2-core machine. Definitions: TPOT (E2E - TTFT) / (tokens - 1) for the book, GuideLLM
(inter_token_latency_ms) and AIPerf (inter_token_latency); inference-perf's time_per_output_token runs from the first
to the last content chunk. ITL is every gap between chunks: the book's itl, AIPerf's inter_chunk_latency,
inference-perf's inter_token_latency (per token, one token a chunk here); GuideLLM has none. E2E: AIPerf's ends at
the last content chunk, the others' at the stream's end (the stand-in sends its usage chunk and [DONE] at once).

The machine's load moves the figures (the stand-in and every client share its cores): the load average is printed
before each point; run it again if it is above the number of cores. Each point's CSV rows are written as it ends, and
--time-limit-s starts no point that would end past it, so a run in a bounded call keeps what it measured;
--keep-going leaves out a tool that fails instead of stopping (scripts/parity-remote.sh uses both).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def start_standin(ttft_s: float, interval_s: float):
    proc = subprocess.Popen([sys.executable, "-m", "helpers.serving.standin", str(ttft_s), str(interval_s)],
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise SystemExit(f"the stand-in did not start (printed {url!r})")
    return proc, url


def standin_log(url: str, since: int = 0) -> tuple[int, list[dict]]:
    """(requests the stand-in has logged in all, its records from the `since`-th on): GET /standin/log."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/standin/log?since={since}", timeout=30) as r:
        d = json.loads(r.read())
    return d["count"], d["requests"]


def server_side(recs: list[dict], point: tuple, a) -> dict:
    """The stand-in's own view of one client's requests at a point (its records of requests of --output-tokens, so a
    tool's own check request is left out): the medians of its TTFT from the connection accepted to the first chunk
    flushed, and of accepted to the request read; at a concurrency c, the spread of the first c acceptances (how
    close together the client put its first burst)."""
    rs = sorted((r for r in recs if r.get("tokens") == a.output_tokens and r["accepted"] is not None
                 and r["first"] is not None), key=lambda r: r["accepted"])
    c = int(point[1]) if point[0] == "c" else 0
    burst = rs[min(c, len(rs)) - 1]["accepted"] - rs[0]["accepted"] if c > 1 and rs else float("nan")
    return {"srv_ttft": _med([r["first"] - r["accepted"] for r in rs], 1e3),
            "srv_read": _med([r["read"] - r["accepted"] for r in rs], 1e3), "burst": burst * 1e3, "srv_n": len(rs)}


TOOL_TIMEOUT_S = 900.0


def _run(cmd: list[str], env: dict) -> None:
    """Run a tool (for at most TOOL_TIMEOUT_S, --tool-timeout-s); on failure raise with the end of what it printed."""
    p = subprocess.run(cmd, env=env, timeout=TOOL_TIMEOUT_S, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd[:3])} ... exited {p.returncode}: {(p.stdout + p.stderr)[-1500:]}")


def _med(values, scale=1.0) -> float:
    v = [x for x in values if x is not None and x == x]
    return float(np.median(v)) * scale if v else float("nan")


def book(url: str, point: tuple, a) -> dict:
    """The book's medians as it defines them and from each request's first byte written."""
    from helpers.serving.client import Workload
    from helpers.serving.loadspec import ClosedLoop, LoadSpec, OpenLoop
    from helpers.serving.openloop import run_spec

    kind, x = point
    load = ClosedLoop(int(x)) if kind == "c" else OpenLoop(float(x), 1.0)
    row, results = run_spec(url, "standin", LoadSpec(Workload(a.input_tokens, a.output_tokens), load,
                                                     num_requests=a.requests))
    ok = [r for r in results if r.ok]
    return {"ttft_own": row["median_ttft_ms"], "ttft_send": _med([r.ttft_s - r.sent_s for r in ok], 1e3),
            "ttft_written": _med([r.ttft_s - r.written_s for r in ok], 1e3),
            "tpot": row["median_tpot_ms"], "itl": row["median_itl_ms"], "e2e_own": row["median_e2e_latency_ms"],
            "e2e_send": _med([r.e2e_s - r.sent_s for r in ok], 1e3), "completed": row["completed"]}


def aiperf(exe: str, url: str, point: tuple, a, out: Path) -> dict:
    kind, x = point
    load = ["--concurrency", str(int(x))] if kind == "c" else ["--request-rate", str(x), "--arrival-pattern", "poisson"]
    cmd = [exe, "profile", "--model", "standin", "--url", url, "--endpoint-type", "completions", "--streaming",
           *load, "--request-count", str(a.requests), "--prompt-input-tokens-mean", str(a.input_tokens),
           "--prompt-input-tokens-stddev", "0", "--output-tokens-mean", str(a.output_tokens),
           "--output-tokens-stddev", "0", "--use-legacy-max-tokens", "--tokenizer", a.tokenizer,
           "--artifact-dir", str(out), "--ui-type", "none"]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    _run(cmd, env)
    s = json.loads((out / "profile_export_aiperf.json").read_text())
    recs = [json.loads(x)["metrics"] for x in (out / "profile_export.jsonl").read_text().splitlines() if x.strip()]
    recs = [m for m in recs if "time_to_first_token" in m]

    def pre(m):   # the request's own time before its first byte was written
        return sum(m.get(k, {}).get("value", 0.0) for k in ("http_req_blocked", "http_req_dns_lookup",
                                                            "http_req_connecting"))
    return {"ttft_own": s["time_to_first_token"]["p50"],
            "ttft_send": _med([m["time_to_first_token"]["value"] - pre(m) for m in recs]),
            "ttft_written": _med([m["time_to_first_token"]["value"] - pre(m) - m.get("http_req_sending", {})
                                  .get("value", 0.0) for m in recs]),
            "tpot": s["inter_token_latency"]["p50"], "itl": s["inter_chunk_latency"]["p50"],
            "e2e_own": s["request_latency"]["p50"],
            "e2e_send": _med([m["request_latency"]["value"] - pre(m) for m in recs]),
            "completed": len(recs)}


def inference_perf(exe: str, url: str, point: tuple, a, out: Path) -> dict:
    kind, x = point
    if kind == "c":
        load = {"type": "concurrent", "stages": [{"num_requests": a.requests, "concurrency_level": int(x)}]}
    else:
        load = {"type": "poisson", "stages": [{"rate": float(x), "duration": max(1, round(a.requests / float(x)))}]}
    fixed = lambda n: {"min": n, "max": n, "mean": n, "std_dev": 0, "type": "fixed"}  # noqa: E731
    cfg = {"api": {"type": "completion", "streaming": True},
           "server": {"type": "vllm", "model_name": "standin", "base_url": url, "ignore_eos": True},
           "tokenizer": {"pretrained_model_name_or_path": a.tokenizer},
           "data": {"type": "random", "input_distribution": fixed(a.input_tokens),
                    "output_distribution": fixed(a.output_tokens)},
           "load": {**load, "num_workers": 1},
           "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": False}},
           "storage": {"local_storage": {"path": str(out)}}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yml").write_text(json.dumps(cfg))    # JSON is YAML
    _run([exe, "--config_file", str(out / "config.yml")], {**os.environ, "HF_HUB_OFFLINE": "1"})
    s = json.loads((out / "stage_0_lifecycle_metrics.json").read_text())["successes"]
    lat = s["latency"]
    return {"ttft_own": lat["time_to_first_token"]["median"] * 1e3, "ttft_send": float("nan"), "ttft_written": float("nan"),
            "tpot": lat["time_per_output_token"]["median"] * 1e3, "itl": lat["inter_token_latency"]["median"] * 1e3,
            "e2e_own": lat["request_latency"]["median"] * 1e3, "e2e_send": float("nan"), "completed": s["count"]}


def guidellm(exe: str, url: str, point: tuple, a, out: Path) -> dict:
    kind, x = point
    profile = ("kind=synchronous" if x == 1 else f"kind=concurrent,streams={int(x)}") if kind == "c" else \
        f"kind=poisson,rate={x}"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [exe, "run", "--backend", f"kind=openai_http,target={url},request_format=/v1/completions",
           "--profile", profile, "--constraint", f"kind=max_requests,count={a.requests}",
           "--data", f"kind=synthetic_text,prompt_tokens={a.input_tokens},output_tokens={a.output_tokens}",
           "--tokenizer", f"kind=hf_auto,model={a.tokenizer}", "--output", f"kind=json,path={out / 'g.json'}",
           "--disable-console"]
    _run(cmd, {**os.environ, "HF_HUB_OFFLINE": "1"})
    m = json.loads((out / "g.json").read_text())["benchmarks"][0]["metrics"]

    def med(key, scale=1.0):
        return m[key]["successful"]["median"] * scale
    ttft, e2e = med("time_to_first_token_ms"), med("request_latency", 1e3)
    return {"ttft_own": ttft, "ttft_send": ttft, "ttft_written": float("nan"), "tpot": med("inter_token_latency_ms"),
            "itl": float("nan"),
            "e2e_own": e2e, "e2e_send": e2e, "completed": m["request_totals"]["successful"]}


TOOLS = {"aiperf": aiperf, "inference-perf": inference_perf, "guidellm": guidellm}
#: (metric, the key compared like with like for tools that record the send, the key for those that do not)
METRICS = (("ttft", "ttft_send", "ttft_own"), ("tpot", "tpot", "tpot"), ("itl", "itl", "itl"),
           ("e2e", "e2e_send", "e2e_own"), ("ttft (from the request written)", "ttft_written", "ttft_written"))


def ratio_rows(point, rep, load, mine: dict, tool: str, ref: dict) -> list[dict]:
    rows = []
    for name, send, own in METRICS:
        key = own if ref.get(send) != ref.get(send) else send   # a tool without the send time: from its own start
        r = mine[key] / ref[key] if ref[key] and ref[key] == ref[key] else float("nan")
        rows.append({"point": f"{point[0]}={point[1]}", "repeat": rep, "tool": tool, "metric": name,
                     "compared": "from send" if key == send and send != own else "as defined",
                     "book_ms": mine[key], "tool_ms": ref[key], "ratio": r,
                     "ratio_from_own_start": mine[own] / ref[own] if ref[own] == ref[own] and ref[own] else float("nan"),
                     "book_completed": mine["completed"], "tool_completed": ref["completed"],
                     "book_server_ttft_ms": mine.get("srv_ttft"), "tool_server_ttft_ms": ref.get("srv_ttft"),
                     "book_server_read_ms": mine.get("srv_read"), "tool_server_read_ms": ref.get("srv_read"),
                     "book_burst_ms": mine.get("burst"), "tool_burst_ms": ref.get("burst"),
                     "book_wall_s": mine.get("wall_s"), "tool_wall_s": ref.get("wall_s"),
                     "load_average_1min": load})
    return rows


def summary(rows: list[dict]) -> list[str]:
    """Per point, tool and metric: the median ratio over the repeats and its range, inside 10 % or not."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["point"], r["tool"], r["metric"], r["compared"]), []).append(r["ratio"])
    out = []
    for (p, t, m, how), v in groups.items():
        v = [x for x in v if x == x]
        if not v:
            out.append(f"{p:<8} {t:<15} {m:<5} n/a ({t} keeps no such figure)")
            continue
        med = statistics.median(v)
        ok = "within 10 %" if 0.9 <= med <= 1.1 else "OUTSIDE 10 %"
        out.append(f"{p:<8} {t:<15} {m:<5} {how:<10} {med:.3f} [{min(v):.3f} - {max(v):.3f}]  {ok}")
    return out


def server_summary(rows: list[dict]) -> list[str]:
    """Per point and client: the medians over the repeats of the client's TTFT as compared (from send where it has
    one), the stand-in's own TTFT of the same requests (connection accepted to first chunk flushed), their
    difference (what the client adds: its own reading, plus the time from its write to the server's accept), the
    server's accept-to-read, and the spread of the first burst's acceptances."""
    groups: dict = {}
    for r in rows:
        if r["metric"] != "ttft":
            continue
        for who, ms, pre in (("book", r["book_ms"], "book_"), (r["tool"], r["tool_ms"], "tool_")):
            groups.setdefault((r["point"], who), {}).setdefault(r["repeat"], (
                ms, r[pre + "server_ttft_ms"], r[pre + "server_read_ms"], r[pre + "burst_ms"]))
    out = [f"{'point':<8} {'client':<15} {'ttft':>7} {'server':>7} {'client-server':>13} {'accept-read':>11} "
           f"{'burst':>7}  (ms, medians over repeats)"]
    for (p, who), reps in groups.items():
        cols = list(zip(*reps.values()))
        m = [_med(list(c)) for c in cols]
        diff = _med([x - y for x, y in zip(cols[0], cols[1]) if x == x and y == y])
        out.append(f"{p:<8} {who:<15} {m[0]:>7.2f} {m[1]:>7.2f} {diff:>13.2f} {m[2]:>11.2f} {m[3]:>7.2f}")
    return out


def write_csv(path: str, rows: list[dict]) -> None:
    if path and rows:
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def main(argv=None) -> int:
    global TOOL_TIMEOUT_S
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for t in TOOLS:
        ap.add_argument(f"--{t}", help=f"the {t} executable (its own virtual environment); left out if not given")
    ap.add_argument("--tokenizer", required=True, help="a local Hugging Face tokenizer folder for the tools' prompts")
    ap.add_argument("--concurrencies", default="1,4,16")
    ap.add_argument("--rates", default="8,24", help="Poisson request rates (requests/s)")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--input-tokens", type=int, default=16)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--ttft-s", type=float, default=0.02)
    ap.add_argument("--interval-s", type=float, default=0.01)
    ap.add_argument("--out", help="also write every point's medians and ratios to this CSV (one row per metric), "
                    "rewritten after each point")
    ap.add_argument("--work", help="keep the tools' own outputs in this folder (default: a new temporary one)")
    ap.add_argument("--time-limit-s", type=float, default=0.0,
                    help="start no point that would end past this many seconds from the start (a point is taken to "
                         "last as long as its longest run so far, or as the longest point when it has not run); 0: none")
    ap.add_argument("--tool-timeout-s", type=float, default=TOOL_TIMEOUT_S, help="the longest one tool's run may take")
    ap.add_argument("--keep-going", action="store_true",
                    help="a tool that fails is reported and left out of the points after, instead of stopping the run")
    a = ap.parse_args(argv)
    TOOL_TIMEOUT_S = a.tool_timeout_s
    tools = {t: getattr(a, t.replace("-", "_")) for t in TOOLS if getattr(a, t.replace("-", "_"))}
    if not tools or a.repeats < 1 or a.requests < 1:
        raise SystemExit("give at least one tool executable, --repeats and --requests of 1 or more")
    points = [("c", int(c)) for c in a.concurrencies.split(",")] + [("r", float(r)) for r in a.rates.split(",")]
    proc, url = start_standin(a.ttft_s, a.interval_s)
    print(f"stand-in at {url}: first chunk after {a.ttft_s * 1e3:g} ms, then a token every {a.interval_s * 1e3:g} ms; "
          f"{a.requests} requests of {a.input_tokens}/{a.output_tokens} tokens per point, {a.repeats} repeats, tools "
          f"{', '.join(tools)}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}", flush=True)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="parity-"))
    work.mkdir(parents=True, exist_ok=True)
    rows, start = [], time.time()
    took: dict = {}   # point -> the longest it took
    failed: dict = {}
    try:
        for rep in range(1, a.repeats + 1):
            order = list(tools)[rep % len(tools):] + list(tools)[:rep % len(tools)]
            for point in points:
                guess = took.get(point, max(took.values(), default=0.0))
                if a.time_limit_s and time.time() - start + guess > a.time_limit_s:
                    print(f"repeat {rep} {point[0]}={point[1]}: not run (--time-limit-s {a.time_limit_s:g}: "
                          f"{time.time() - start:.0f} s gone, the point takes some {guess:.0f} s)", flush=True)
                    continue
                load, t0 = os.getloadavg()[0], time.time()
                since = standin_log(url)[0]
                mine = book(url, point, a)
                since, recs = standin_log(url, since)
                mine.update(server_side(recs, point, a), wall_s=time.time() - t0)
                walls = [f"book {mine['wall_s']:.1f}"]
                for t in order:
                    if t in failed:
                        continue
                    t1 = time.time()
                    try:
                        ref = TOOLS[t](tools[t], url, point, a, work / f"{t}-{point[0]}{point[1]}-{rep}")
                    except (SystemExit, Exception) as e:   # noqa: BLE001 - reported; the tool is left out after
                        if not a.keep_going:
                            raise
                        failed[t] = f"{point[0]}={point[1]} repeat {rep}: {e}"
                        print(f"{t} failed and is left out from here: {str(e)[-1500:]}", flush=True)
                        continue
                    since, recs = standin_log(url, since)
                    ref.update(server_side(recs, point, a), wall_s=time.time() - t1)
                    walls.append(f"{t} {ref['wall_s']:.1f}")
                    rows += ratio_rows(point, rep, load, mine, t, ref)
                took[point] = max(took.get(point, 0.0), time.time() - t0)
                write_csv(a.out, rows)
                print(f"repeat {rep} {point[0]}={point[1]}: {time.time() - t0:.0f} s ({', '.join(walls)} s), "
                      f"load average before {load:.2f}", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
    write_csv(a.out, rows)
    if not rows:
        raise SystemExit("no point ran: " + "; ".join(f"{t}: {e}" for t, e in failed.items()))
    print(f"\nratios book / tool over {a.repeats} repeats (median [min - max]); load average now "
          f"{os.getloadavg()[0]:.2f}")
    print("\n".join(summary(rows)))
    print("\nthe stand-in's own view of each client's requests (TTFT: the client's as compared above; server: from "
          "the connection accepted to the first chunk flushed)")
    print("\n".join(server_summary(rows)))
    for t, e in failed.items():
        print(f"{t} FAILED at {e[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
