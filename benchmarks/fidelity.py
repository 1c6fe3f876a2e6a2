"""Compare our interconnect harness with nccl-tests and cuda-samples on this GPU host (issue 4, Fidelity).

    python3 benchmarks/fidelity.py --ext .ext --out OUTDIR            # on a GPU host

Builds nccl-tests' all_reduce_perf (also as all_reduce_perf_mpi, one process per GPU through
benchmarks/fidelity/mpishim) and cuda-samples' p2pBandwidthLatencyTest for sm_90 with
benchmarks/fidelity/build.sh (their sources must be under --ext: nccl-tests/src/{common.cu, common.h,
all_reduce.cu, timer.cc, timer.h, nccl1_compat.h} and cuda-samples/p2pBandwidthLatencyTest/
p2pBandwidthLatencyTest.cu; they are never committed). Runs them --tool-repeats times per command, in
every launch shape this host has (-g N; with several GPUs also -t N -g 1 and -np N -g 1), eager and -G 1,
per NCCL variant in --variants; then our harness on the same sizes: all-reduce through
helpers.interconnect.collectives (torchrun, one process per GPU; eager and CUDA-graph harnesses, barrier and
aligned starts; each collective issued through torch.distributed and, as sglang's decode issues it, as
ncclAllReduce on a communicator of our own through helpers.interconnect.nccl), ncclAllReduce called directly
through torch.cuda.nccl from one process (the -g N shape), and copies through helpers.interconnect.copies at
p2pBandwidthLatencyTest's sizes (the peer copy both ways). Writes to OUTDIR:

  fidelity.csv                       the comparison (helpers.interconnect.fidelity.COLUMNS)
  nccl_tests_all_reduce[_threads|_procs][_graph][_<variant>][.rK].txt   each tool run's output
  p2pBandwidthLatencyTest[.rK].txt   p2pBandwidthLatencyTest's stdout, per run
  p2pBandwidthLatencyTest_reversed[.rK].txt   the same with the GPUs listed in reverse (several GPUs)
  ours_collectives.csv, ours_copies.csv   our raw points
  meta.json, build.log               what ran where; `--compare OUTDIR` rebuilds fidelity.csv from these
`--focus procs` keeps to what the host-path study needs at any rank count (8 on an eight-GPU host): nccl-tests
only in the one-process-per-GPU shape (-np N -g 1, through the shim) with -G 1, our graph harness only with
every rank launched at one deadline (through torch.distributed and through ncclAllReduce) plus the study's
own method (helpers.interconnect.suite.VARIANT_METHOD: one buffer, so shown, not counted), under the default
and NCCL_P2P_DISABLE=1 unless --variants says otherwise, and no copies: one device command at eight ranks.
A tool that fails to build or run is reported and the rest still runs. Each of our methods is one
helpers.interconnect.method.Method (below), which every row of ours_collectives.csv and fidelity.csv
carries. Run it with the package importable (`pip install -e . --no-deps`, or PYTHONPATH=src).
The committed comparisons are under data/measured/ (data/sources.yaml, role `fidelity`); `--compare` on
one of them rebuilds its table from its raw files (copy the folder first: it rewrites fidelity.csv).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from helpers.interconnect import collectives, copies as copybench, fidelity, recorded_labels, settings
from helpers.interconnect.method import Method
from helpers.interconnect.suite import VARIANT_METHOD

ROOT = Path(__file__).resolve().parents[1]
ENV = {**settings.TOOL_ENV, "NCCL_DEBUG": "VERSION"}
MAX_BYTES = 256 * 2**20

# ---- our methods, each set against the nccl-tests command timed the same way
EAGER = Method()                                              # our default: eager, CUDA events, one buffer
TORCH_EAGER = Method(timer="host", rotate_bytes=MAX_BYTES)    # nccl-tests' clock and rotation
TORCH_GRAPH = TORCH_EAGER.but(harness="graph")                # ... and its -G 1
NCCL_EAGER, NCCL_GRAPH = TORCH_EAGER.but(api="nccl"), TORCH_GRAPH.but(api="nccl")   # sglang's pynccl call
DIRECT_EAGER = Method.direct(timer="host", rotate_bytes=MAX_BYTES)   # torch.cuda.nccl, one process (-g N)
DIRECT_GRAPH = DIRECT_EAGER.but(harness="graph")


def oop(m: Method) -> Method:
    return m.but(placement="out-of-place")


def aligned(m: Method, lead_us: int | None = None) -> Method:
    """m with every rank launched at one shared deadline (worker --rank-start aligned)."""
    return m.but(start="aligned", start_lead_us=lead_us)
#: --focus: what is run (launch shapes by their flag, tool graph modes, our methods, copies)
FOCUS = {"procs": {"shapes": ("np",), "graph_modes": (True,), "copies": False,
                   "variants": "default,P2P_DISABLE=1"}}
FAILED_MARK = "[fidelity: the tool exited with status"
SIZES = [8 * 2**k for k in range(26)]      # 8 B .. 256 MiB, x2: all_reduce_perf -b 8 -e 256M -f 2


def sh(cmd: list[str], log: Path, timeout: float, env: dict | None = None, procs: int = 1) -> tuple[int, str]:
    t0 = time.perf_counter()
    try:
        if procs > 1:
            rc, text = fidelity.run_processes(cmd, procs, timeout, {**os.environ, **ENV, **(env or {})})
        else:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               env={**os.environ, **ENV, **(env or {})})
            text, rc = p.stdout + (("\n[stderr]\n" + p.stderr) if p.stderr.strip() else ""), p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = f"{(e.stdout or b'')!s}\n[timeout after {timeout} s]", 124
    except OSError as e:
        text, rc = f"[could not start {cmd[0]}: {e}]", 127
    if rc != 0:  # compare() leaves out a tool output that ends this way
        text += f"\n{FAILED_MARK} {rc}]\n"
    log.write_text(text)
    envs = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    launch = f"[{procs} processes] " if procs > 1 else ""
    print(f"$ {launch}{envs + ' ' if envs else ''}{' '.join(cmd)}  -> rc {rc} in {time.perf_counter() - t0:.1f} s",
          flush=True)
    return rc, text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ext", default=str(ROOT / ".ext"))
    ap.add_argument("--out", help="directory for the raw outputs and fidelity.csv")
    ap.add_argument("--compare", metavar="OUTDIR",
                    help="only rebuild OUTDIR/fidelity.csv from the raw files a measuring run left there "
                         "(no GPU needed)")
    ap.add_argument("--build", default="/tmp/fidelity-build")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--tool-repeats", type=int, default=3,
                    help="runs of each nccl-tests command: the comparison uses their median and reports "
                         "each run against it (the tool's own noise)")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs (ranks) to compare on; 0 = every visible GPU")
    ap.add_argument("--variants", default=None,
                    help="NCCL variants (helpers.interconnect.settings.VARIANTS) compared with several GPUs: each "
                         "runs nccl-tests and our torch.distributed sweep under that environment (default: "
                         "default,P2P_DISABLE=1,GRAPH_MIXING_SUPPORT=0; with --focus procs: default,P2P_DISABLE=1)")
    ap.add_argument("--focus", choices=list(FOCUS), default=None,
                    help="procs: only nccl-tests -np N -g 1 -G 1 against our aligned graph harness and the host-path "
                         "study's method, no copies (one device command at eight ranks)")
    a = ap.parse_args(argv)
    focus = FOCUS.get(a.focus or "", {})
    if a.variants is None:
        a.variants = focus.get("variants", "default,P2P_DISABLE=1,GRAPH_MIXING_SUPPORT=0")
    if a.compare:
        if not (Path(a.compare) / "meta.json").exists():
            ap.error(f"--compare {a.compare}: no meta.json there; give the --out directory of a measuring run")
        table = compare(Path(a.compare))
        pd.set_option("display.width", 250)
        print(fidelity.verdict(table).to_string(index=False))
        return 0
    if not a.out:
        ap.error("--out is required (or --compare OUTDIR)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        print("fidelity: torch sees no CUDA GPU here; run this on a GPU host", file=sys.stderr)
        return 2
    have = torch.cuda.device_count()
    n = a.gpus or have
    if not 1 <= n <= have:
        print(f"fidelity: --gpus {a.gpus} but torch sees {have} GPU(s); use 0 (all) or 1..{have}", file=sys.stderr)
        return 2
    variants = [v.strip() for v in a.variants.split(",") if v.strip()] if n > 1 else ["default"]
    bad = [v for v in variants if v not in settings.VARIANTS]
    if bad:
        print(f"fidelity: unknown --variants {bad}; choose from {list(settings.VARIANTS)}", file=sys.stderr)
        return 2
    if "default" not in variants:
        variants.insert(0, "default")
    device = f"{n}x {torch.cuda.get_device_name(0)}"
    t_all = time.perf_counter()
    build = Path(a.build)
    ar_bin, p2p_bin = build / "nccl-tests" / "all_reduce_perf", build / "p2p" / "p2pBandwidthLatencyTest"
    ar_mpi_bin = build / "nccl-tests" / "all_reduce_perf_mpi"
    if not a.skip_build:
        rc, text = sh(["bash", str(ROOT / "benchmarks" / "fidelity" / "build.sh"), a.ext, str(build)],
                      out / "build.log", 400)
        print(text[-3000:])

    # ---- the tools: all_reduce_perf per variant and launch shape, eager and -G 1; compare() reads the files
    visible = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(n))}
    # Three launch shapes with several GPUs: -g n (one thread drives every GPU, nccl-tests' usual
    # single-node form), -t n -g 1 (one thread per GPU in one process) and -np n -g 1 (one process per
    # GPU, `mpirun -np n`'s shape, through benchmarks/fidelity/mpishim): the last is how our torchrun
    # workers launch, so it is the like-for-like comparison.
    shapes = launch_shapes(n, focus.get("shapes"))
    for v in variants:
        for shape in shapes:
            for graph in focus.get("graph_modes", (False, True)):
                name = _tool_name(v, graph, shape)
                procs = int(shape.split()[1]) if shape.startswith("-np") else 1
                cmd = ([str(ar_mpi_bin if procs > 1 else ar_bin), "-b", "8", "-e", "256M", "-f", "2"]
                       + (shape.split()[2:] if procs > 1 else shape.split()) + (["-G", "1"] if graph else []))
                for k in range(a.tool_repeats):   # repeats: the tool's own run-to-run spread
                    rc, text = sh(cmd, out / f"{name}{'' if k == 0 else f'.r{k + 1}'}.txt", 180,
                                  {**settings.env(v, settings.VARIANT_SWEEP), **visible}, procs=procs)
                    if k == 0:
                        print(text[-2500:], flush=True)
    copies_too = focus.get("copies", True)
    for k in range(a.tool_repeats if copies_too else 0):   # each matrix cell is one sample per run: the repeats show its spread
        rc, text = sh([str(p2p_bin)], out / f"p2pBandwidthLatencyTest{'' if k == 0 else f'.r{k + 1}'}.txt", 180,
                      visible)
        if k == 0:
            print(text[-4000:], flush=True)
    # The tool times GPU 0 -> GPU 1 before GPU 1 -> GPU 0 (its matrix goes row by row): listed in reverse,
    # the physical directions swap places, which shows whether a direction's figure depends on its turn
    for k in range(a.tool_repeats if n > 1 and copies_too else 0):
        sh([str(p2p_bin)], out / f"p2pBandwidthLatencyTest_reversed{'' if k == 0 else f'.r{k + 1}'}.txt", 180,
           {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in reversed(range(n)))})

    # ---- ours: collectives through torchrun, one process per GPU; ncclAllReduce on a communicator of
    # our own (helpers.interconnect.nccl) is the call sglang's pynccl makes in its decode graphs and the one
    # nccl-tests times, with a real out-of-place
    runs = our_runs(n, variants, bool(focus))
    results = []
    for v, m in runs:
        t0 = time.perf_counter()
        r = collectives.run_collectives("nccl", n, SIZES, ops=("all_reduce",), warmup=5, iters=20, repeats=5,
                                        timeout_s=240 if focus else 120, variant=v, method=m,
                                        env={"NCCL_DEBUG": "VERSION", **settings.env(v, settings.VARIANT_SWEEP)},
                                        workdir="/tmp/fidelity-points")
        print(f"ours {v} {m.label}: {r.status} {len(r.rows)} points in {time.perf_counter() - t0:.1f} s "
              f"{r.message[-800:]}", flush=True)
        if r.status != "ok":
            print(r.log[-3000:])
        results.append(r)
    # ---- ours: ncclAllReduce called directly (torch.cuda.nccl, one process, -g n's shape)
    direct_runs = [] if focus else [DIRECT_EAGER, oop(DIRECT_EAGER)] + ([DIRECT_GRAPH, oop(DIRECT_GRAPH)] if n == 1 else [])
    for m in direct_runs:
        t0 = time.perf_counter()
        try:
            r = collectives.measure_direct(SIZES, method=m, gpus=n)
            print(f"ours direct {m.label}: {len(r.rows)} points in {time.perf_counter() - t0:.1f} s", flush=True)
            results.append(r)
        except Exception as e:  # reported, the rest goes on
            print(f"ours direct {m.label}: {type(e).__name__}: {e}", flush=True)
    coll = collectives.tidy(results, device_label=device)
    coll.to_csv(out / "ours_collectives.csv", index=False)
    torch_nccl = fidelity.nccl_tests_version("\n".join(r.log for r in results))

    # ---- ours: copies, at p2pBandwidthLatencyTest's sizes and repeat counts
    paths = (["same_device"] + (["peer", "host_bounce"] if n > 1 else [])) if copies_too else []
    copies = []
    # the peer path both ways, GPU 1 -> GPU 0 with the tool's method only: each direction is set against
    # the tool's figure for the same direction
    points = [(path, h, False) for path in paths for h in copybench.HARNESSES]
    points += [("peer", "queued", True)] if n > 1 and copies_too else []
    for path, h, rev in points:
        for size, iters in ((fidelity.P2P_LARGE_BYTES, 5), (fidelity.P2P_SMALL_BYTES, 100)):
            try:
                st = copybench.measure(path, size, h, iters=iters, repeats=7, warmup=3, reverse=rev)
            except Exception as e:  # reported, the rest goes on
                print(f"copy {path} {h} {size}{' reverse' if rev else ''}: {type(e).__name__}: {e}")
                continue
            bw = size / (st["time_us"] * 1e3)
            src_gpu, dst_gpu = ((1, 0) if rev else (0, 1)) if path in copybench.CROSS_DEVICE_PATHS else (0, 0)
            copies.append({"path": path, "harness": h, "size_bytes": size, "iters": iters, "repeats": 7,
                           **st, "bandwidth_GBps": bw, "p2ptest_GBps": 2 * bw if path == "same_device" else bw,
                           "issued_by": copybench.issued_by(path, h), "src_gpu": src_gpu, "dst_gpu": dst_gpu,
                           "device": device})
    cp = pd.DataFrame(copies)
    cp.to_csv(out / "ours_copies.csv", index=False)

    # ---- comparison, from the files just written (re-run it alone with --compare OUTDIR)
    meta = {"gpus": n, "variants": variants, "shapes": shapes, "device": device, "torch_version": torch.__version__,
            "torch_nccl_version": torch_nccl, "focus": a.focus or ""}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    table = compare(out)
    pd.set_option("display.width", 250)
    print(table.drop(columns=["kind", "ours_method"]).to_string(index=False))
    print(fidelity.verdict(table).to_string(index=False))
    print(f"fidelity: {len(table)} rows on {device} in {time.perf_counter() - t_all:.1f} s")
    return 0


def compare(out: Path) -> pd.DataFrame:
    """Build fidelity.csv in `out` from the raw files a measuring run left there (meta.json, the tools'
    stdout, ours_collectives.csv, ours_copies.csv); a tool whose output is missing or unreadable is
    reported and left out."""
    meta = json.loads((out / "meta.json").read_text())
    n, variants, shapes, device = meta["gpus"], meta["variants"], meta["shapes"], meta["device"]
    tool_txt = {}
    for f in out.glob("*.txt"):
        text = f.read_text()
        if FAILED_MARK in text:
            print(f"compare: {f.name}: the tool failed there; left out", file=sys.stderr)
            continue
        tool_txt[f.stem] = text
    # files written before methods were objects carry harness labels: mapped once, here
    coll = recorded_labels.from_tidy(pd.read_csv(out / "ours_collectives.csv"), rotate_bytes=MAX_BYTES,
                                     stream=recorded_labels.STUDY_STREAM.get(out.resolve().name, "side"))
    cp_file = out / "ours_copies.csv"
    cp = pd.read_csv(cp_file) if cp_file.exists() and cp_file.stat().st_size > 1 else pd.DataFrame()

    def runs_of(name, parse):
        """Every run of one tool command (name.txt, name.r2.txt, ...) that parses; the others reported."""
        runs = []
        for key in [k for k in [name] + sorted(k for k in tool_txt if k.startswith(name + ".r")) if k in tool_txt]:
            try:
                runs.append(parse(tool_txt[key]))
            except fidelity.ToolOutputError as e:
                print(f"compare: {key}: {e}", file=sys.stderr)
        return runs

    def parsed(name, setting):
        """The median over the command's runs, and each run against it."""
        runs = runs_of(name, fidelity.parse_nccl_tests)
        if not runs:
            return None
        if len(runs) > 1:
            rows.extend(fidelity.tool_self_rows(runs, setting, device, placements=("in-place",)))
        return fidelity.median_of_runs(runs)

    rows = []
    # the aligned start's lead as this run recorded it (runs before the worker recorded one: LEGACY_LEAD_US)
    leads = coll[coll.start == "aligned"].start_lead_us.dropna()
    lead = int(leads.iloc[0]) if len(leads) else None
    direct = coll[coll.backend == "nccl-direct"]
    coll = coll[coll.backend != "nccl-direct"]
    for v, g in [(v, g) for v in variants for g in shapes]:
        mine = coll[coll.variant == v]
        # torch.distributed has no out-of-place all-reduce: ours is a copy then the in-place call. On one
        # rank NCCL's out-of-place call is itself a copy, so the two match in method; across ranks ours
        # does the copy on top, so that comparison is shown but not counted as the same method.
        oop_same = n == 1
        setting = fidelity.tool_setting(g, False, v)
        nt = parsed(_tool_name(v, False, g), setting)
        if nt is not None:
            pairs = [(TORCH_EAGER, True), (oop(TORCH_EAGER), oop_same)] + ([(EAGER, False)] if v == "default" else [])
            pairs += [(NCCL_EAGER, True)]
            for m, same in pairs:
                rows += fidelity.compare_all_reduce(nt, mine, setting, m, same, device)
            if v == "default" and g.startswith("-g"):   # the direct calls drive every GPU from one thread
                for m in (DIRECT_EAGER, oop(DIRECT_EAGER)):
                    rows += fidelity.compare_all_reduce(nt, direct, setting, m, True, device)
        setting = fidelity.tool_setting(g, True, v)
        ng = parsed(_tool_name(v, True, g), setting)
        if ng is not None:
            pairs = [(TORCH_GRAPH, True), (oop(TORCH_GRAPH), oop_same), (aligned(TORCH_GRAPH, lead), True),
                     (aligned(NCCL_GRAPH, lead), True),
                     # NCCL's own call: out of place is the same method as the tool's, and counted
                     (NCCL_GRAPH, True), (oop(NCCL_GRAPH), True),
                     # the host-path study's and variant sweep's method: one buffer where the tool rotates
                     # through 256 MiB, so shown, not counted
                     (VARIANT_METHOD, False)]
            for m, same in pairs:
                rows += fidelity.compare_all_reduce(ng, mine, setting, m, same, device)
            if v == "default" and g.startswith("-g"):
                for m in (DIRECT_GRAPH, oop(DIRECT_GRAPH)):
                    rows += fidelity.compare_all_reduce(ng, direct, setting, m, True, device)
    p2p_runs = runs_of("p2pBandwidthLatencyTest", fidelity.parse_p2p)
    if p2p_runs and len(cp):   # the median of the tool's runs, cell by cell, and each run against it
        rows += fidelity.copy_rows(fidelity.median_p2p(p2p_runs), cp, device)
        if len(p2p_runs) > 1:
            rows += fidelity.p2p_self_rows(p2p_runs, device)
        rev_runs = runs_of("p2pBandwidthLatencyTest_reversed", fidelity.parse_p2p)
        if rev_runs:   # the same tool with the GPUs listed in reverse: does a figure depend on its turn?
            try:
                rows += fidelity.p2p_order_rows(fidelity.median_p2p(p2p_runs),
                                                fidelity.unreverse_p2p(fidelity.median_p2p(rev_runs), n), cp, device)
            except fidelity.ToolOutputError as e:
                print(f"compare: p2pBandwidthLatencyTest_reversed: {e}", file=sys.stderr)
    table = pd.DataFrame(rows, columns=fidelity.COLUMNS)
    table["nccl_version"] = fidelity.nccl_tests_version(tool_txt.get(_tool_name("default", False, shapes[0]), ""))
    table["torch_nccl_version"] = meta.get("torch_nccl_version", "")
    table["torch_version"] = meta.get("torch_version", "")
    table.to_csv(out / "fidelity.csv", index=False)
    return table



def launch_shapes(n: int, only=None) -> list[str]:
    """nccl-tests' launch shapes on n GPUs: -g n (one thread drives every GPU), then with several GPUs
    -t n -g 1 (a thread per GPU) and -np n -g 1 (a process per GPU); `only` keeps those named by their
    flag ('g', 't', 'np')."""
    shapes = [f"-g {n}"] + ([f"-t {n} -g 1", f"-np {n} -g 1"] if n > 1 else [])
    kept = [s for s in shapes if s.split()[0].lstrip("-") in only] if only else shapes
    return kept or shapes[:1]   # one GPU has one shape


def our_runs(n: int, variants: list[str], focus: bool = False) -> list[tuple[str, Method]]:
    """(variant, method) of every torchrun launch of ours. Focused: per variant the graph harness with
    every rank launched at one deadline, through torch.distributed and through ncclAllReduce, and the
    host-path study's own method (VARIANT_METHOD)."""
    if focus:
        return [(v, m) for v in variants for m in (aligned(TORCH_GRAPH), aligned(NCCL_GRAPH), VARIANT_METHOD)]
    runs = [("default", m) for m in (EAGER, TORCH_EAGER, oop(TORCH_EAGER), TORCH_GRAPH, oop(TORCH_GRAPH),
                                     NCCL_EAGER, NCCL_GRAPH, oop(NCCL_GRAPH))]
    # With several ranks: the graph harness once more with every rank launched at one shared deadline:
    # what is left of the gap once start skew is gone
    launched_together = [aligned(TORCH_GRAPH), aligned(NCCL_GRAPH)] if n > 1 else []
    runs += [("default", m) for m in launched_together]
    for v in variants[1:]:
        runs += [(v, m) for m in [TORCH_EAGER, TORCH_GRAPH] + launched_together]
    return runs


def _tool_name(variant: str, graph: bool, shape: str) -> str:
    kind = "" if shape.startswith("-g") else "_procs" if shape.startswith("-np") else "_threads"
    base = "nccl_tests_all_reduce" + kind + ("_graph" if graph else "")
    return base if variant == "default" else f"{base}_{collectives.slug(variant)}"


if __name__ == "__main__":
    raise SystemExit(main())
