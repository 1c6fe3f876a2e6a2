"""Does the first decode step in a fresh process compute what every later step computes?

`run_fresh(cfg)` runs `check(cfg)` in a process of its own (a fresh torch, dynamo, Inductor and Triton state):
one DecodeStep built and run eagerly three times, captured in a CUDA graph and replayed (on a GPU), then a
step at another batch, then this shape's step again; every call's logits are compared with the second
call's. A first call that differs while the third equals the second is a kernel that ran once (issue 34:
dynamo's automatic dynamic shapes replaced the first call's specialized graphs); calls that all differ from
each other are run-to-run nondeterminism (atomic adds), which this check reports but does not cause.

For the scaled-down models (`*-mini`) the experts the fp32 reference chose are forced, so that a rounding
difference is not magnified by another choice of experts; at GLM-5's own shapes the step routes itself.

    python -m helpers.model.firstcall '{"dtype": "fp8", "batch": 4, "context": 64}'    # one, this process
    benchmarks/first_call.py                                                            # the grid, each fresh
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields

#: a first call (or a call after another shape) further than this from the second call differs (relative L2)
SAME = 1e-6


@dataclass(frozen=True)
class FirstCallConfig:
    model: str = "glm5-mini"
    dtype: str = "fp8"
    fusion: str = "fused"
    overlap: str = "off"
    batch: int = 4
    context: int = 64
    device: str = "cuda"
    tp: int = 8
    moe_held: int | None = None

    @classmethod
    def parse(cls, obj: dict) -> "FirstCallConfig":
        known = {f.name for f in fields(cls)}
        bad = sorted(set(obj) - known)
        if bad:
            raise ValueError(f"first-call configuration: unknown keys {bad}; expected some of {sorted(known)}")
        return cls(**obj)


def rel_l2(x, ref) -> float:
    """Relative L2 distance of `x` from `ref` (0.0 where they are equal)."""
    r = ref.double()
    return float((x.double() - r).norm() / r.norm().clamp_min(1e-30))


def verdict(row: dict) -> str:
    """'same' (every call equal to the second), 'first call differs' (the first alone, or a call after another
    shape, differs), 'run to run' (calls differ from each other), or the row's error."""
    if row.get("error"):
        return f"error: {row['error']}"
    later = [row.get(k) for k in ("third_vs_second", "replay_vs_second") if row.get(k) is not None]
    if any(v > SAME for v in later):
        return "run to run"
    if row["first_vs_second"] > SAME or row["after_other_batch_vs_second"] > SAME:
        return "first call differs"
    return "same"


def _model(cfg: FirstCallConfig):
    """(rank model, forced routing or None) for `cfg`."""
    from . import arith as ma
    from . import step, steptime

    m = ma.load_model(cfg.model)
    if cfg.model.endswith("-mini"):
        full = step.build_full(m, max(cfg.batch, 2), cfg.context, "fp32")
        rm = step.to_device(step.convert_model(full, cfg.dtype), cfg.device)
        routing: list = []
        step.unsharded_logits(m, cfg.batch, cfg.context, routing=routing)
        return rm, [r.to(cfg.device) for r in routing]
    sc = steptime.SweepConfig(model=cfg.model, tp=cfg.tp, batches=(cfg.batch, 2), contexts=(cfg.context,),
                              dtype=cfg.dtype, device=cfg.device, moe_held=cfg.moe_held)
    return steptime.one_rank(sc, progress=lambda s: None)[0], None


def check(cfg: FirstCallConfig) -> dict:
    """Run `cfg` in this process (see the module docstring) and return its row."""
    import torch

    from . import fused as fz
    from . import step, steptime

    t0 = time.monotonic()
    rm, forced = _model(cfg)
    cuda = cfg.device.startswith("cuda")

    def new_step(batch):
        st = step.DecodeStep(rm, batch, cfg.context, shared_overlap=cfg.overlap, fusion=cfg.fusion)
        st.forced_routing = forced if batch == cfg.batch else None
        return st

    def call(st):
        st.run()
        if cuda:
            torch.cuda.synchronize()
        return st.logits().float().cpu().clone()

    st = new_step(cfg.batch)
    calls = [call(st) for _ in range(3)]
    replay = None
    if cuda and st.moe_impl != "loop":
        g = steptime.capture(st.run)
        g.replay()
        torch.cuda.synchronize()
        replay = st.logits().float().cpu().clone()
    call(new_step(2 if cfg.batch != 2 else 1))
    again = call(new_step(cfg.batch))
    ref = calls[1]
    row = {**asdict(cfg), "moe_impl": st.moe_impl, "compiled": st.compiled, "overlap_ran": st.overlap,
           "first_vs_second": rel_l2(calls[0], ref), "third_vs_second": rel_l2(calls[2], ref),
           "replay_vs_second": None if replay is None else rel_l2(replay, ref),
           "after_other_batch_vs_second": rel_l2(again, ref),
           "compiled_functions": len({r["function"] for r in fz.COMPILE_LOG}), "compilations": len(fz.COMPILE_LOG),
           "seconds": round(time.monotonic() - t0, 1)}
    row["verdict"] = verdict(row)
    return row


def run_fresh(cfg: FirstCallConfig, timeout_s: float = 300.0) -> dict:
    """`check(cfg)` in a new Python process; a crash or a timeout becomes the row's error (within timeout_s)."""
    cmd = [sys.executable, "-m", "helpers.model.firstcall", json.dumps(asdict(cfg))]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        return {**asdict(cfg), "error": f"timed out after {timeout_s:.0f} s", "verdict": "error: timed out"}
    rows = [ln[4:] for ln in p.stdout.splitlines() if ln.startswith("ROW ")]
    if rows:
        return json.loads(rows[-1])
    last = (p.stderr.strip().splitlines() or [f"exit {p.returncode}, no output"])[-1][:300]
    return {**asdict(cfg), "error": last, "verdict": f"error: {last}"}


def run_fresh_all(cfgs: list[FirstCallConfig], timeout_s: float = 300.0, jobs: int = 1) -> list[dict]:
    """run_fresh for every configuration, up to `jobs` processes at once (each checks bitwise agreement within
    itself, so processes side by side on one GPU change no verdict; the compilations they start are CPU work
    a GPU host has cores for); the rows in the order of `cfgs`."""
    if not (isinstance(jobs, int) and jobs >= 1):
        raise ValueError(f"jobs={jobs!r}: a whole number of at least 1")
    if jobs == 1:
        return [run_fresh(c, timeout_s) for c in cfgs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda c: run_fresh(c, timeout_s), cfgs))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m helpers.model.firstcall '<configuration as JSON>'", file=sys.stderr)
        return 2
    print("ROW " + json.dumps(check(FirstCallConfig.parse(json.loads(argv[0])))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
