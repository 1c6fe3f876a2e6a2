"""Chapter 05 (notebooks/05_expert_parallelism): what fits, and what moves. Its parameters, the values its
prose cites and the sentences and tables that are the chapter's own: the model's size against the published
and reported figures, the hidden size settled from the recorded copies, what fits on the recorded GPUs, and
what TP and EP move per decode step.

The computation is helpers.model's (`arith`: the model from its configuration; `placement`: the systems of
the memory-fit table, the implied hidden size, the message sizes and the EP/TP volumes); this module picks
the figures the prose cites, each with `helpers.core.recorded.value` or a picker here that names the table,
the condition and what is there instead when a row or a label is missing.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from helpers.core import params, recorded
from helpers.core.recorded import DataError, value
from helpers.model import arith as ma
from helpers.model import placement as pl
from helpers.model.placement import CONTEXT_TOKENS

#: the notebook's parameters (the spec of record: the notebook validates against it, the runbook prechecks it)
#: the glued keys whose text differs in mode replay (they say the page presents a run's saved results
#: again); every other key a replay glues is the `auto` execution's, value for value (tests/test_replay.py)
REPLAY_KEYS = ("here_note",)

PARAMS = {"mode": params.choice("recorded", "auto", "replay"), "run_dir": params.string(),
          "model": ma.model_param()}


@dataclass(frozen=True)
class SizeFacts:
    """Section 1: parameters and bytes (derived) against the published totals, the reported checkpoint size
    and the status report's expert figure."""
    model_file: str
    model_source: str
    total_B: float
    active_B: float
    pub_total_B: float
    pub_active_B: float
    total_diff_pct: float
    active_diff_pct: float
    ckpt_GB: float
    ckpt_ref_lo: float
    ckpt_ref_hi: float
    routed_GB: float
    ckpt_rel: str
    claim_moe_GB: float
    claim_moe_src: str


@dataclass(frozen=True)
class HiddenFacts:
    """Section 2: the hidden size of the configuration, the sources' figures and the one the recorded copies
    imply (derived)."""
    hs_config: int
    hs_claims: str
    hs_other: int
    hs_implied_lo: float
    hs_implied_hi: float


@dataclass(frozen=True)
class MemoryFacts:
    """Section 3: what fits on the recorded GPUs: replication, TP8, TP4 alone, and the KV cache TP8 leaves."""
    kv_tok_KiB: float
    mem_frac: float
    gpu_mem: float
    repl_GiB: float
    repl_GB: float
    tp8_GiB: float
    tp8_GB: float
    tp8_ref_GB: float
    tp8_kv_tokens: float
    tp8_seqs: float
    ctx: int
    tp4_GiB: float


@dataclass(frozen=True)
class CollectiveFacts:
    """Section 4: the collectives per decode step (derived) against a source's count (recorded)."""
    n_coll: int
    n_layers: int
    claim_78: str


@dataclass(frozen=True)
class EpFacts:
    """Section 4: EP against TP: the remote GPUs a token reaches, the byte ratio at the largest batch, the
    ring's rounds, and what DP attention + EP leaves in memory."""
    remote: float
    n_routed: int
    top_k: int
    ep_tp_ratio: float
    tp_rounds: int
    ep_rounds: int
    dpep_GiB: float
    dpep_kv: float
    budget_GiB: float
    ep_bytes_words: str     # the status report's "no fewer bytes" against the ratio (bytes_words)
    ep_memory_words: str    # which EP layout memory counts against (memory_words)


def _named(df: pd.DataFrame, name: str) -> pd.DataFrame:
    df = df.copy()
    df.attrs["table"] = name
    return df


def size_facts(m: ma.ModelConfig, footprint: pd.DataFrame, claims: pd.DataFrame) -> SizeFacts:
    """Parameters and bytes (derived) against the published totals, the reported checkpoint size and the
    status report's expert figure."""
    pt = _named(ma.parameter_table(m), "the parameter table")
    check = _named(ma.published_check(m), "the published-totals check")
    ckpt = ma.weight_bytes(m) / ma.GB
    lo = float(value(footprint, "value_low", metric="checkpoint_size"))
    hi = float(value(footprint, "value_high", metric="checkpoint_size"))
    moe_src = str(value(claims, "source", quantity="moe_expert_weights"))
    return SizeFacts(
        model_file=f"{m.key}.yaml", model_source=m.source,
        total_B=ma.total_parameters(m) / 1e9, active_B=ma.active_parameters(m) / 1e9,
        pub_total_B=m.published_total / 1e9, pub_active_B=m.published_active / 1e9,
        total_diff_pct=100 * value(check, "rel_diff", quantity="total parameters"),
        active_diff_pct=100 * value(check, "rel_diff", quantity="active parameters"),
        ckpt_GB=ckpt, ckpt_ref_lo=lo, ckpt_ref_hi=hi,
        routed_GB=float(value(pt, "bytes", group="routed experts")) / ma.GB,
        ckpt_rel=_rel_to_range(ckpt, lo, hi),
        claim_moe_GB=float(value(claims, quantity="moe_expert_weights")),
        claim_moe_src=recorded.sources()[moe_src]["file"])


def _rel_to_range(x: float, lo: float, hi: float) -> str:
    """'inside' or 'N % above' / 'N % below' the range [lo, hi], with a decimal below 1 % (never '0 %')."""
    if lo <= x <= hi:
        return "inside"
    pct = 100 * ((x - hi) / hi if x > hi else (lo - x) / lo)
    return f"{pct:.1f} % {'above' if x > hi else 'below'}" if pct < 1 else f"{pct:.0f} % {'above' if x > hi else 'below'}"


@dataclass(frozen=True)
class AnswerFacts:
    """The answer box's rule: the collectives of one decode step times a one-token message's cost, with the
    original VM's one-token copy (recorded) as a floor for that cost."""
    ans_msg_kib: float      # one token's hidden state in bf16 (derived)
    ans_copy_us: float      # the original VM's one-token GPU-to-GPU copy (recorded)
    ans_n_ar: int           # the all-reduces of a decode step (n_coll less the logits' all-gather; derived)
    ans_coll_ms: float      # ans_n_ar x that copy: a floor on the all-reduces' time per decode step (derived)
    moe_over_pct: float     # how far the status report's expert figure is above the configuration's (derived)


def answer_facts(m: ma.ModelConfig, copies: pd.DataFrame, claims: pd.DataFrame) -> AnswerFacts:
    """The collective floor per decode step: collectives_per_step x the recorded one-token copy (`copies`:
    data/recorded/copy_sweep.csv); and the status report's expert weights against the configuration's."""
    us = pl.one_token_copy_us(copies)
    n_ar = ma.collectives_per_step(m, "all_reduce")
    routed = float(value(ma.parameter_table(m).assign(GB=lambda d: d.bytes / ma.GB), "GB", group="routed experts"))
    claim = float(value(claims, quantity="moe_expert_weights"))
    return AnswerFacts(ans_msg_kib=m.hidden * 2 / 1024, ans_copy_us=us,
                       ans_n_ar=n_ar, ans_coll_ms=pl.seed_floor_ms(m, copies),
                       moe_over_pct=100 * (claim - routed) / routed)


#: the memory-fit table as shown, the verdict first (a phone sees the first columns)
FIT_COLUMNS = {"system": "system", "layout": "layout", "fits": "fits", "weights_per_gpu_GiB": "weights per GPU (GiB)",
               "kv_tokens_per_gpu": "KV cache per GPU (tokens)", "sequences_at_context": "sequences of {ctx} tokens",
               "budget_GiB": "budget (GiB)"}


def fit_table(fit: pd.DataFrame) -> pd.DataFrame:
    """The memory-fit table as the page shows it: seven columns (the system's label carries its kind and
    GPU count), human headers with units."""
    missing = sorted(set(FIT_COLUMNS) - set(fit.columns))
    if missing:
        raise DataError(f"the memory-fit table has no column {missing}; its columns: {list(fit.columns)}")
    return fit[list(FIT_COLUMNS)].rename(columns={k: v.format(ctx=CONTEXT_TOKENS) for k, v in FIT_COLUMNS.items()})


def claims_with_files(claims: pd.DataFrame, *quantities: str) -> pd.DataFrame:
    """The recorded claims about `quantities`, each with the seed file it comes from."""
    out = claims[claims.quantity.isin(quantities)].copy()
    missing = sorted(set(quantities) - set(out.quantity))
    if missing:
        raise DataError(f"data/recorded/model_claims.csv has no claim about {missing}")
    out["seed_file"] = [recorded.sources()[s]["file"] for s in out.source]
    return out


def hidden_facts(m: ma.ModelConfig, candidates: list[int], table: pd.DataFrame) -> HiddenFacts:
    """The configuration's hidden size, the sources' candidates and the range the copies imply (`table`:
    placement.hidden_size_table)."""
    implied = table["implied hidden size"]
    return HiddenFacts(hs_config=m.hidden, hs_claims=" and ".join(str(h) for h in candidates),
                       hs_other=[h for h in candidates if h != m.hidden][0] if len(candidates) > 1 else m.hidden,
                       hs_implied_lo=float(implied.min()), hs_implied_hi=float(implied.max()))


def _layout(fit: pd.DataFrame, system: str, layout: str) -> pd.Series:
    rows = fit[(fit.system == system) & (fit.layout == layout)]
    if len(rows) != 1:
        raise DataError(f"the memory-fit table has {len(rows)} rows of layout {layout!r} on {system!r} "
                        f"(its layouts: {sorted(set(fit.layout))}); expected one")
    return rows.iloc[0]


def memory_facts(m: ma.ModelConfig, fit: pd.DataFrame, system: str, footprint: pd.DataFrame, mem_fraction: float,
                 gpu_memory: float) -> MemoryFacts:
    """What fits on the recorded GPUs: replication, TP8, TP4 alone, and the KV cache TP8 leaves."""
    repl, tp8 = _layout(fit, system, "replicated (whole model per GPU)"), _layout(fit, system, "TP8")
    return MemoryFacts(
        kv_tok_KiB=float(ma.kv_bytes_per_token(m).bytes.sum()) / 1024, mem_frac=mem_fraction,
        gpu_mem=gpu_memory, repl_GiB=float(repl.weights_per_gpu_GiB),
        repl_GB=float(repl.weights_per_gpu_GiB) * ma.GiB / ma.GB,
        tp8_GiB=float(tp8.weights_per_gpu_GiB), tp8_GB=float(tp8.weights_per_gpu_GiB) * ma.GiB / ma.GB,
        tp8_ref_GB=float(value(footprint, "value_low", metric="weights_per_gpu_tp8")),
        tp8_kv_tokens=float(tp8.kv_tokens_per_gpu), tp8_seqs=float(tp8.sequences_at_context),
        ctx=CONTEXT_TOKENS, tp4_GiB=ma.weights_per_gpu(m, 4) / ma.GiB)


def local_gpus(mode: str, run) -> list[dict]:
    """The memory-fit rows of the machine's GPUs: `auto` reads this machine's with NVML
    (helpers.model.arith.local_gpus); `replay` takes them from the measured rows of the memory-fit table this
    run's `auto` execution saved (`run`, a helpers.core.layout.Run), reading nothing of this machine;
    `recorded` has none."""
    if mode == "auto":
        return ma.local_gpus()
    if mode != "replay":
        return []
    fit = run.load("memory_fit")
    rows = fit[fit.system_kind == "measured"].drop_duplicates("system")
    return [{"system": r.system, "count": int(r.gpus_used), "memory_bytes": float(r.gpu_memory_GiB) * ma.GiB,
             "kind": "measured"} for r in rows.itertuples()]


def here_note(local: list[dict], mode: str) -> str:
    """Whether this machine's GPUs are in the memory-fit table, and why not (in a replay: the run's machine,
    read when it ran)."""
    if mode == "replay":
        return (f"The GPUs of the machine this run measured ({local[0]['system'].removeprefix('this machine: ')}, "
                "read with NVML when it ran and presented again by this book) are in the table too." if local
                else "The machine this run measured had no NVIDIA GPU that NVML could see, so it adds no row.")
    if local:
        return f"This machine's GPUs ({local[0]['system']}, measured with NVML) are in the table too."
    if mode == "auto":
        return "This machine has no NVIDIA GPU that NVML can see, so it adds no row."
    return "In recorded mode this machine is not examined."


def _gpu_count(local: list[dict]) -> int | None:
    """How many GPUs this machine's memory-fit row names ("this machine: 2x ..."), or None without a row."""
    if not local:
        return None
    import re

    found = re.search(r"(\d+)x ", str(local[0]["system"]))
    return int(found.group(1)) if found else int(local[0]["count"])


def p2p_timed(local: list[dict], mode: str) -> str:
    """What the VM/P2P chapter times between GPUs, said of this run's machine as far as this chapter knows it (its
    GPUs, read with NVML here or when the run measured): a message between two of them where it has two or more,
    none where it has one; in recorded mode (no machine read), what it times where a run has two."""
    n = _gpu_count(local)
    if n is None:
        if mode == "auto":
            return "times nothing between GPUs on this machine, which has no NVIDIA GPU that NVML can see"
        return ("times one small message between two GPUs where a run has two or more (this chapter read no "
                "machine)")
    if n < 2:
        return "timed no message between GPUs in this run: its machine has one GPU"
    return f"times one small message between two of this run's {n} GPUs where that chapter runs live"


def diagnosis_compares(local: list[dict], mode: str) -> str:
    """Whether the diagnosis sets the VM/P2P chapter's all-to-all against this chapter's arithmetic, said of this run's
    machine as p2p_timed says it: only where that chapter times collectives between two GPUs or more (the diagnosis
    sets a sweep between CPU processes or on one rank beside nothing)."""
    n = _gpu_count(local)
    if n is None:
        if mode == "auto":
            return ("the diagnosis chapter compares it with the arithmetic here only where it was timed between two "
                    "GPUs or more, and this machine has no NVIDIA GPU that NVML can see: not compared in this run")
        return ("the diagnosis chapter compares it with the arithmetic here where a run timed it between two GPUs or "
                "more (this chapter read no machine)")
    if n < 2:
        return ("the diagnosis chapter compares it with the arithmetic here only where it was timed between two GPUs "
                "or more: this run's machine has one GPU, so it is not compared in this run")
    return (f"the diagnosis chapter compares it with the arithmetic here where that chapter timed it between this "
            f"run's {n} GPUs")


def collective_facts(m: ma.ModelConfig, claims: pd.DataFrame) -> CollectiveFacts:
    """The collectives per decode step and the layers (derived), and a source's count (recorded)."""
    return CollectiveFacts(n_coll=ma.collectives_per_step(m), n_layers=m.layers,
                           claim_78=str(value(claims, quantity="allreduces_per_decode_step")))


def ep_facts(m: ma.ModelConfig, vol: pd.DataFrame, wide: pd.DataFrame, fit: pd.DataFrame, system: str,
             gpus: int = 8) -> EpFacts:
    """EP against TP: the remote GPUs a token reaches (derived from the EP bytes: tokens/n x remote x
    hidden x 4 bytes), the byte ratio at the largest batch, the ring's rounds, and what DP attention +
    EP leaves in memory (`vol`, `wide`: placement.ep_tp_volumes; `fit`: arith.memory_fit)."""
    ep1 = vol[(vol.tokens == 1) & vol.layout.str.startswith("EP")]
    tp1 = vol[(vol.tokens == 1) & vol.layout.str.startswith("TP")]
    if len(ep1) != 1 or len(tp1) != 1:
        raise DataError("the EP/TP volume table needs one TP and one EP row at 1 token")
    dpep = _layout(fit, system, f"DP attention + EP{gpus} experts")
    per_token = m.hidden * (2 + 2)  # dispatch + combine in bf16, ep_vs_tp_volume's defaults
    ratio, tp_rounds, ep_rounds = float(wide["EP / TP"].iloc[-1]), int(tp1.rounds.iloc[0]), int(ep1.rounds.iloc[0])
    return EpFacts(remote=float(ep1.bytes_sent_per_gpu.iloc[0]) * gpus / per_token, n_routed=m.n_routed,
                   top_k=m.top_k, ep_tp_ratio=ratio, tp_rounds=tp_rounds, ep_rounds=ep_rounds,
                   dpep_GiB=float(dpep.weights_per_gpu_GiB), dpep_kv=float(dpep.kv_tokens_per_gpu),
                   budget_GiB=float(dpep.budget_GiB), ep_bytes_words=bytes_words(ratio, ep_rounds, tp_rounds),
                   ep_memory_words=memory_words(fit, system, gpus))


#: EP / TP bytes within this fraction of 1 agree with "no fewer bytes"; beyond it the claim is wrong by the difference
BYTES_SAME = 0.10


def bytes_words(ratio: float, ep_rounds: int, tp_rounds: int) -> str:
    """The status report's "no fewer bytes" against the derived EP / TP byte ratio (BYTES_SAME), and
    whether the rounds differ more than the bytes."""
    if ratio <= 0 or ep_rounds <= 0 or tp_rounds <= 0:
        raise DataError(f"EP / TP: ratio {ratio} and rounds {ep_rounds}, {tp_rounds} must be positive")
    pct = 100 * abs(1 - ratio)
    if abs(1 - ratio) <= BYTES_SAME:
        head = (f"The arithmetic agrees with the status report: EP sends about TP's bytes "
                f"({pct:.0f} % {'fewer' if ratio < 1 else 'more'}, derived)")
    else:
        head = (f"The arithmetic gives EP {ratio:.2f} times TP's bytes (derived), so the status report's "
                f"\"no fewer bytes\" is wrong by {pct:.0f} %")
    rounds = max(ep_rounds, tp_rounds) / min(ep_rounds, tp_rounds)
    bytes_x = max(ratio, 1 / ratio)
    tail = (f"; the rounds differ more, {ep_rounds} against {tp_rounds}" if rounds > bytes_x
            else f"; the rounds differ less, {ep_rounds} against {tp_rounds}")
    return head + tail


#: a layout leaving less than this share of TP's KV cache is one memory counts against
KV_SHARE_LOW = 0.5


def memory_words(fit: pd.DataFrame, system: str, gpus: int = 8) -> str:
    """Which EP layout memory counts against on `system`, from the memory-fit table: EP with tensor-parallel
    attention and EP with data-parallel attention, each against TPn (a layout that does not fit, or leaves less
    than KV_SHARE_LOW of TPn's KV cache, is one memory counts against)."""
    tp, tpep = _layout(fit, system, f"TP{gpus}"), _layout(fit, system, f"TP{gpus} attention + EP{gpus} experts")
    dpep = _layout(fit, system, f"DP attention + EP{gpus} experts")
    tp_kv = float(tp.kv_tokens_per_gpu)

    def share(row) -> float:
        return float(row.kv_tokens_per_gpu) / tp_kv if row.fits and tp_kv > 0 else 0.0

    s = share(tpep)
    said = (f"EP{gpus} with tensor-parallel attention does not fit" if not tpep.fits
            else f"EP{gpus} with tensor-parallel attention fits as TP{gpus} does" if abs(s - 1) < 0.005
            else f"EP{gpus} with tensor-parallel attention leaves {100 * s:.0f} % of TP{gpus}'s KV cache")
    low = {name for row, name in ((tpep, "tp"), (dpep, "dp")) if share(row) < KV_SHARE_LOW}
    verdict = {frozenset(): f"on these GPUs memory rules out neither EP{gpus} layout",
               frozenset({"dp"}): "on these GPUs memory counts against data-parallel attention, not against EP",
               frozenset({"tp"}): f"on these GPUs memory counts against EP{gpus} with tensor-parallel attention",
               frozenset({"tp", "dp"}): f"on these GPUs memory counts against EP{gpus} in both layouts"}[frozenset(low)]
    return f"{said}: {verdict}"


def ep_tp_figure(wide: pd.DataFrame, tp_col: str, ep_col: str, height: float = 3.4):
    """Section 3's figure: helpers.core.plotting.ep_tp_volume (`wide`, `tp_col`, `ep_col`:
    placement.ep_tp_volumes) on a shorter panel, `height` inches: two lines need no more, the page is read
    on a phone, and at 3.4 inches the y label still fits beside the axis."""
    from helpers.core import plotting

    fig = plotting.ep_tp_volume(wide, tp_col, ep_col)
    fig.set_size_inches(fig.get_size_inches()[0], height)
    return fig
