"""Chapter 90 (notebooks/90_provenance), the provenance appendix: its parameters, its tables and the
headline figures the book's first page cites: where every recorded number comes from, where the sources
disagree, and the figures `intro.md` takes from this page (`{glue:}` keys starting with `arc_`).

Each figure is picked with `helpers.core.recorded.value`, which names the table, the condition and what
is there instead when a row or a label is missing, so a renamed label fails the build instead of
emptying a sentence of the first page.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import pandas as pd

from helpers.core import params, recorded
from helpers.core.recorded import value
from helpers.model import arith as ma

#: the notebook's parameters (the spec of record: the notebook validates against it, the runbook prechecks it)
PARAMS = {"mode": params.choice(*params.MODES), "run_dir": params.string()}


@dataclass(frozen=True)
class Settled:
    """The figures with which section 3 settles each disagreement between the sources."""
    cfg_hidden: int
    hidden_claims: str
    tot64_first: float
    tot64_sweep: float
    out64_sweep: float
    out64_heavy: float
    out64_roughly: float
    n_coll: int
    copy_tokens: str


@dataclass(frozen=True)
class Headline:
    """The figures the book's first page (intro.md) quotes from this page, each from data/."""
    arc_gpu_count: int
    arc_gpu_model: str
    arc_params_b: float
    arc_single_stream: float
    arc_out64: float
    arc_tot64: float
    arc_target_single: float
    arc_copy_latency: float
    arc_p2p: str
    arc_virt: str
    arc_bare_single: float
    arc_bare_out64: float


def all_tables() -> dict[str, pd.DataFrame]:
    return {name: recorded.load(name) for name in recorded.tables()}


def reference_problems(srcs: dict | None = None) -> list[str]:
    """What each public reference of data/sources.yaml (kind: reference) lacks: the keys data/schema.yaml's
    `_references` lists (a link, a date; `url: null` only with a `url_note` saying why there is none).
    One line per problem, naming the entry."""
    spec = recorded.schema()["_references"]
    out = []
    for k, v in (recorded.sources() if srcs is None else srcs).items():
        if v.get("kind") != "reference":
            continue
        missing = [key for key in spec["keys"] if key not in v or (v[key] in (None, "") and key != "url")]
        if "url" in v and not v["url"] and not v.get("url_note"):
            missing.append("url (null without a url_note saying why)")
        elif v.get("url") and not str(v["url"]).startswith(("https://", "http://")):
            out.append(f"data/sources.yaml: reference {k!r} has url {v['url']!r}, which is not an http(s) link")
        if missing:
            out.append(f"data/sources.yaml: reference {k!r} lacks {', '.join(missing)}; every reference needs "
                       f"{spec['keys']} (data/schema.yaml _references)")
    return out


def check_references() -> None:
    """Raise a DataError listing every reference that lacks its link or date."""
    problems = reference_problems()
    if problems:
        raise recorded.DataError("; ".join(problems))


def _cited(tables: dict[str, pd.DataFrame]) -> pd.Series:
    return pd.concat([t["source"] for t in tables.values()]).value_counts()


def sources_table(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every source with its kind, what it is and how many rows of data/ cite it (`source` holds the id,
    which the table helper links to the source's url)."""
    cited = _cited(tables)
    # `shown_kind`: what a reader should call the source where its registry kind says where it lives, not what it is
    # (a study under data/measured/ that computed numbers rather than timed anything is derived)
    return pd.DataFrame([{"source": k, "kind": v.get("shown_kind", v["kind"]), "what it is": v["title"],
                          "rows citing it": int(cited.get(k, 0))} for k, v in recorded.sources().items()])


def references_table() -> pd.DataFrame:
    """The public references: id (linked to its url by the table helper), when it was published or read,
    the software version where one applies, and the link itself where the reference gives one."""
    check_references()
    rows = []
    for k, v in recorded.sources().items():
        if v.get("kind") != "reference":
            continue
        rows.append({"source": k, "what it is": v["title"], "date": v["date"], "version": v.get("version") or "",
                     "link": v["url"] or f"none: {v['url_note']}"})
    return pd.DataFrame(rows)


def tables_summary(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every table with its rows, columns, sources and phases."""
    return pd.DataFrame([{"table": f"data/{name}", "rows": len(df), "columns": ", ".join(df.columns),
                          "sources": ", ".join(sorted(df["source"].unique())),
                          "phases": ", ".join(sorted(df["phase"].unique())) if "phase" in df else ""}
                         for name, df in tables.items()])


def _figure(r) -> str:
    if pd.notna(r["value"]):
        return ("~" if r["approx"] else "") + f"{r['value']:g}"
    return f"{r['value_low']:g}-{r['value_high']:g}"


def disagreements(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The quantities the seeds state differently: hidden size, total tok/s at 64, saturated output tok/s."""
    claims, serving = tables["recorded/model_claims.csv"], tables["recorded/serving.csv"]
    hidden = claims[claims.quantity == "hidden_size"]
    tot64 = serving[(serving.metric == "total_throughput") & (serving.concurrency == 64)]
    out64 = serving[(serving.metric == "output_throughput") & (serving.concurrency == 64)]
    for name, df in (("hidden-size claims", hidden), ("totals at 64", tot64), ("outputs at 64", out64)):
        if df.empty:
            raise recorded.DataError(f"data/ has no {name}, which the provenance appendix compares")
    return pd.concat([
        pd.DataFrame({"quantity": "hidden size", "claimed": hidden.value, "source": hidden.source,
                      "context": hidden.note}),
        pd.DataFrame({"quantity": "total tok/s at concurrency 64", "claimed": tot64.apply(_figure, axis=1),
                      "source": tot64.source, "context": tot64.experiment + ": " + tot64.note.fillna("")}),
        pd.DataFrame({"quantity": "saturated output tok/s", "claimed": out64.apply(_figure, axis=1),
                      "source": out64.source, "context": out64.experiment + " (" +
                      out64.input_len.astype("string").fillna("?") + " in / " +
                      out64.output_len.astype("string").fillna("?") + " out)"}),
    ], ignore_index=True)


def settled_facts(tables: dict[str, pd.DataFrame]) -> Settled:
    """The figures with which the appendix settles each disagreement."""
    claims, serving = tables["recorded/model_claims.csv"], tables["recorded/serving.csv"]
    copy = tables["recorded/copy_sweep.csv"]
    hidden = claims[claims.quantity == "hidden_size"]
    if hidden.empty:
        raise recorded.DataError("data/recorded/model_claims.csv has no hidden_size claim")
    at64 = {"concurrency": 64}
    return Settled(
        cfg_hidden=recorded.model_config("glm5")["architecture"]["hidden_size"],
        hidden_claims=", ".join(f"{v} ({s})" for v, s in zip(hidden.value, hidden.source)),
        tot64_first=value(serving, metric="total_throughput", experiment="first_baseline", **at64),
        tot64_sweep=value(serving, metric="total_throughput", experiment="sweep_256_256", **at64),
        out64_sweep=value(serving, metric="output_throughput", experiment="sweep_256_256", **at64),
        out64_heavy=value(serving, metric="output_throughput", experiment="sweep_128_512", **at64),
        out64_roughly=value(serving, metric="output_throughput", experiment="summary_311", **at64),
        n_coll=ma.collectives_per_step(ma.load_model("glm5")),
        copy_tokens=_and(sorted(int(t) for t in copy[copy.tokens.notna()].tokens.unique())))


def _and(items: list) -> str:
    """"1, 4, 16 and 64"."""
    words = [str(x) for x in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


#: the bare-metal system the first page compares with (data/reference/baremetal.csv)
BAREMETAL = "8x RTX PRO 6000 bare metal P2P on TP8 MTP off (cutlass MoE)"


def headline(tables: dict[str, pd.DataFrame]) -> Headline:
    """The figures the book's first page quotes, each from data/."""
    hw, serving = tables["recorded/hardware.csv"], tables["recorded/serving.csv"]
    copy, ref = tables["recorded/copy_sweep.csv"], tables["reference/baremetal.csv"]
    item = lambda k: value(hw, item=k)  # noqa: E731
    small = {"path": "gpu0_to_gpu1", "tokens": 1}
    sweep = {"experiment": "sweep_256_256"}
    bare = {"system": BAREMETAL, "metric": "output_throughput"}
    return Headline(
        arc_gpu_count=int(item("gpu_count")), arc_gpu_model=item("gpu_model"),
        arc_params_b=recorded.model_config("glm5")["published"]["total_parameters"] / 1e9,
        arc_single_stream=value(serving, **sweep, metric="output_throughput", concurrency=1),
        arc_out64=value(serving, **sweep, metric="output_throughput", concurrency=64),
        arc_tot64=value(serving, **sweep, metric="total_throughput", concurrency=64),
        arc_target_single=value(serving, experiment="target", metric="output_throughput"),
        arc_copy_latency=value(copy, "latency_us", **small),
        arc_p2p=item("p2p_read_all_pairs"), arc_virt=item("virtualization"),
        arc_bare_single=value(ref, **bare, concurrency=1), arc_bare_out64=value(ref, **bare, concurrency=64),
    )


@dataclass(frozen=True)
class HostChecks:
    """The reference figures of page 1's host checks (intro.md, "On your host"), each from data/: a
    16-byte GPU-to-GPU copy with and without peer-to-peer (p2pBandwidthLatencyTest on RTX PRO 6000 pairs), a copy
    in a guest once P2P was exposed (community) and an all-reduce on 8 GPUs behind PCIe switches (community).
    Only what intro.md shows (tests/test_intro.py holds the two to each other); its H200 pair's all-reduce is
    chapter 06's glue, not this page's."""
    chk_p2p_lo: float
    chk_p2p_hi: float
    chk_nop2p: float
    chk_p2p_guest: float
    chk_ar_kib: float
    chk_pcie8: float
    chk_nan_then: str
    chk_nan_now: str
    chk_sglang_now: str


#: the all-reduce row page 1 quotes for scale (data/reference/baremetal.csv)
PCIE8 = "8 GPUs behind PCIe switches"
#: a copy between two GPUs in a guest once P2P was exposed (data/reference/baremetal.csv): check 3's middle outcome
P2P_GUEST = "GPU pair in a Proxmox q35 guest with the GPUDirect clique"


def host_checks(tables: dict[str, pd.DataFrame]) -> HostChecks:
    """Page 1's reference figures for the checks a reader runs on their host, each picked from data/."""
    ref = tables["reference/baremetal.csv"]
    launch = tables["recorded/launch_config.csv"]
    one_token = int(ma.allreduce_bytes(ma.load_model("glm5"), 1))  # one token of hidden size in bf16
    fix = launch[(launch.kind == "flag") & (launch.note == "the NaN fix")]
    if fix.empty:
        raise recorded.DataError("data/recorded/launch_config.csv has no flag noted 'the NaN fix'")
    renamed = tables["reference/sglang_flags.csv"].set_index("flag_then")
    missing = sorted(set(fix.name) - set(renamed.index))
    if missing:
        raise recorded.DataError(f"data/reference/sglang_flags.csv has no later name for the NaN fix's {missing}")
    now = renamed.loc[list(fix.name)]
    return HostChecks(
        chk_p2p_lo=value(ref, "value_low", system="RTX PRO 6000 pair with P2P", metric="p2p_latency"),
        chk_p2p_hi=value(ref, "value_high", system="RTX PRO 6000 pair with P2P", metric="p2p_latency"),
        chk_nop2p=value(ref, system="RTX PRO 6000 pair without P2P", metric="p2p_latency"),
        chk_p2p_guest=value(ref, system=P2P_GUEST, metric="p2p_latency"),
        chk_ar_kib=one_token / 1024,
        chk_pcie8=value(ref, system=PCIE8, metric="allreduce_time", message_bytes=32768),
        chk_nan_then=" ".join(f"{n} {v}" for n, v in zip(fix.name, fix.value)),
        chk_nan_now=" ".join(f"{n} {v}" for n, v in zip(now.flag_now, fix.value)),
        chk_sglang_now=_and(sorted(set(now.version_now))),
    )


def headline_table(*facts) -> pd.DataFrame:
    """The figures page 1 quotes (a Headline, HostChecks, ...) as one table: key and value (as text)."""
    rows = [(f.name, getattr(h, f.name)) for h in facts for f in fields(h)]
    return pd.DataFrame({"key": [k for k, _ in rows], "value": [f"{v:g}" if isinstance(v, float) else str(v)
                                                               for _, v in rows]})
