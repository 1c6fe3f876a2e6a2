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

Two rules of comparison, side by side (the second added on 2026-12-06, after that run's one ratio outside 10 %, TTFT
at concurrency 16 against inference-perf, 1.125, whose server-side TTFT was the book's): "book's own start" is the
book as it runs, its c slots started at once, against the tool as it runs; it is the rule the acceptance was set on
and is always reported. Where a tool's own first wave at a concurrency point, read from the stand-in's record (the
spread of its first c acceptances), exceeds the book's of the same repeat by more than SPREAD_FACTOR times and by
more than SPREAD_MARGIN_MS, the book runs again at that point with that tool's start pattern: its first c requests
started evenly over the tool's measured spread and counted in its figures as the tool counts its own (not excluded
as a warm-up; helpers.serving.points, LoadPlan.count_ramp), and its ratios against the same tool run are a second
row, rule "book with the tool's start pattern", beside the first, never instead of it.

Splitting a run (a bounded device call cannot hold 5 points x 3 repeats x 3 tools): --points picks points of the
configuration (c1,c4,c16,r8,r24), --resume CSV keeps that CSV's rows and runs only the (point, repeat, tool) it lacks
(its rows must carry this configuration), writing old and new rows to --out; --report CSV prints the tables from a CSV
alone and runs nothing. Given no tool, the book runs alone (its figures and the stand-in's view, no ratio).
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


#: the spread rule: the book runs again with a tool's start pattern where the tool's first-wave spread exceeds the
#: book's by more than SPREAD_FACTOR times and by more than SPREAD_MARGIN_MS (ms) (added after the 1.125; docstring)
SPREAD_FACTOR, SPREAD_MARGIN_MS = 10.0, 50.0
RULE_OWN, RULE_TOOL = "book's own start", "book with the tool's start pattern"
BOOK_ONLY = "(book only)"   # the tool column of a run given no tool


def spread_rule(book_burst_ms: float, tool_burst_ms: float) -> bool:
    """Whether a tool's first wave is spread so much more than the book's that the book runs again with its pattern."""
    b, t = book_burst_ms, tool_burst_ms
    return b == b and t == t and t > SPREAD_FACTOR * b and t - b > SPREAD_MARGIN_MS


def book_with_start(url: str, point: tuple, a, spread_ms: float) -> dict:
    """The book at a concurrency point with its first c requests started evenly over `spread_ms` (the c-th that long
    after the first) and every request counted, the first wave included (helpers.serving.points, count_ramp)."""
    from helpers.serving.client import Workload
    from helpers.serving.loadspec import SLO
    from helpers.serving.points import Load, LoadPlan, measure

    c = int(point[1])
    ramp_s = spread_ms / 1e3 * c / (c - 1) if c > 1 else 0.0    # slot i starts at i ramp_s / c
    row = measure(url, "standin", Load.closed(c), LoadPlan(Workload(a.input_tokens, a.output_tokens), SLO(),
                                                           a.requests, ramp_s=ramp_s, count_ramp=True))
    ok = [r for r in row["records"] if r["ok"]]
    return {"ttft_own": row["median_ttft_ms"], "ttft_send": _med([r["ttft_s"] - r["connected_s"] for r in ok], 1e3),
            "ttft_written": _med([r["ttft_s"] - r["written_s"] for r in ok], 1e3),
            "tpot": row["median_tpot_ms"], "itl": row["median_itl_ms"], "e2e_own": row["median_e2e_latency_ms"],
            "e2e_send": _med([r["e2e_s"] - r["connected_s"] for r in ok], 1e3), "completed": row["completed"],
            "start_spread_ms": spread_ms}


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


def _label(point) -> str:
    return f"{point[0]}={point[1]}"


def ratio_rows(point, rep, load, mine: dict, tool: str, ref: dict, a=None, rule: str = RULE_OWN) -> list[dict]:
    """One row per metric: the book's figure (`mine`), the tool's (`ref`), their ratio, the stand-in's view of both, the
    rule of comparison (RULE_OWN, or RULE_TOOL where `mine` is the book run with the tool's start pattern) and the
    configuration the point ran with (so that --resume can refuse rows of another)."""
    rows = []
    nan = float("nan")
    for name, send, own in METRICS:
        # a tool without the send time: from its own start (the book alone: from send, as the stand-in's own TTFT)
        key = send if tool == BOOK_ONLY or ref.get(send, nan) == ref.get(send, nan) else own
        rk, ro = ref.get(key, nan), ref.get(own, nan)
        r = mine[key] / rk if rk and rk == rk else nan
        rows.append({"point": _label(point), "repeat": rep, "tool": tool, "rule": rule, "metric": name,
                     "compared": "from send" if key == send and send != own else "as defined",
                     "book_ms": mine[key], "tool_ms": rk, "ratio": r,
                     "ratio_from_own_start": mine[own] / ro if ro == ro and ro else nan,
                     "book_completed": mine["completed"], "tool_completed": ref.get("completed", nan),
                     "book_server_ttft_ms": mine.get("srv_ttft"), "tool_server_ttft_ms": ref.get("srv_ttft"),
                     "book_server_read_ms": mine.get("srv_read"), "tool_server_read_ms": ref.get("srv_read"),
                     "book_burst_ms": mine.get("burst"), "tool_burst_ms": ref.get("burst"),
                     "book_start_spread_ms": mine.get("start_spread_ms", nan),
                     "book_wall_s": mine.get("wall_s"), "tool_wall_s": ref.get("wall_s"),
                     "load_average_1min": load, **(config(a) if a is not None else {})})
    return rows


#: the configuration every row carries (--resume keeps only rows of the configuration it runs)
CONFIG = ("requests", "input_tokens", "output_tokens", "ttft_s", "interval_s")


def config(a) -> dict:
    return {f"cfg_{k}": getattr(a, k) for k in CONFIG}


def _point_key(label: str) -> tuple:
    """'c=16' -> (0, 16.0), 'r=8.0' -> (1, 8.0): concurrency points first, each kind in order of its value."""
    kind, _, x = label.partition("=")
    try:
        return (0 if kind == "c" else 1, float(x))
    except ValueError:
        return (2, float("inf"))


def _groups(rows: list[dict], key) -> list[tuple]:
    """Rows grouped by key(row), in the order point, tool (first seen), metric, rule."""
    tools, metrics = {}, [m for m, _, _ in METRICS]
    groups: dict = {}
    for r in rows:
        tools.setdefault(r["tool"], len(tools))
        groups.setdefault(key(r), []).append(r)

    def order(k):
        r = groups[k][0]
        return (_point_key(r["point"]), tools[r["tool"]], metrics.index(r["metric"]) if r["metric"] in metrics else 99,
                r.get("rule", RULE_OWN) != RULE_OWN)
    return [(k, groups[k]) for k in sorted(groups, key=order)]


def summary(rows: list[dict]) -> list[str]:
    """Per point, tool, metric and rule: the median ratio over the repeats and its range, inside 10 % or not. A row of
    the second rule (the book with the tool's start pattern) follows its first-rule row and says so."""
    out = []
    for (p, t, m, how, rule), rs in _groups([r for r in rows if r["tool"] != BOOK_ONLY],
                                            lambda r: (r["point"], r["tool"], r["metric"], r["compared"],
                                                       r.get("rule", RULE_OWN))):
        v = [r["ratio"] for r in rs if r["ratio"] == r["ratio"]]
        if not v:
            if rule == RULE_OWN:
                out.append(f"{p:<8} {t:<15} {m:<5} n/a ({t} keeps no such figure)")
            continue
        med = statistics.median(v)
        ok = "within 10 %" if 0.9 <= med <= 1.1 else "OUTSIDE 10 %"
        line = f"{p:<8} {t:<15} {m:<5} {how:<10} {med:.3f} [{min(v):.3f} - {max(v):.3f}]  {ok}"
        if rule != RULE_OWN:
            spread = _med([r["book_start_spread_ms"] for r in rs])
            line += f"  <- {rule} ({spread:.0f} ms, {len(v)} repeat{'s' * (len(v) != 1)})"
        out.append(line)
    return out


#: the metrics the acceptance names (TTFT from send where the tool records the send, TPOT, ITL, E2E)
ACCEPTANCE = ("ttft", "tpot", "itl", "e2e")


def acceptance(rows: list[dict]) -> list[str]:
    """Per rule: how many of the comparisons the acceptance names (a median ratio over the repeats per point, tool
    and metric) are within 10 %, and which are not; and the repeats each point and tool has."""
    out = []
    for rule in (RULE_OWN, RULE_TOOL):
        meds = {}
        for (p, t, m), rs in _groups([r for r in rows if r.get("rule", RULE_OWN) == rule and r["tool"] != BOOK_ONLY
                                      and r["metric"] in ACCEPTANCE],
                                     lambda r: (r["point"], r["tool"], r["metric"])):
            v = [r["ratio"] for r in rs if r["ratio"] == r["ratio"]]
            if v:
                meds[(p, t, m)] = statistics.median(v)
        if not meds:
            out.append(f"{rule}: " + ("no point where the spread rule applied was run" if rule == RULE_TOOL else
                                      "no tool ran"))
            continue
        outside = [f"{m} at {p} against {t} {x:.3f}" for (p, t, m), x in meds.items() if not 0.9 <= x <= 1.1]
        where = "" if rule == RULE_OWN else " (where the spread rule applied)"
        out.append(f"{rule}: {len(meds) - len(outside)} of {len(meds)} within 10 %{where}"
                   + (f"; outside: {'; '.join(outside)}" if outside else ""))
    reps: dict = {}
    for (p, t), rs in _groups([r for r in rows if r.get("rule", RULE_OWN) == RULE_OWN],
                              lambda r: (r["point"], r["tool"])):
        reps.setdefault(p, []).append(f"{t} {len({r['repeat'] for r in rs})}")
    out.append("repeats: " + "; ".join(f"{p}: {', '.join(v)}" for p, v in reps.items()))
    return out


def server_summary(rows: list[dict]) -> list[str]:
    """Per point and client: the medians over the repeats of the client's TTFT as compared above, the stand-in's own
    TTFT of the same requests (connection accepted to first chunk flushed), their difference (what the client adds:
    its own reading, plus the time from its write to the server's accept, and from its own start its connection's
    set-up), the server's accept-to-read, and the spread of the first burst's acceptances. The book is compared from
    send with a tool that records the send and from its own start with one that does not (inference-perf): one line
    for each, so that every difference is taken like with like. (Until 2026-12-07 the book had one line, each repeat's
    figure from whichever tool ran first in it: a mix of the two starts.)"""
    groups: dict = {}
    for _, rs in _groups([r for r in rows if r["metric"] == "ttft" and r.get("rule", RULE_OWN) == RULE_OWN],
                         lambda r: (r["point"], r["tool"], r["metric"])):
        for r in rs:
            start = "send" if r["compared"] == "from send" else "own start"
            for who, ms, pre in (("book", r["book_ms"], "book_"), (r["tool"], r["tool_ms"], "tool_")):
                if who == BOOK_ONLY:
                    continue
                groups.setdefault((r["point"], who, start), {}).setdefault(r["repeat"], (
                    ms, r[pre + "server_ttft_ms"], r[pre + "server_read_ms"], r[pre + "burst_ms"]))
    out = [f"{'point':<8} {'client':<15} {'ttft from':>9} {'ttft':>7} {'server':>7} {'client-server':>13} "
           f"{'accept-read':>11} {'burst':>7}  (ms, medians over repeats)"]
    for (p, who, start), reps in sorted(groups.items(), key=lambda kv: (_point_key(kv[0][0]), kv[0][1] != "book")):
        cols = list(zip(*reps.values()))
        m = [_med(list(c)) for c in cols]
        diff = _med([x - y for x, y in zip(cols[0], cols[1]) if x == x and y == y])
        out.append(f"{p:<8} {who:<15} {start:>9} {m[0]:>7.2f} {m[1]:>7.2f} {diff:>13.2f} {m[2]:>11.2f} {m[3]:>7.2f}")
    return out


def start_pattern_summary(rows: list[dict]) -> list[str]:
    """The second rule's runs as the stand-in saw them: per point and tool whose pattern the book took, the spread
    asked for, the book's first-wave spread as accepted (the book's burst) beside the tool's, and both TTFTs with the
    server's; and, for the first rule's rows, where the spread rule applies but no such run is in the rows."""
    out, have = [], set()
    tool_rows = [r for r in rows if r["metric"] == "ttft" and r.get("rule", RULE_OWN) == RULE_TOOL]
    if tool_rows:
        out.append(f"{'point':<8} {'pattern of':<15} {'asked':>6} {'book burst':>10} {'tool burst':>10} "
                   f"{'book ttft':>9} {'server':>7} {'tool ttft':>9} {'server':>7}  (ms, medians over repeats)")
    for (p, t), rs in _groups(tool_rows, lambda r: (r["point"], r["tool"])):
        have.add((p, t))
        m = [_med([r[k] for r in rs]) for k in ("book_start_spread_ms", "book_burst_ms", "tool_burst_ms", "book_ms",
                                                 "book_server_ttft_ms", "tool_ms", "tool_server_ttft_ms")]
        out.append(f"{p:<8} {t:<15} {m[0]:>6.0f} {m[1]:>10.2f} {m[2]:>10.2f} {m[3]:>9.2f} {m[4]:>7.2f} {m[5]:>9.2f} "
                   f"{m[6]:>7.2f}")
    for (p, t), rs in _groups([r for r in rows if r["metric"] == "ttft" and r.get("rule", RULE_OWN) == RULE_OWN
                               and r["tool"] != BOOK_ONLY], lambda r: (r["point"], r["tool"])):
        hit = [r["repeat"] for r in rs if spread_rule(r["book_burst_ms"], r["tool_burst_ms"])]
        if hit and (p, t) not in have:
            out.append(f"{p:<8} {t:<15} the spread rule applies (repeats {', '.join(map(str, hit))}: the tool's first "
                       f"wave {_med([r['tool_burst_ms'] for r in rs]):.0f} ms, the book's "
                       f"{_med([r['book_burst_ms'] for r in rs]):.2f} ms) but these rows hold no run of the book with "
                       "its start pattern (a CSV written before the rule, or a run that stopped)")
    return out


def report(rows: list[dict], head: str = "") -> str:
    """The tables of a run, from its rows alone (what --report prints, and what a run prints at its end)."""
    reps = max((int(r["repeat"]) for r in rows), default=0)
    return "\n".join([
        f"\nratios book / tool over up to {reps} repeats (median [min - max]){head}",
        f"two rules (issue 46; the second added after the 2026-12-06 run's 1.125): '{RULE_OWN}' (the book's c slots "
        f"at once); '{RULE_TOOL}' (where the tool's first-wave spread exceeds the book's by more than "
        f"{SPREAD_FACTOR:g}x and {SPREAD_MARGIN_MS:g} ms: the book's first c requests spread evenly over it and "
        "counted), marked <-",
        *summary(rows), "", *acceptance(rows),
        "\nthe stand-in's own view of each client's requests (TTFT: the client's as compared above; server: from "
        "the connection accepted to the first chunk flushed)", *server_summary(rows),
        f"\nthe book with a tool's start pattern ('{RULE_TOOL}'; asked: the spread its first c requests were started "
        "over; burst: the first c acceptances' spread the stand-in recorded)", *(start_pattern_summary(rows) or
                                                                                ["none run"])])


#: the CSV's columns read as text and as whole numbers (every other one is a number; empty is NaN)
TEXT_COLS, INT_COLS = ("point", "tool", "rule", "metric", "compared"), ("repeat",)
NEEDED = ("point", "repeat", "tool", "metric", "compared", "book_ms", "tool_ms", "ratio", "book_server_ttft_ms",
          "tool_server_ttft_ms", "book_server_read_ms", "tool_server_read_ms", "book_burst_ms", "tool_burst_ms")


def read_rows(path: str, what: str = "--report") -> list[dict]:
    """The rows of a CSV this script wrote (a CSV from before the second rule reads as rule RULE_OWN)."""
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"{what} {path}: no such file; give the parity.csv a run wrote (its --out)")
    with open(p, newline="") as f:
        rd = csv.DictReader(f)
        missing = [c for c in NEEDED if c not in (rd.fieldnames or [])]
        if missing:
            raise SystemExit(f"{what} {path}: not a parity CSV of benchmarks/bench_parity.py (no column "
                             f"{', '.join(missing)}); give the parity.csv a run wrote (its --out)")
        rows = []
        for n, r in enumerate(rd, 2):
            try:
                row = {k: (v if k in TEXT_COLS else int(v) if k in INT_COLS else float(v) if v not in ("", None)
                           else float("nan")) for k, v in r.items()}
            except (TypeError, ValueError) as e:
                raise SystemExit(f"{what} {path}, line {n}: {e}; a value that is not a number where one is "
                                 "expected (was the file edited by hand?)") from None
            row.setdefault("rule", RULE_OWN)
            row["rule"] = row["rule"] or RULE_OWN
            row.setdefault("book_start_spread_ms", float("nan"))
            rows.append(row)
    return rows


def write_csv(path: str, rows: list[dict]) -> None:
    """Write every row (columns: the union, in order of first appearance), through a temporary file renamed over
    `path`, so a run stopped mid-write keeps the previous file whole."""
    if path and rows:
        cols = list(dict.fromkeys(k for r in rows for k in r))
        tmp = f"{path}.tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, restval="")
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, path)


def pick_points(text: str, points: list[tuple]) -> list[tuple]:
    """--points 'c1,c16,r8' (or c=1, r=8.0) -> those of `points`, in the configuration's order."""
    have = {(k, float(v)) for k, v in points}
    want = set()
    for tok in [t.strip() for t in text.split(",") if t.strip()] or [text]:
        try:
            key = (tok[:1], float(tok[1:].lstrip("=")))
        except ValueError:
            key = None
        if key not in have:
            raise SystemExit(f"--points {text}: {tok!r} is not a point of this configuration "
                             f"({','.join(f'{k}{v:g}' for k, v in points)}, set by --concurrencies and --rates); "
                             "name points as c<concurrency> or r<rate>, e.g. --points c16,r8")
        want.add(key)
    return [p for p in points if (p[0], float(p[1])) in want]


def main(argv=None) -> int:
    global TOOL_TIMEOUT_S
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for t in TOOLS:
        ap.add_argument(f"--{t}", help=f"the {t} executable (its own virtual environment); left out if not given")
    ap.add_argument("--tokenizer", help="a local Hugging Face tokenizer folder for the tools' prompts (with a tool)")
    ap.add_argument("--concurrencies", default="1,4,16")
    ap.add_argument("--rates", default="8,24", help="Poisson request rates (requests/s)")
    ap.add_argument("--points", help="run only these points of the configuration, e.g. c1,c4,r8 (default: all)")
    ap.add_argument("--resume", metavar="CSV", help="keep this CSV's rows (a run's --out of the same configuration) "
                    "and run only the (point, repeat, tool) it lacks; --out then holds its rows and the new ones")
    ap.add_argument("--report", metavar="CSV", help="print the tables from this CSV (a run's --out) and run nothing")
    ap.add_argument("--book-spread-ms", type=float, help="a check where no tool runs: the book's own client as a "
                    "tool named book-spread, its first c requests at a concurrency point spread over this many ms and "
                    "counted (at a rate point it is the book as it runs)")
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
    if a.report:
        rows = read_rows(a.report)
        if not rows:
            raise SystemExit(f"--report {a.report}: the CSV has no rows; give the parity.csv of a run that measured")
        print(report(rows, f" from {a.report}"))
        return 0
    TOOL_TIMEOUT_S = a.tool_timeout_s
    tools = {t: (TOOLS[t], getattr(a, t.replace("-", "_"))) for t in TOOLS if getattr(a, t.replace("-", "_"))}
    if a.book_spread_ms is not None:
        if not a.book_spread_ms > 0:
            raise SystemExit(f"--book-spread-ms {a.book_spread_ms:g}: expected a spread in ms above 0, e.g. 500")
        ms = a.book_spread_ms
        tools["book-spread"] = (lambda _exe, url, point, a, _out: book_with_start(url, point, a, ms)
                                if point[0] == "c" else book(url, point, a), None)
    if tools.keys() - {"book-spread"} and not a.tokenizer:
        raise SystemExit("--tokenizer: the tools need a local Hugging Face tokenizer folder for their prompts "
                         "(scripts/parity-remote.sh builds one); give --tokenizer DIR")
    if a.repeats < 1 or a.requests < 1:
        raise SystemExit(f"--repeats {a.repeats}, --requests {a.requests}: give 1 or more of each")
    points = [("c", int(c)) for c in a.concurrencies.split(",")] + [("r", float(r)) for r in a.rates.split(",")]
    if a.points:
        points = pick_points(a.points, points)
    rows = []
    if a.resume:
        rows = read_rows(a.resume, "--resume")
        cfg = config(a)
        for n, r in enumerate(rows, 2):
            if any(k not in r for k in cfg):
                raise SystemExit(f"--resume {a.resume}: its rows carry no configuration ({', '.join(cfg)}: a CSV "
                                 "written before --resume existed); resume only a CSV this version wrote, or start "
                                 "afresh (--report reads it)")
            bad = {k: r.get(k) for k, v in cfg.items() if r.get(k) != v}
            if bad:
                raise SystemExit(f"--resume {a.resume}, line {n}: written with {bad}, this run has "
                                 f"{ {k: cfg[k] for k in bad} }; resume a CSV of the same configuration (the same "
                                 "--requests, --input-tokens, --output-tokens, --ttft-s, --interval-s), "
                                 "or start afresh")
    done = {(r["point"], r["repeat"], r["tool"]) for r in rows if r.get("rule", RULE_OWN) == RULE_OWN}
    names = list(tools) or [BOOK_ONLY]
    proc, url = start_standin(a.ttft_s, a.interval_s)
    print(f"stand-in at {url}: first chunk after {a.ttft_s * 1e3:g} ms, then a token every {a.interval_s * 1e3:g} ms; "
          f"{a.requests} requests of {a.input_tokens}/{a.output_tokens} tokens per point, {a.repeats} repeats, tools "
          f"{', '.join(tools) or 'none (the book alone)'}; points {','.join(f'{k}{x:g}' for k, x in points)}"
          f"{f'; {len(rows)} rows kept from {a.resume}' if a.resume else ''}; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="parity-"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.time()
    took: dict = {}   # point -> the longest it took
    failed: dict = {}
    try:
        for rep in range(1, a.repeats + 1):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for point in points:
                todo = [t for t in order if (_label(point), rep, t) not in done and t not in failed]
                if not todo:
                    print(f"repeat {rep} {_label(point)}: "
                          f"{'in ' + a.resume + ', not run again' if a.resume else 'no tool left to run'}", flush=True)
                    continue
                guess = took.get(point, max(took.values(), default=0.0))
                if a.time_limit_s and time.time() - start + guess > a.time_limit_s:
                    print(f"repeat {rep} {_label(point)}: not run (--time-limit-s {a.time_limit_s:g}: "
                          f"{time.time() - start:.0f} s gone, the point takes some {guess:.0f} s)", flush=True)
                    continue
                load, t0 = os.getloadavg()[0], time.time()
                since = standin_log(url)[0]
                mine = book(url, point, a)
                since, recs = standin_log(url, since)
                mine.update(server_side(recs, point, a), wall_s=time.time() - t0)
                walls = [f"book {mine['wall_s']:.1f}"]
                if todo == [BOOK_ONLY]:
                    rows += ratio_rows(point, rep, load, mine, BOOK_ONLY, {}, a)
                for t in (x for x in todo if x != BOOK_ONLY):
                    t1 = time.time()
                    fn, exe = tools[t]
                    try:
                        ref = fn(exe, url, point, a, work / f"{t}-{point[0]}{point[1]}-{rep}")
                    except (SystemExit, Exception) as e:   # noqa: BLE001 - reported; the tool is left out after
                        if not a.keep_going:
                            raise
                        failed[t] = f"{_label(point)} repeat {rep}: {e}"
                        print(f"{t} failed and is left out from here: {str(e)[-1500:]}", flush=True)
                        continue
                    since, recs = standin_log(url, since)
                    ref.update(server_side(recs, point, a), wall_s=time.time() - t1)
                    walls.append(f"{t} {ref['wall_s']:.1f}")
                    rows += ratio_rows(point, rep, load, mine, t, ref, a)
                    if point[0] == "c" and spread_rule(mine["burst"], ref["burst"]):
                        t2 = time.time()
                        like = book_with_start(url, point, a, ref["burst"])
                        since, recs = standin_log(url, since)
                        like.update(server_side(recs, point, a), wall_s=time.time() - t2)
                        walls.append(f"book with {t}'s start {like['wall_s']:.1f}")
                        rows += ratio_rows(point, rep, load, like, t, ref, a, RULE_TOOL)
                took[point] = max(took.get(point, 0.0), time.time() - t0)
                write_csv(a.out, rows)
                print(f"repeat {rep} {_label(point)}: {time.time() - t0:.0f} s ({', '.join(walls)} s), "
                      f"load average before {load:.2f}", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
    write_csv(a.out, rows)
    if not rows:
        raise SystemExit("no point ran: " + "; ".join(f"{t}: {e}" for t, e in failed.items()))
    print(report(rows, f"; load average now {os.getloadavg()[0]:.2f}"))
    for t, e in failed.items():
        print(f"{t} FAILED at {e[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
