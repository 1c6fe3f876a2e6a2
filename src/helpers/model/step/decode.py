"""DecodeStep: one decode step of `batch` sequences on one rank, built as a list of ops (its programs:
program_unfused, program_fused), run whole or by component or op. See helpers.model.step for the whole step."""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Iterable

import numpy as np
import pandas as pd
import torch

from .. import fp8
from .. import fused as fz
from .. import moe_triton
from .build import RankModel, check_shape_args
from .ops import MOE_IMPLS, QUANTIZED, grouped_mm, grouped_mm_loop
from .program_fused import FusedProgram
from .program_unfused import UnfusedProgram
from .shapes import (ATTENTION_MODES, COMPONENTS, DTYPES, DUAL_STREAM_TOKEN_THRESHOLD, FUSIONS, SHARED_OVERLAP,
                     StepError)


class DecodeStep(UnfusedProgram, FusedProgram):
    """One decode step of `batch` sequences at `context` tokens of context on one rank.

    `group`: a torch.distributed process group for the TP collectives (None: left out).
    `attention`: "dense" reads the whole KV cache (as the bare-metal reference ran GLM-5 on SM120); "sparse" reads the
    indexer's top-k entries (DSA).
    `moe_impl`: see MOE_IMPLS.
    `shared_overlap`: "auto" runs the shared expert beside the routed ones on a second CUDA stream as
    SGLang does (on CUDA, for up to DUAL_STREAM_TOKEN_THRESHOLD tokens); "on" always (CUDA only); "off"
    one stream. `self.overlap` says what was chosen."""

    def __init__(self, rm: RankModel, batch: int, context: int, group=None, attention: str = "dense", seed: int = 1,
                 moe_impl: str = "auto", shared_overlap: str = "auto", fusion: str = "fused", compile: str = "auto"):
        check_shape_args(batch, context)
        if fusion not in FUSIONS:
            raise StepError(f"fusion {fusion!r}: expected one of {FUSIONS}")
        if compile not in fz.COMPILE:
            raise StepError(f"compile {compile!r}: expected one of {fz.COMPILE}")
        if batch > rm.batch_max or context > rm.context_max:
            raise StepError(f"batch {batch} x context {context} exceeds what the caches were built for "
                            f"({rm.batch_max} x {rm.context_max})")
        if attention not in ATTENTION_MODES:
            raise StepError(f"attention {attention!r}: expected one of {ATTENTION_MODES}")
        if moe_impl not in MOE_IMPLS:
            raise StepError(f"moe_impl {moe_impl!r}: expected one of {MOE_IMPLS}")
        if shared_overlap not in SHARED_OVERLAP:
            raise StepError(f"shared_overlap {shared_overlap!r}: expected one of {SHARED_OVERLAP}")
        self.rm, self.b, self.c, self.group, self.attention = rm, batch, context, group, attention
        m, dev = rm.m, rm.device
        self.fusion = fusion
        #: whether the fused path's functions run through torch.compile (helpers.model.fused)
        self.compiled = fusion == "fused" and fz.wants_compile(dev, compile)
        if moe_impl == "triton" and not moe_triton.available(str(dev)):
            raise StepError(f"moe_impl 'triton' needs a CUDA device with Triton; this step runs on {dev}: use "
                            f"'auto' (it takes torch._grouped_mm or the per-expert loop there)")
        if moe_impl == "auto":
            grouped_fp8_ok = rm.dtype != "fp8" or not (rm.fp8_support or {}).get("grouped_error")
            moe_impl = ("triton" if fusion == "fused" and moe_triton.available(str(dev)) else
                        "grouped_mm" if grouped_fp8_ok else "loop")
        self.moe_impl = moe_impl
        cuda = str(dev).startswith("cuda")
        if shared_overlap == "on" and not cuda:
            raise StepError(f"shared_overlap 'on' runs the shared expert on a second CUDA stream; this step runs "
                            f"on {dev}: use 'auto' or 'off'")
        has_shared = bool(m.moe_layers and m.n_shared)
        self.overlap = has_shared and cuda and (shared_overlap == "on" or (
            shared_overlap == "auto" and batch <= DUAL_STREAM_TOKEN_THRESHOLD))
        self.alt = torch.cuda.Stream(device=torch.device(dev)) if self.overlap else None
        self.dt = DTYPES[rm.act]
        g = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, m.vocab, (batch,), generator=g).to(dev)
        half = m.qk_rope_head_dim // 2
        inv = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half))
        ang = (context - 1) * inv
        self.cos = torch.cos(ang).to(dev, self.dt)
        self.sin = torch.sin(ang).to(dev, self.dt)
        self.scale = 1.0 / math.sqrt(m.qk_head_dim)
        self.S = SimpleNamespace()
        self.record_routing = False
        self.routing: list[torch.Tensor] = []
        #: expert ids per MoE layer position to use instead of the router's choice (its weights still come
        #: from this step's scores): a comparison of two precisions then measures their products, not
        #: which near-tied experts their rounding picked
        self.forced_routing: list[torch.Tensor] | None = None
        self._moe_positions = 0
        self.ops = self._program()

    # ---- collectives
    def _all_reduce(self, name: str):
        if self.group is None:
            return None
        import torch.distributed as dist

        def fn():
            dist.all_reduce(getattr(self.S, name), group=self.group)
        return fn

    def _all_gather_logits(self):
        import torch.distributed as dist
        S, tp = self.S, self.rm.tp

        def fn():
            parts = [torch.empty_like(S.logits) for _ in range(tp)]
            dist.all_gather(parts, S.logits.contiguous(), group=self.group)
            S.full_logits = torch.cat(parts, -1)
        return fn

    # ---- FP8 products
    def _mm(self, src: str, w, split: bool = False) -> torch.Tensor:
        """S.<src> @ w: through the quantized S.<src>_q (values, row scales) where w is an FP8 weight. With
        `split`, a few-row FP8 product may return float32 partial sums that the consumer adds (gated_act)."""
        if isinstance(w, fp8.QWeight):
            xq, s = getattr(self.S, src + "_q")
            if self.moe_impl == "triton" and xq.shape[0] <= moe_triton.DENSE_FP8_ROWS:
                return moe_triton.linear_fp8(xq, s, w, self.dt, split=split)
            return fp8.linear(xq, s, w, self.dt)
        return getattr(self.S, src) @ w

    def _mm_bf16(self, src: str, w: torch.Tensor) -> torch.Tensor:
        """S.<src> @ w for a bf16 weight in the FP8 step (the indexer's weights_proj): a few rows take the
        Triton kernel, one launch, returning float32 partial sums over split K that the consumer adds
        (fused.indexer_scores). torch ran it as two kernels a layer (data/measured/step-fused-h200-20261202)."""
        x = getattr(self.S, src)
        if self.moe_impl == "triton" and x.shape[0] <= moe_triton.DENSE_FP8_ROWS:
            return moe_triton.linear(x, w, split=True)
        return x @ w

    def _quantize(self, add, src: str, component: str, *weights, stream: str = "main") -> None:
        """The op quantizing S.<src> per row, where one of `weights` (its consumers) is held in FP8."""
        if any(isinstance(w, fp8.QWeight) for w in weights):
            S = self.S
            add(f"quantize {QUANTIZED[src]} (fp8)", component,
                lambda: setattr(S, src + "_q", fp8.quantize_rows(getattr(S, src))), stream)

    # ---- the overlap's stream events (no kernels)
    def _fork(self, add, what: str, component: str) -> None:
        """The op sending `what` to the second stream: that stream waits for the main stream's work so far."""
        alt, cur = self.alt, torch.cuda.current_stream
        add(f"fork ({what} to the second stream)", component, lambda: alt.wait_stream(cur()), kind="fork")

    def _join(self, add, what: str, component: str) -> None:
        """The op bringing `what` back: the main stream waits for the second stream's work so far."""
        alt, cur = self.alt, torch.cuda.current_stream
        add(f"join ({what} back)", component, lambda: cur().wait_stream(alt), kind="join")

    def _gmm(self, src: str, w, split: bool = False) -> torch.Tensor:
        """The routed experts' product of S.<src>; with `split`, the Triton kernel may return float32
        partial sums over split K (helpers.model.moe_triton), which the consumer adds (fused.gated_act)."""
        S, offs = self.S, self.S.offs
        if isinstance(w, fp8.QWeight):
            xq, s = getattr(S, src + "_q")
            if self.moe_impl == "triton":
                return moe_triton.moe_gemm_fp8(xq, s, w, offs, torch.bfloat16, split=split)
            if self.moe_impl == "grouped_mm":
                return fp8.grouped_mm(xq, s, w, offs)
            return fp8.grouped_mm_loop(xq, s, w, offs, self.dt)
        x = getattr(S, src)
        if self.moe_impl == "triton":
            return moe_triton.moe_gemm(x, w, offs, split=split)
        return grouped_mm(x, w, offs) if self.moe_impl == "grouped_mm" else grouped_mm_loop(x, w, offs)

    # ---- running
    def components_present(self) -> list[str]:
        return [c for c in COMPONENTS if any(o.component == c for o in self.ops)]

    def op_names(self) -> list[str]:
        """The ops that launch work (the overlap's fork and join are left out: they run with their
        component, never alone)."""
        return list(dict.fromkeys(o.name for o in self.ops if o.kind == "op"))

    def run(self, components: Iterable[str] | None = None, ops: Iterable[str] | None = None) -> None:
        """One step, or only the ops of `components` (or the ops named in `ops`) over every layer; their
        inputs are whatever the last full step left. Ops meant for the second stream run there only where
        the selection holds the fork that hands them over (the whole step, or the MoE block alone)."""
        if components is None and ops is None:
            sel = self.ops
        elif components is not None:
            want = set(components)
            bad = want - set(COMPONENTS)
            if bad:
                raise StepError(f"unknown components {sorted(bad)}; expected some of {COMPONENTS}")
            sel = [o for o in self.ops if o.component in want]
        else:
            want = set(ops)
            bad = want - set(self.op_names())
            if bad:
                raise StepError(f"unknown ops {sorted(bad)}; this step has {self.op_names()}")
            sel = [o for o in self.ops if o.name in want]
        forked = self.overlap and any(o.kind == "fork" for o in sel)
        for op in sel:
            if op.kind != "op" and not forked:
                continue
            if op.stream == "alt" and forked:
                with torch.cuda.stream(self.alt):
                    op.fn()
            else:
                op.fn()

    def logits(self) -> torch.Tensor:
        """The full logits of the last step (gathered over ranks where there is a group)."""
        if not hasattr(self.S, "full_logits"):
            raise StepError("run the step first")
        return self.S.full_logits

    def op_counts(self) -> pd.DataFrame:
        df = pd.DataFrame([{"component": o.component, "op": o.name} for o in self.ops if o.kind == "op"])
        return df.groupby("component", sort=False).size().rename("ops").reset_index()

    def distinct_experts(self) -> float:
        """Mean distinct experts a MoE layer's batch touched in the last recorded step (measured)."""
        if not self.routing:
            raise StepError("no routing recorded: set record_routing = True and run one step")
        return float(np.mean([int(torch.unique(ids).numel()) for ids in self.routing]))
