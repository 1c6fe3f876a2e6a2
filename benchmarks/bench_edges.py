"""Edge figures (issue 36): how fast a YAML alias tree is refused and at what memory, and how much memory the
process watching a server keeps while the server writes a long newline-free stream.

    python benchmarks/bench_edges.py [--flood-mib 1024] [--levels 16] [--width 4]

Each case runs in a fresh Python process (its peak resident memory is its own: VmHWM in /proc/self/status), under
a 2 GiB address-space limit and a time limit, so a regression shows as a figure or a failure, not a hung machine.
- yaml-file / yaml-p: a target file, or one `-p` item, whose parameter value is an alias tree of `--levels`
  lists of `--width` items each repeating the one before (width^levels numbers in a few hundred bytes; a width
  of at most 4 is what params.short renders whole, so 8874c48 expanded it). Printed: the
  input's size, the time from loading the target to the refusal (measured in-process: load_target,
  apply_overrides, plan), the process's peak RSS, and the first words of the refusal.
- log-flood: a real server process writes `--flood-mib` MiB to stdout without a newline, then one line, then
  serves /health; a watcher process starts it through helpers.serving.server.Server, waits until it is healthy,
  stops it. Printed: the watcher's peak RSS, the wall time, the log file's size and whether the cut was marked.
Goals (issue 36): refusal under 1 s at under 200 MB; the watcher under 300 MB for a 1 GiB flood.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

YAML_PROBE = textwrap.dedent("""
    import json, resource, sys, time
    from helpers import repo_root
    from helpers.book import runbook
    t0 = time.perf_counter()
    try:
        t = runbook.load_target(sys.argv[1], repo_root())
        runbook.apply_overrides(t, sys.argv[2:])
        runbook.plan(t, repo_root(), only=["03_baselines_tuning"])
        said = "planned"
    except runbook.RunbookError as e:
        said = str(e)
    print(json.dumps({"s": time.perf_counter() - t0, "said": said,
                      "rss_mb": int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024}))
""")

FLOOD_SERVER = textwrap.dedent("""
    import sys, http.server
    port, n = int(sys.argv[1]), int(sys.argv[2])
    block = b"x" * (1 << 20)
    for _ in range(n >> 20):
        sys.stdout.buffer.write(block)
    sys.stdout.buffer.write(b"\\nthe line after the flood\\n")
    sys.stdout.buffer.flush()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")

WATCHER = textwrap.dedent("""
    import json, resource, sys, time
    from pathlib import Path
    from helpers.serving.server import Server, ServerSpec, free_port
    code, n, log = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    port = free_port()
    t0 = time.perf_counter()
    with Server(ServerSpec(argv=[sys.executable, "-c", code, str(port), str(n)], port=port, name="flood"), log,
                startup_timeout_s=300, stop_grace_s=1) as srv:
        pass
    tail = srv.log_text()
    print(json.dumps({"rss_mb": int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024,
                      "s": time.perf_counter() - t0, "log_bytes": log.stat().st_size, "tail_chars": len(tail),
                      "cut": "line cut: longer than" in tail, "after": "the line after the flood" in tail,
                      "dropped": "more bytes, not kept" in tail}))
""")


def alias_tree(levels: int = 16, width: int = 4) -> str:
    """A list of `width` items nested `levels` deep, each level's first item defining the alias that its other
    items repeat: width^levels numbers in a few hundred bytes (a width of at most 4 is what params.short renders
    whole, so 8874c48 expanded it all in a message)."""
    s = "[" + ",".join(["1"] * width) + "]"
    for i in range(levels - 1):
        s = f"[&a{i} {s}, " + ", ".join([f"*a{i}"] * (width - 1)) + "]"
    return s


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _run(args: list[str], timeout_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        p = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=timeout_s, preexec_fn=_limit)
    except subprocess.TimeoutExpired:
        return {"error": f"still running after {timeout_s:g} s"}
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else ''}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def yaml_cases(levels: int, width: int, tmp: Path) -> None:
    tree = alias_tree(levels, width)
    f = tmp / "bomb.yaml"
    f.write_text(f"description: an alias tree\nparameters:\n  concurrencies: {tree}\n")
    item = "03_baselines_tuning.concurrencies=" + tree
    for case, args, size in (("yaml-file", [str(f)], f.stat().st_size), ("yaml-p", ["cpu-demo", item], len(item))):
        r = _run([YAML_PROBE, *args], 120)
        if "error" in r:
            print(f"{case:10s} input {size} B ({width ** levels:.3g} values): {r['error']}")
        else:
            print(f"{case:10s} input {size} B ({width ** levels:.3g} values): refused in {r['s'] * 1e3:.1f} ms, "
                  f"peak RSS {r['rss_mb']:.0f} MB: {r['said'][:110]!r}")


def flood_case(mib: int, tmp: Path) -> None:
    r = _run([WATCHER, FLOOD_SERVER, str(mib << 20), str(tmp / "flood.log")], 600)
    if "error" in r:
        print(f"log-flood  {mib} MiB without a newline: {r['error']}")
        return
    print(f"log-flood  {mib} MiB without a newline: watcher peak RSS {r['rss_mb']:.0f} MB, {r['s']:.1f} s, "
          f"log {r['log_bytes']} B, cut marked: {r['cut']}, the next line kept: {r['after']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flood-mib", type=int, default=1024)
    ap.add_argument("--levels", type=int, default=16)
    ap.add_argument("--width", type=int, default=4)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        yaml_cases(a.levels, a.width, Path(d))
        flood_case(a.flood_mib, Path(d))
        print(f"(all cases: {time.perf_counter() - t0:.1f} s wall)")


if __name__ == "__main__":
    main()
