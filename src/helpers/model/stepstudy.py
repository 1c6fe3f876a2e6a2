"""A device script's decode-step sweeps packed as one study for data/measured/: what
scripts/device-step-fp8.sh and scripts/device-step-fused.sh run after their sweeps, as

    python -m helpers.model.stepstudy {fp8,fused} --study STUDY --out D --work W --commit SHA [--date YYYY-MM-DD]

It copies each sweep's folder (W/<sweep>/, as benchmarks/bench_step.py wrote it) to D/raw/<sweep>/, merges
them (steptime.merge_sweeps) into D/timings.csv, D/bytes.csv (a `source` column = STUDY added) and
D/meta.json, writes D/README.md (a draft naming each sweep or why it has no timings) and D/register.yaml
(the data/sources.yaml and data/schema.yaml entries, steptime.register_entries), and prints the figures.
Where no sweep wrote timings it says why and writes nothing but the raw copies (the logs say the rest).
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from helpers.core import results

from . import steptime

COMPONENTS_SHOWN = ["attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head"]


@dataclass(frozen=True)
class StudyKind:
    """What differs between the device scripts' studies: the script, its role in data/sources.yaml, its
    sweeps (the names of W's folders, in order), the README's title and opening, what tells the sweeps'
    rows apart, and whether the sweeps compiled fused ops (compile time and kernel counts shown)."""

    script: str
    role: str
    sweeps: tuple[str, ...]
    title: str          # formatted with {dev} and {date}
    about: tuple[str, ...]
    apart: str          # the column (besides dtype) that tells the sweeps' rows apart
    fused: bool


KINDS = {
    "fp8": StudyKind(
        "scripts/device-step-fp8.sh", "decode-step-fp8", ("fp8", "bf16", "bf16-serial", "fp8-serial"),
        "The emulated decode step in bf16 and in FP8 on one {dev} ({date})",
        ("One tensor-parallel rank's share of GLM-5's decode step at TP8 shapes (helpers.model.step, random",
         "weights), timed by helpers.model.steptime in bf16 and with FP8 weights (E4M3, a float32 scale per",
         "output column, activations quantized per token; helpers.model.fp8), with the shared expert on a",
         "second CUDA stream as SGLang runs it and on one stream."),
        "overlap", False),
    "fused": StudyKind(
        "scripts/device-step-fused.sh", "decode-step-fused", ("fused-bf16", "fused-fp8", "unfused-bf16", "unfused-fp8"),
        "The fused decode step in bf16 and in FP8 on one {dev} ({date})",
        ("One tensor-parallel rank's share of GLM-5's decode step at TP8 shapes (helpers.model.step, random",
         "weights), timed by helpers.model.steptime with its small ops fused as an engine fuses them",
         "(helpers.model.fused, compiled by torch.compile) and, at batches 1 and 64, unfused, in bf16 and with",
         "FP8 weights (helpers.model.fp8); the shared expert on a second CUDA stream as SGLang runs it."),
        "fusion", True),
}


def _sweep_line(kind: StudyKind, name: str, m: dict | None) -> str:
    if m is None:
        return f"  - `{name}`: no timings (bench-{name}.log says why)"
    c = m["config"]
    compiled = (f"{c.get('fusion')}, compile {m.get('compile_s', 0):.1f} s in {m.get('compiles', 0)} compilations, "
                if kind.fused else "")
    return (f"  - `{name}`: {c['dtype']}, {compiled}shared_overlap {c['shared_overlap']}, modes {c['modes']}, "
            f"components {c['components']}, experts {m.get('moe_impl')}, {m['plan']['moe_held']} distinct MoE "
            f"layers held ({m['plan']['needed_bytes'] / 2**30:.0f} GiB), "
            + (f"sweep {m['sweep_s']:.1f} s, failures {len(m.get('failures', []))}" if m.get("finished")
               else "INTERRUPTED (its finished points are kept)"))


def readme(kind: StudyKind, dev: str, date: str, commit: str, sweeps: dict) -> str:
    """The study folder's README.md draft: what was timed, the code, the command, each sweep."""
    lines = [f"# {kind.title.format(dev=dev, date=date)}", "", *kind.about, "",
             f"- **Code:** commit {commit} (COMMIT), copied to the device as a working tree.",
             f"- **Command:** `OUT=$OUT BOOK_COMMIT=<sha> {kind.script}` (the sweeps' own command lines "
             "are in it; bench-<sweep>.log holds each one's printout).",
             "- **Machine:** env.txt (nvidia-smi, torch, the FP8 trial's result).", "- **Sweeps:**"]
    lines += [_sweep_line(kind, n, sweeps.get(n)) for n in kind.sweeps]
    lines += ["", f"Files: `timings.csv` (every sweep's rows; `dtype` and `{kind.apart}` tell them apart; microseconds"
              + (";" if kind.fused else "),")]
    lines += ["`kernels`: kernel nodes of the captured CUDA graph),"] if kind.fused else []
    lines += ["`bytes.csv` (bytes one rank reads per component, per precision, derived, with the experts the routing",
              "touched, measured), `meta.json` (each sweep's meta.json under `sweeps`), `raw/<sweep>/` (as written),",
              "`pytest-gpu.log`, `env.txt`. A `source` column was added to the two CSVs; nothing else was changed."]
    return "\n".join(lines) + "\n"


def figures(kind: StudyKind, res: steptime.SweepResult) -> str:
    """The printout: the whole step per variant (graphs), kernels and compile time (fused), each component
    alone at context 384, bytes read per step, and the missing sweeps."""
    t, out = res.timings, []
    s = t[(t.what == "step") & (t.attention == "dense") & (t["mode"] == "graph")].copy()
    s["ms"] = s.median_us / 1e3
    s["variant"] = (s["dtype"] + " " + s["fusion"] if kind.fused
                    else s["dtype"] + s["overlap"].map({True: " 2 streams", False: " 1 stream"}))
    out += ["whole step, CUDA graphs, ms (median):",
            s.pivot_table(index=["context", "batch"], columns="variant", values="ms").round(2).to_string()]
    if kind.fused:
        out += ["kernels per step (CUDA graph kernel nodes):",
                s.pivot_table(index=["context", "batch"], columns="variant", values="kernels").to_string(),
                f"compile s (fused ops, first step of each shape apart): "
                f"{ {n: round(m.get('compile_s', 0), 1) for n, m in res.meta['sweeps'].items()} }"]
    comp = t[(t["mode"] == "graph") & (t.context == 384) & t.batch.isin([1, 64]) & t.what.isin(COMPONENTS_SHOWN)]
    if len(comp):
        cols = ["dtype", "fusion"] if kind.fused else "dtype"
        out += ["each component alone at context 384, us:",
                comp.pivot_table(index=["batch", "what"], columns=cols, values="median_us").round(1).to_string()]
    b = res.bytes
    if len(b):
        g = b[(b.attention == "dense") & (b.context == 384) & b.batch.isin([1, 64])]
        gib = g.groupby(["dtype", "batch"])[["bytes_emulated", "bytes_checkpoint"]].sum() / 2**30
        out += ["GiB read per step at context 384 (emulated; checkpoint formats):", gib.round(2).to_string()]
    return "\n".join(out + [f"missing sweeps: {res.meta['missing']}"])


def pack(kind_name: str, study: str, out_dir: str | Path, work_dir: str | Path, commit: str,
         date: str) -> steptime.SweepResult | None:
    """Pack the sweeps under `work_dir` as the study `study` in `out_dir` (see the module's docstring);
    None where no sweep wrote timings (steptime.merge_sweeps's reason printed)."""
    if kind_name not in KINDS:
        raise ValueError(f"study kind {kind_name!r}: expected one of {sorted(KINDS)}")
    kind, d, w = KINDS[kind_name], Path(out_dir), Path(work_dir)
    if not w.is_dir():
        raise FileNotFoundError(f"--work {w}: no such folder; it is where the sweeps wrote their folders "
                                f"({', '.join(kind.sweeps)})")
    for n in kind.sweeps:                                   # what each sweep wrote, as it wrote it
        if (w / n).exists():
            shutil.copytree(w / n, d / "raw" / n, dirs_exist_ok=True)
    try:
        res = steptime.merge_sweeps({n: w / n for n in kind.sweeps}, d)
    except steptime.StepError as e:                         # no sweep finished: the logs say why
        print(f"merge: {type(e).__name__}: {e}")
        return None
    results.save_table(d, "timings", res.timings.assign(source=study))
    results.save_table(d, "bytes", res.bytes.assign(source=study) if len(res.bytes) else res.bytes)
    sweeps = res.meta["sweeps"]
    dev = next((m.get("device_name") for m in sweeps.values()), "unknown")
    (d / "README.md").write_text(readme(kind, dev, date, commit, sweeps))
    reg = steptime.register_entries(study, dev, date, commit, f"OUT=$OUT BOOK_COMMIT={commit} {kind.script}",
                                    role=kind.role)
    (d / "register.yaml").write_text(
        "# add the first entry to data/sources.yaml and the others to data/schema.yaml, then copy this folder\n"
        f"# (less register.yaml) to data/measured/{study}/\n" + yaml.safe_dump(reg, sort_keys=False, width=110))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.model.stepstudy", description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=sorted(KINDS), help="which device script's study")
    ap.add_argument("--study", required=True, help="the study's name, e.g. step-fp8-h200-20261201")
    ap.add_argument("--out", required=True, help="the study folder to write")
    ap.add_argument("--work", required=True, help="the folder holding one folder per sweep")
    ap.add_argument("--commit", required=True, help="the book's commit the sweeps ran")
    ap.add_argument("--date", default=dt.datetime.now(dt.timezone.utc).date().isoformat())
    a = ap.parse_args(argv)
    try:
        res = pack(a.kind, a.study, a.out, a.work, a.commit, a.date)
    except (ValueError, FileNotFoundError) as e:
        print(f"stepstudy: {e}", file=sys.stderr)
        return 2
    if res is not None:
        print(figures(KINDS[a.kind], res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
