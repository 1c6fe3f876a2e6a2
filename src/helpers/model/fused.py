"""The decode step's small operations as an engine runs them: each a short function that a compiler can turn
into one kernel (or a few), for the `fused` path of helpers.model.step.DecodeStep.

Each function here is plain torch. On a CUDA device `compiled(fn)` hands it to torch.compile (TorchInductor,
which generates Triton kernels: pointwise chains and reductions fused into one kernel each, matrix
products left to cuBLAS), so that what an engine does in one kernel is one kernel here too:

- `add_rmsnorm`: the residual add(s) and the RMSNorm after them (and, for FP8, the per-row quantization of
  the normalized rows for the next product), as SGLang's fused_add_rmsnorm (+ its per-token quant);
- `latent_norms`: the q_a and kv_a RMSNorms of the fused projection's output (and q_a's quantization);
- `rotary_entry`: rotary embedding of the query's and the new key's rope parts in one pass, and the
  new latent KV-cache entry and the attention query built from them (no per-head kernel chains);
- `indexer_qk`, `indexer_topk`: the DSA indexer's key LayerNorm and rotary, then its scores (ReLU, the
  per-head weights, the sum over heads) and top-k;
- `route`: the router's sigmoid, bias, top-k and normalisation (SGLang's biased grouped top-k kernel);
- `permute`: expert order, per-expert row offsets and the rows gathered for the grouped products;
- `gated_act`: SiLU(gate) x up, times each row's routing weight for the experts (the gating fused into the
  activation, before the second grouped product), and its FP8 quantization;
- `combine`: each token's expert rows summed (a gather, no atomics), plus the shared expert's output.

Matrix products, the KV-cache stores (a copy into a slice of the cache) and the collectives stay outside
the compiled functions: torch.compile gives no faster GEMM than cuBLAS at these shapes, and an in-place
write into a view of a larger cache inside a compiled graph costs a copy back.

On a CPU (the CI) the same functions run as written, uncompiled (`compiled` returns them unchanged unless
asked): Inductor's C++ backend compiles them too, but takes minutes on two cores. Their numerics are the
compiled ones' up to the order of float operations; the tests compare the fused step's logits with the
unfused step's, and one compiled function with its plain self.

Compilation: `torch.compile(fn, mode="default", dynamic=False, fullgraph=True)`, and before every call the
sizes that vary from call to call marked symbolic (`VARYING`: the step's batch, as tokens or expert rows, and
its context), every other size a constant the compiler specializes on (the model's widths: a norm over 6144
values is one persistent reduction, not a loop over a symbolic length). Each function thus compiles once for
batch 1 (sizes 1 stay specialized) and once for every larger batch, reused over all layers and steps; a call
with other constants (gated_act's shared and routed experts) gets a graph of its own beside the first, never in
its place. `dynamic=None` (dynamo's automatic dynamic shapes) compiled a specialized graph on the first call
and replaced it with a symbolic one as soon as a second shape came, so the first step in a process ran kernels
no later step ran: measured on the lent H200 (glm5-mini, FP8, benchmarks/first_call.py), the first call's
logits differed from every later call's by 10 % (batch 1) to 44 % (batch 64) relative L2 (issue 34). With
every size symbolic from the start (`dynamic=True`, issue 34's fix) the calls agreed bitwise but the step was
10.6 % slower at batch 1 and 5.8 % at 64 on the H200 (bf16, graphs, context 384: symbolic widths, issue 48);
marking only what varies keeps the first call, the later ones, a graph replay and a call after a step at
another batch bitwise equal (tests/test_fp8.py checks it in fresh processes on a GPU).
Inductor picks each generated kernel's launch configuration by timing the candidates the first time it
runs, so a sweep (helpers.model.steptime) runs its largest batch second: the symbolic graph is tuned where
the candidates differ, not at batch 2 where all take microseconds. `mode="max-autotune"` is not used: on the
H200 it took 73 s to 188 s for the norms and rotary alone.
"""
from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

from . import fp8

#: torch.compile's mode for the fused functions on CUDA
COMPILE_MODE = "default"
#: how the fused functions' sizes are compiled: "marked" (the step's: the VARYING sizes symbolic, the rest
#: constants), and, for a paired benchmark of the alternatives only (benchmarks/bench_dynamic.py, which sets
#: BOOK_STEP_DYNAMIC), "all" (every size symbolic: dynamic=True, issue 34's fix) and "auto" (dynamo's
#: automatic dynamic shapes: dynamic=None, whose first call differs from the later ones)
DYNAMIC = ("marked", "all", "auto")
#: what "compile" settings DecodeStep accepts: "auto" compiles on CUDA only, "on" everywhere, "off" never
COMPILE = ("auto", "on", "off")

_COMPILED: dict = {}
#: seconds spent in the first call of each compiled function and shape (compilation, measured)
COMPILE_LOG: list[dict] = []


def wants_compile(device: str, setting: str = "auto") -> bool:
    if setting not in COMPILE:
        raise ValueError(f"compile {setting!r}: expected one of {COMPILE}")
    if setting == "auto":
        return str(device).startswith("cuda") and os.environ.get("BOOK_STEP_COMPILE", "1") != "0"
    return setting == "on"


#: each compiled function's inputs whose sizes vary from call to call: {parameter: its varying dimensions},
#: where -2 is the rows of a product's output whether or not split-K partial sums (S, rows, n) lead it. The
#: step's batch (tokens, or their expert rows) and its context; every other size is a constant of the model.
VARYING = {
    "embed": {"tokens": (0,)},
    "add_rmsnorm": {"h": (0,), "a": (0,), "b": (0,)},
    "latent_norms": {"qkv": (0,)},
    "rotary_query": {"q": (0,), "qlat": (0,)},
    "attend": {"q": (0,), "k": (0, 1)},
    "attend_sparse": {"q": (0,), "cache": (0, 1), "topi": (0,)},
    "absorb_v": {"olat": (0,)},
    "indexer_qk": {"iq": (0,), "ik": (0,)},
    "indexer_scores": {"iq": (0,), "keys": (0, 1), "iw": (-2,)},
    "indexer_topk": {"iq": (0,), "keys": (0, 1), "iw": (-2,)},
    "route": {"logits": (0,)},
    "route_forced": {"logits": (0,), "ids": (0,)},
    "permute": {"ids": (0,), "rw": (0,), "x": (0,)},
    "permute_fp8": {"ids": (0,), "rw": (0,), "xq": (0,), "s": (0,)},
    "gated_act": {"g": (-2,), "w": (0,)},
    "combine": {"g2": (0,), "inv": (0,), "shared": (0,)},
}


def compiled(fn, on: bool):
    """`fn` compiled by torch.compile (once per process: every layer and every step share it), or `fn`. Static
    sizes but those VARYING names for `fn`, marked symbolic before each call: see the module docstring."""
    if not on:
        return fn
    if fn not in _COMPILED:
        import torch._dynamo

        if fn.__name__ not in VARYING:
            raise KeyError(f"helpers.model.fused.{fn.__name__}: no entry in VARYING; name the dimensions of its "
                           "inputs that vary from call to call (batch, context) there before compiling it")
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        how = dynamic_setting()
        c = torch.compile(fn, mode=COMPILE_MODE, dynamic={"marked": False, "all": True, "auto": None}[how],
                          fullgraph=True)
        _COMPILED[fn] = _Timed(c, fn, mark=how == "marked")
    return _COMPILED[fn]


def dynamic_setting() -> str:
    """DYNAMIC's choice for this process: $BOOK_STEP_DYNAMIC, "marked" where unset."""
    how = os.environ.get("BOOK_STEP_DYNAMIC", "marked")
    if how not in DYNAMIC:
        raise ValueError(f"BOOK_STEP_DYNAMIC={how!r}: expected one of {DYNAMIC} (unset: marked)")
    return how


def varying_positions(fn) -> list[tuple[int, str, tuple[int, ...]]]:
    """(position, parameter, dimensions) of each of `fn`'s VARYING inputs, in its signature's order."""
    import inspect

    names = list(inspect.signature(fn).parameters)
    want = VARYING[fn.__name__]
    unknown = set(want) - set(names)
    if unknown:
        raise KeyError(f"VARYING[{fn.__name__!r}] names {sorted(unknown)}, which {fn.__name__} does not take")
    return [(names.index(n), n, dims) for n, dims in want.items()]


class _Timed:
    """A compiled function that marks its varying sizes symbolic before each call, and logs how long a call took
    when it compiled (dynamo's frame counter moved)."""

    def __init__(self, c, fn, mark: bool = True):
        self.c, self.name, self.varying = c, fn.__name__, (varying_positions(fn) if mark else [])

    def __call__(self, *a, **k):
        import torch._dynamo
        from torch._dynamo.utils import counters

        for i, name, dims in self.varying:
            t = a[i] if i < len(a) else k.get(name)
            if isinstance(t, torch.Tensor):
                for d in dims:
                    torch._dynamo.maybe_mark_dynamic(t, d % t.dim())
        before = counters["stats"]["unique_graphs"]
        t0 = time.monotonic()
        out = self.c(*a, **k)
        if counters["stats"]["unique_graphs"] != before:
            COMPILE_LOG.append({"function": self.name, "seconds": time.monotonic() - t0,
                                "shapes": [tuple(x.shape) for x in a if isinstance(x, torch.Tensor)][:3]})
        return out


def compile_seconds() -> float:
    return float(sum(r["seconds"] for r in COMPILE_LOG))


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def _quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8.quantize_rows as one expression (max |x| per row, scale, divide, cast)."""
    s = x.float().abs().amax(-1, keepdim=True).clamp_min(fp8._EPS) * (1.0 / fp8.FP8_MAX)
    return (x.float() / s).to(fp8.FP8), s


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


# ---- norms


def add_rmsnorm(h: torch.Tensor, a: torch.Tensor | None, b: torch.Tensor | None, w: torch.Tensor, eps: float,
                quant: bool):
    """h + a (+ b), and RMSNorm of the sum with weight w; with `quant`, the normalized rows quantized to
    FP8 too. Returns (new h, normalized rows, (values, row scales) or None)."""
    if a is not None:
        h = h + (a if b is None else a + b)
    x = _rms(h, w, eps)
    return h, x, (_quant(x) if quant else None)


def latent_norms(qkv: torch.Tensor, wq: torch.Tensor, wkv: torch.Tensor, ql: int, kl: int, r: int,
                 cos: torch.Tensor, sin: torch.Tensor, eps: float, quant: bool):
    """The q_a and kv_a RMSNorms of the fused projection's output (q_a quantized with `quant`), and the new
    latent cache entry [kv_a normalized | rotary(k_pe)]."""
    qc = _rms(qkv[:, :ql], wq, eps)
    kvc = _rms(qkv[:, ql:ql + kl], wkv, eps)
    entry = torch.cat([kvc, _rope(qkv[:, ql + kl:ql + kl + r], cos, sin)], -1)
    return qc, entry, (_quant(qc) if quant else None)


# ---- attention


def rotary_query(q: torch.Tensor, qlat: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, nope: int):
    """Rotary embedding of the query's rope part, all heads at once: the attention query [qlat | rope(q_pe)]."""
    return torch.cat([qlat, _rope(q[..., nope:], cos, sin)], -1)


def attend(q: torch.Tensor, k: torch.Tensor, scale: float, kl: int) -> torch.Tensor:
    """Decode attention over latent keys k [b, n, kl + rope] for queries q [b, heads, kl + rope]."""
    s = torch.bmm(q, k.transpose(1, 2)) * scale
    p = torch.softmax(s.float(), -1).to(q.dtype)
    return torch.bmm(p, k[..., :kl])


def attend_sparse(q: torch.Tensor, cache: torch.Tensor, topi: torch.Tensor, scale: float, kl: int) -> torch.Tensor:
    k = cache.gather(1, topi[..., None].expand(-1, -1, cache.shape[-1]))
    return attend(q, k, scale, kl)


def absorb_v(olat: torch.Tensor, w_vc: torch.Tensor, quant: bool):
    """The absorbed v up-projection per head, its output laid out [b, heads x v] (and quantized)."""
    b = olat.shape[0]
    o = torch.bmm(olat.transpose(0, 1), w_vc).transpose(0, 1).reshape(b, -1)
    return o, (_quant(o) if quant else None)


# ---- indexer


def indexer_qk(iq: torch.Tensor, ik: torch.Tensor, nw: torch.Tensor, nb: torch.Tensor, cos: torch.Tensor,
               sin: torch.Tensor, r: int, nh: int, eps: float = 1e-5):
    """The indexer's key LayerNorm, and rotary on the rope part of its query heads and key."""
    b, d = ik.shape
    iq = iq.view(b, nh, d)
    ik = F.layer_norm(ik, (d,), nw, nb, eps)
    iq = torch.cat([_rope(iq[..., :r], cos, sin), iq[..., r:]], -1)
    ik = torch.cat([_rope(ik[..., :r], cos, sin), ik[..., r:]], -1)
    return iq, ik


def _add_parts(p: torch.Tensor) -> torch.Tensor:
    """The float32 partial sums of a split-K product (S, ...) added, written as S - 1 additions of slices
    so that the compiler makes them part of the consumer's own kernel (a `sum(0)` stays a kernel of its own
    where the consumer reads the sum at more than one place, as gated_act's gate and up halves do)."""
    out = p[0]
    for i in range(1, p.shape[0]):
        out = out + p[i]
    return out


def indexer_scores(iq: torch.Tensor, keys: torch.Tensor, iw: torch.Tensor) -> torch.Tensor:
    """Index scores sum_h relu(q_h . k) w_h over the cached keys. `iw` may be the float32 partial sums of a
    split-K product (S, B, H: helpers.model.moe_triton.linear), added here (`_add_parts`)."""
    if iw.dim() == 3:
        iw = _add_parts(iw).to(iq.dtype)
    sc = torch.relu(torch.bmm(iq, keys.transpose(1, 2)))
    return (sc * iw[..., None]).sum(1)


def indexer_topk(iq: torch.Tensor, keys: torch.Tensor, iw: torch.Tensor, k: int) -> torch.Tensor:
    """indexer_scores and their top-k positions."""
    return indexer_scores(iq, keys, iw).topk(k, -1).indices


# ---- MoE


def route(logits: torch.Tensor, bias: torch.Tensor, k: int, scaling: float, dtype: torch.dtype):
    """Sigmoid scores, top-k with the correction bias, the chosen scores normalised and scaled."""
    s = torch.sigmoid(logits.float())
    ids = torch.topk(s + bias.float(), k, -1).indices
    w = s.gather(1, ids)
    return (w / w.sum(-1, keepdim=True) * scaling).to(dtype), ids


def route_triton_ok(device: str, experts: int, k: int) -> bool:
    """Whether `route_triton` runs here: CUDA with Triton, and powers of two experts and top-k."""
    if not str(device).startswith("cuda") or experts & (experts - 1) or k & (k - 1) or experts > 4096:
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


_ROUTE_KERNEL = None


def _route_kernel():
    global _ROUTE_KERNEL
    if _ROUTE_KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def kernel(logits, bias, w_out, ids_out, scaling, stride, E: tl.constexpr, K: tl.constexpr):
            row = tl.program_id(0)
            offs = tl.arange(0, E)
            ko = tl.arange(0, K)
            s = tl.sigmoid(tl.load(logits + row * stride + offs).to(tl.float32))
            sel = s + tl.load(bias + offs).to(tl.float32)
            wv = tl.zeros([K], dtype=tl.float32)
            iv = tl.zeros([K], dtype=tl.int64)
            for j in tl.static_range(K):
                m = tl.max(sel, 0)
                idx = tl.min(tl.where(sel == m, offs, E), 0)
                wj = tl.sum(tl.where(offs == idx, s, 0.0), 0)
                wv = tl.where(ko == j, wj, wv)
                iv = tl.where(ko == j, idx.to(tl.int64), iv)
                sel = tl.where(offs == idx, float("-inf"), sel)
            wv = wv / tl.sum(wv, 0) * scaling
            tl.store(w_out + row * K + ko, wv.to(w_out.dtype.element_ty))
            tl.store(ids_out + row * K + ko, iv)
        _ROUTE_KERNEL = kernel
    return _ROUTE_KERNEL


def route_triton(logits: torch.Tensor, bias: torch.Tensor, k: int, scaling: float, dtype: torch.dtype):
    """`route` in one Triton kernel (one program a token: sigmoid, biased top-k by k passes of max over the
    experts, the chosen scores normalised and scaled), as SGLang's biased grouped top-k kernel does it."""
    b, e = logits.shape
    w = torch.empty(b, k, dtype=dtype, device=logits.device)
    ids = torch.empty(b, k, dtype=torch.int64, device=logits.device)
    _route_kernel()[(b,)](logits, bias, w, ids, float(scaling), logits.stride(0), E=e, K=k)
    return w, ids


def route_forced(logits: torch.Tensor, ids: torch.Tensor, scaling: float, dtype: torch.dtype):
    s = torch.sigmoid(logits.float())
    w = s.gather(1, ids)
    return (w / w.sum(-1, keepdim=True) * scaling).to(dtype)


def permute(ids: torch.Tensor, rw: torch.Tensor, x: torch.Tensor, experts: int):
    """Rows grouped by expert: for each (token, slot) in expert order its token, its routing weight and its
    input row; the inverse order (for combine) and the cumulative rows per expert (int32)."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    k = ids.shape[1]
    tok = order // k
    inv = torch.empty_like(order)
    inv[order] = torch.arange(order.numel(), device=order.device)
    counts = torch.zeros(experts, dtype=torch.int32, device=flat.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    return x[tok], rw.reshape(-1)[order], inv, offs, tok


def permute_fp8(ids: torch.Tensor, rw: torch.Tensor, xq: torch.Tensor, s: torch.Tensor, experts: int):
    """permute for FP8 rows: the values gathered as bytes, their row scales with them."""
    rows, w, inv, offs, tok = permute(ids, rw, xq.view(torch.uint8), experts)
    return rows.view(fp8.FP8), s[tok], w, inv, offs


def gated_act(g: torch.Tensor, i: int, w: torch.Tensor | None, quant: bool):
    """SiLU(gate) x up (times each row's routing weight `w`), and its FP8 quantization with `quant`. `g` may
    be the float32 partial sums of a split-K product (S, T, 2i: helpers.model.moe_triton), added here."""
    if g.dim() == 3:
        g = _add_parts(g).to(w.dtype if w is not None else torch.bfloat16)
    a = F.silu(g[:, :i]) * g[:, i:]
    if w is not None:
        a = a * w[:, None].to(a.dtype)
    return a, (_quant(a) if quant else None)


def combine(g2: torch.Tensor, inv: torch.Tensor, k: int, dtype: torch.dtype, shared: torch.Tensor | None):
    """Each token's k expert rows (already weighted) summed, plus the shared expert's output."""
    b = inv.numel() // k
    out = g2[inv].view(b, k, -1).to(dtype).sum(1)
    return out if shared is None else out + shared


# ---- head


def embed(table: torch.Tensor, tokens: torch.Tensor, lo: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    ids = tokens - lo
    inside = (ids >= 0) & (ids < n)
    return table[ids.clamp(0, n - 1)] * inside[:, None].to(dtype)
