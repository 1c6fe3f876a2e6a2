"""The verdict for the machine a run measured: its all-reduce at GLM-5's decode sizes against a healthy reference
for its GPU kind, GLM-5's decode predicted on its GPUs, and, where the reader serves a model, the loss, the
host path's share of it and the thresholds that decide, each computed from this machine's numbers.

Nothing here is the original VM's: the loss is this machine's observed step less its own prediction, and the
thresholds are

    t_explains(share) = reference all-reduce + share x loss per step / all-reduces per step

at the message of the decode batch (one token, and the highest concurrency observed), with share `EXPLAINS`
(the host path is the loss) and `CANNOT` (it explains at most that much), the diagnosis's two marks. A
one-rank "all-reduce" moves nothing between GPUs and is never priced: fewer than two GPUs measure no
collective (`allreduce_table` returns None for them).

Every function is pure: tables in, tables and dataclasses out (tests feed committed and synthetic runs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from helpers.model import arith as ma
from helpers.model import kernels as kt
from helpers.model.verdict.ranges import CANNOT, EXPLAINS

#: tokens per decode step at which the all-reduce is timed (one stream to 64 sequences), as chapter 06's sizes
DECODE_TOKENS = (1, 4, 16, 64)
#: aiconfigurator's collection host for each system it ships NCCL tables for, and the link between its GPUs
REFERENCE_HOSTS = {kt.RTX: "aiconfigurator's rtx_pro_6000_server host (PCIe, P2P on)",
                   kt.H200: "aiconfigurator's h200_sxm host (NVLink)",
                   kt.B200: "aiconfigurator's b200_sxm host (NVLink)"}
#: the GPU counts its NCCL tables hold
REFERENCE_GPUS = (2, 4, 8)


class ThisMachineError(ValueError):
    """Inputs to this machine's verdict that do not fit together; the message names which."""


def decode_sizes(m: ma.ModelConfig) -> list[int]:
    """The all-reduce message per decode step at DECODE_TOKENS tokens (bytes, bf16)."""
    return [int(ma.allreduce_bytes(m, t)) for t in DECODE_TOKENS]


def all_reduces_per_step(m: ma.ModelConfig) -> int:
    """The all-reduces of one TP decode step (helpers.model.arith.collective_schedule: the logits' all-gather
    is not one)."""
    return ma.collectives_per_step(m, "all_reduce")


# ------------------------------------------------------------------------------------------ 2. all-reduce
def reference_system(device_name: str | None) -> str | None:
    """The kernel tables' system for a GPU name torch or NVML reports (None: none ships for it)."""
    if not device_name:
        return None
    low = device_name.lower()
    for s in REFERENCE_HOSTS:
        if s.lower() in low or low in s.lower():
            return s
    return None


def reference_allreduce(system: str | None, gpus: int, sizes) -> tuple[np.ndarray | None, str]:
    """A healthy all-reduce over `gpus` GPUs of this kind at `sizes` bytes (reference: aiconfigurator's NCCL
    table for that system, interpolated), and where it comes from; (None, why) where no table exists."""
    if system is None:
        return None, "no reference: aiconfigurator ships no NCCL table for this GPU kind"
    if gpus not in REFERENCE_GPUS:
        return None, f"no reference: aiconfigurator's NCCL tables hold {', '.join(map(str, REFERENCE_GPUS))} GPUs, not {gpus}"
    vals = np.array([kt.comm_us(system, "all_reduce", gpus, float(s)) for s in sizes])
    return vals, f"reference: NCCL over {gpus} GPUs on {REFERENCE_HOSTS[system]}"


def measured_allreduce(run_pairs: pd.DataFrame | None, sweep: pd.DataFrame | None) -> tuple[pd.DataFrame | None, str]:
    """This machine's all-reduce over two GPUs or more: the decisive recipe's timing where this run made it
    (`run_pairs`: helpers.interconnect.pairs' tidy table, one process over every GPU), else chapter 06's eager
    sweep (default NCCL settings, the most ranks it ran, one process per GPU through torch.distributed).
    Columns world_size, size_bytes, time_us; (None, why) where neither has two ranks."""
    if run_pairs is not None and len(run_pairs) and int(run_pairs["world_size"].max()) >= 2:
        t = run_pairs[run_pairs["op"] == "all_reduce"]
        return (t[["world_size", "size_bytes", "time_us"]].reset_index(drop=True),
                "measured: one process over every GPU, eager, as the decisive recipe times it")
    if sweep is not None and len(sweep):
        s = sweep[(sweep["op"] == "all_reduce") & (sweep["backend"] == "nccl") & (sweep["variant"] == "default")
                  & (sweep["harness"] == "eager") & (pd.to_numeric(sweep["world_size"]) >= 2)]
        if len(s):
            s = s[s["world_size"] == s["world_size"].max()]
            return (s[["world_size", "size_bytes", "time_us"]].reset_index(drop=True),
                    "measured: chapter 06's eager sweep (one process per GPU through torch.distributed, which adds "
                    "its own per-call cost to the recipe's)")
    return None, "not measured here: no all-reduce over two GPUs or more in this run"


def one_rank_floor_us(sweep: pd.DataFrame | None, size: float) -> float | None:
    """Chapter 06's NCCL all-reduce on one rank (default settings, eager) at `size` bytes, measured: the library's
    own per-call floor, which moves nothing between GPUs (site-read5 N10); None where the sweep has no such row."""
    if sweep is None or not len(sweep):
        return None
    s = sweep[(sweep["op"] == "all_reduce") & (sweep["backend"] == "nccl") & (sweep["variant"] == "default")
              & (sweep["harness"] == "eager") & (pd.to_numeric(sweep["world_size"]) == 1)]
    if not len(s):
        return None
    at = float(at_sizes(s.groupby("size_bytes", as_index=False)["time_us"].median(), [size])[0])
    return at if np.isfinite(at) else None


def at_sizes(t: pd.DataFrame, sizes) -> np.ndarray:
    """A measured curve at `sizes`, log-log interpolated between its points; NaN outside them."""
    t = t.sort_values("size_bytes")
    x, y = np.log(t["size_bytes"].to_numpy(float)), np.log(t["time_us"].to_numpy(float))
    s = np.log(np.asarray(sizes, dtype=float))
    out = np.exp(np.interp(s, x, y))
    return np.where((s < x.min() - 1e-9) | (s > x.max() + 1e-9), np.nan, out)


def allreduce_table(m: ma.ModelConfig, measured: pd.DataFrame | None, system: str | None) -> pd.DataFrame | None:
    """Per decode size: this machine's all-reduce (measured), the healthy reference for its GPU kind over as
    many GPUs (reference) and their ratio (derived); None where nothing over two GPUs was measured."""
    if measured is None or not len(measured):
        return None
    gpus = int(measured["world_size"].max())
    sizes = decode_sizes(m)
    here = at_sizes(measured, sizes)
    ref, _ = reference_allreduce(system, gpus, sizes)
    return pd.DataFrame({"tokens": DECODE_TOKENS, "size_bytes": sizes, "gpus": gpus, "measured_us": here,
                         "reference_us": ref if ref is not None else np.nan,
                         "ratio": here / ref if ref is not None else np.nan})


# ------------------------------------------------------------------------------------------ 4. observed
@dataclass(frozen=True)
class Observation:
    """Tokens/s this machine served GLM-5 at: one stream, and aggregate at its highest concurrency (the
    decode batch there: the achieved concurrency where known, else the nominal one). `source` says whose."""
    tok_s_1: float
    tok_s_max: float
    concurrency_max: float
    source: str

    def __post_init__(self):
        for k in ("tok_s_1", "tok_s_max", "concurrency_max"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ThisMachineError(f"observation {k} = {v!r}: expected a positive number")

    def ends(self) -> dict[str, tuple[float, float]]:
        """'one stream' and 'highest' -> (decode batch, aggregate tokens/s)."""
        return {"one stream": (1.0, self.tok_s_1), "highest": (float(self.concurrency_max), self.tok_s_max)}


@dataclass(frozen=True)
class Predicted:
    """GLM-5's decode predicted on this GPU kind at one batch: aggregate tokens/s with its 5-95 % band and what
    the prediction rests on."""
    batch: float
    tok_s: float
    low: float
    high: float
    how: str


def loss_table(m: ma.ModelConfig, obs: Observation, pred: dict[str, Predicted], ref_us: dict[str, float | None],
               measured_us: dict[str, float | None]) -> pd.DataFrame:
    """Per end: the observed and predicted step (ms), the loss per step (observed less predicted; its band
    from the prediction's), the all-reduce message, the reference and measured all-reduce there, the
    thresholds t(EXPLAINS) and t(CANNOT), and the host path's share of the loss where an all-reduce was
    measured (derived, each from this machine's numbers)."""
    n_ar = all_reduces_per_step(m)
    rows = []
    for end, (batch, tok) in obs.ends().items():
        p = pred[end]
        step_obs = batch * 1e3 / tok
        step_pred = batch * 1e3 / p.tok_s
        loss = step_obs - step_pred
        loss_lo, loss_hi = step_obs - batch * 1e3 / p.low, step_obs - batch * 1e3 / p.high
        size = int(ma.allreduce_bytes(m, max(1, int(round(batch)))))
        ref, meas = ref_us.get(end), measured_us.get(end)
        row = {"end": end, "batch": batch, "observed_tok_s": tok, "predicted_tok_s": p.tok_s,
               "observed_step_ms": step_obs, "predicted_step_ms": step_pred, "loss_ms": loss, "loss_low_ms": loss_lo,
               "loss_high_ms": loss_hi, "message_bytes": size, "all_reduces_per_step": n_ar,
               "reference_us": ref if ref is not None else np.nan,
               "measured_us": meas if meas is not None and np.isfinite(meas) else np.nan}
        ok = ref is not None and np.isfinite(ref) and loss > 0
        row["explains_us"] = ref + EXPLAINS * loss * 1e3 / n_ar if ok else np.nan
        row["cannot_us"] = ref + CANNOT * loss * 1e3 / n_ar if ok else np.nan
        row["share"] = ((row["measured_us"] - ref) * n_ar / 1e3 / loss if ok and np.isfinite(row["measured_us"])
                        else np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def share_case(share: float) -> str:
    """Where a host-path share falls against the two marks."""
    if not np.isfinite(share):
        return "not measured"
    return "explains" if share >= EXPLAINS else "cannot" if share <= CANNOT else "partly"


# ------------------------------------------------------------------------------------------ 5. remedies
@dataclass(frozen=True)
class Remedy:
    what: str
    setting: str
    moves: str          # the figure it is predicted to move
    tok_s_1: float      # predicted one-stream tokens/s with it (NaN: not priced)
    why: str            # which failed check calls for it


def remedies(failed: dict[str, bool], is_vm: bool, loss: pd.DataFrame | None) -> list[Remedy]:
    """The remedies this machine's failed checks call for, ranked: a false grant first (a correctness fault),
    then by predicted one-stream tokens/s (priced where this machine's loss, reference and measured all-reduce
    give the excess the remedy removes), unpriced last. `failed`: way -> whether it failed on some pair."""
    tok = np.nan
    if loss is not None and len(loss):
        r = loss[loss["end"] == "one stream"].iloc[0]
        if np.isfinite(r["measured_us"]) and np.isfinite(r["reference_us"]):
            excess_ms = max(0.0, (r["measured_us"] - r["reference_us"]) * r["all_reduces_per_step"] / 1e3)
            tok = 1e3 / (r["observed_step_ms"] - excess_ms)
    moves = "the all-reduce to the reference's time"
    out = []
    if failed.get("write"):
        out.append(Remedy("keep P2P off: the grant is false", "NCCL_P2P_DISABLE=1; --disable-custom-all-reduce",
                          "correctness (a false grant hangs NCCL or sums wrong)", np.nan, "owner-side write check"))
    if failed.get("grant") and is_vm:
        out.append(Remedy("a GPUDirect clique for the guest", "QEMU vfio-pci x-nv-gpudirect-clique=N on every GPU",
                          moves, tok, "driver grant, in a VM"))
    if failed.get("grant") and not is_vm:
        out.append(Remedy("GPUs that may reach each other", "ACS off on the bridges above the GPUs, or GPUs behind "
                          "one PCIe switch", moves, tok, "driver grant, on bare metal"))
    if failed.get("nccl") and not failed.get("grant"):
        out.append(Remedy("NCCL onto the P2P path", "NCCL_P2P_LEVEL=SYS (or NCCL_TOPO_FILE)", moves, tok,
                          "NCCL transport"))
    if failed.get("grant"):
        out.append(Remedy("NCCL tuned without P2P", "NCCL_MIN_NCHANNELS=32 NCCL_BUFFSIZE=67108864",
                          "the all-reduce through host memory", np.nan, "driver grant"))
    if failed.get("bandwidth") and not failed.get("grant"):
        out.append(Remedy("a topology with a direct path", "GPUs behind one PCIe switch (nvidia-smi topo -m)", moves,
                          tok, "bandwidth"))
    first = [r for r in out if r.why == "owner-side write check"]
    rest = sorted([r for r in out if r not in first], key=lambda r: -r.tok_s_1 if np.isfinite(r.tok_s_1) else math.inf)
    return first + rest
