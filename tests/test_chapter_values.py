"""The numbers the chapters put into their prose. Slow tests read them back out of the session's one
execution of the book under the `recorded` target (tests/conftest.py) and check them against data/,
independently of the helpers that picked them; fast tests show that the picks fail, naming what is
missing, when a row a chapter cites is removed or its label renamed."""
import json
import re

import pandas as pd
import pytest

from helpers import repo_root
from helpers.book import runbook
from helpers.core import recorded
from helpers.chapters import provenance
from helpers.core.glue import read_glued
from helpers.core.recorded import DataError
from helpers.chapters import baselines_tuning, expert_parallelism, moe_runners, nan_crash
from helpers.chapters import environment as environment_chapter
from helpers.model import arith
from helpers.serving import classify

ROOT = repo_root()
GLUE_REF = re.compile(r"\{glue(?::text|:md|:figure|:)?\}`([^`:]+)")
GLUE_FIGURE = re.compile(r"```\{glue:figure\}\s+(\S+)")


def glued(run, stem: str) -> dict[str, str]:
    return read_glued(run[2] / "notebooks" / f"{stem}.ipynb")


def serving() -> pd.DataFrame:
    return recorded.load("recorded/serving.csv")


def figure(df, **where) -> float:
    m = pd.Series(True, index=df.index)
    for k, v in where.items():
        m &= df[k] == v
    return float(df[m].value.iloc[0])


# --------------------------------------------------------------------------- glued values of the recorded run

@pytest.mark.slow
@pytest.mark.parametrize("stem", [runbook.stem(d) for d in runbook.chapters(ROOT)])
def test_every_key_the_prose_cites_is_glued_under_recorded(recorded_run, stem):
    """A sentence cannot lose its number: every {glue} reference of the chapter's Markdown has a value."""
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    cited = set(GLUE_REF.findall(md)) | set(GLUE_FIGURE.findall(md))
    missing = sorted(cited - set(glued(recorded_run, stem)))
    assert cited and not missing, f"{stem} cites {missing} but did not glue them under `recorded`"


@pytest.mark.slow
def test_one_collective_count_in_every_chapter(recorded_run):
    n = str(arith.collectives_per_step(arith.load_model("glm5")))
    for stem in ("01_environment", "05_expert_parallelism", "07_diagnosis", "90_provenance"):
        assert glued(recorded_run, stem)["n_coll"] == n, stem


@pytest.mark.slow
def test_environment_chapter_cites_the_recorded_machine(recorded_run):
    g = glued(recorded_run, "01_environment")
    hw = recorded.load("recorded/hardware.csv").set_index("item").value
    n = int(hw["gpu_count"])
    assert (g["rec_gpu_count"], g["rec_pairs"]) == (str(n), str(n * (n - 1)))
    assert (g["rec_p2p_code"], g["rec_virt"], g["rec_arch"]) == (hw["p2p_read_all_pairs"], hw["virtualization"],
                                                                  hw["gpu_architecture"])
    assert "p2p_read (problem)" in g["rec_flagged"] and g["rec_n_problem"] == "1"
    assert g["here_probe"] == environment_chapter.NOT_PROBED


@pytest.mark.slow
def test_nan_chapter_cites_the_recorded_matrix(recorded_run):
    g = glued(recorded_run, "02_nan_crash")
    m = recorded.load("recorded/backend_matrix.csv")
    assert g["rec_n_configs"] == str(len(m)) and g["rec_n_nan"] == str((m.outcome == "nan").sum())
    assert g["rec_ok_decode"] == m[(m.component == "nsa_decode") & (m.outcome == "ok")].backend.iloc[0]
    assert g["live_status"].startswith("no live matrix")


@pytest.mark.slow
def test_baselines_chapter_cites_the_recorded_throughput(recorded_run):
    g, s = glued(recorded_run, "03_baselines_tuning"), serving()
    single = figure(s, experiment="sweep_256_256", metric="output_throughput", concurrency=1)
    sat = figure(s, experiment="sweep_256_256", metric="output_throughput", concurrency=64)
    assert float(g["rec_single"]) == single and float(g["rec_sat_256"]) == sat
    assert float(g["rec_scaling_256"]) == pytest.approx(sat / single)
    totals = s[(s.metric == "total_throughput") & (s.concurrency == 64)].value.astype(float)
    assert (float(g["tot_lo"]), float(g["tot_hi"])) == (totals.min(), totals.max())
    assert float(g["sat_512"]) == figure(s, experiment="sweep_128_512", metric="output_throughput", concurrency=64)
    assert g["sat_match_wl"] == "128/512"
    assert float(g["rec_log_tok_s"]) == figure(s, experiment="server_log_decode_batch", metric="generation_throughput")
    assert g["live_status"].startswith("no live sweep") and "live_single" not in g
    # the step's growth at the first baseline's achieved concurrency instead of the nominal 64 (derived)
    # (site-read4 L3: from the first baseline's own run, its output at 64 requests in flight, not the sweep's)
    achieved = figure(s, experiment="first_baseline", metric="achieved_concurrency")
    first_out = figure(s, experiment="first_baseline", metric="output_throughput", concurrency=64)
    assert float(g["rec_first_out"]) == first_out
    assert float(g["rec_step_growth_achieved"]) == pytest.approx(single * achieved / first_out)
    assert "community figure" in g["growth_rule_text"] and "both derived" in g["growth_rule_text"]


@pytest.mark.slow
def test_runner_chapter_cites_the_recorded_runners(recorded_run):
    g, s = glued(recorded_run, "04_moe_runners"), serving()
    cut = s[(s.experiment == "moe_runner_cutlass") & (s.concurrency == 64)].iloc[0]
    assert (float(g["rec_cutlass_lo"]), float(g["rec_cutlass_hi"])) == (cut.value_low, cut.value_high)
    assert float(g["rec_cutedsl"]) == figure(s, experiment="moe_runner_cutedsl", concurrency=64)
    assert g["rec_inside"] == "inside"


@pytest.mark.slow
def test_ep_chapter_cites_the_configuration_and_claims(recorded_run):
    g = glued(recorded_run, "05_expert_parallelism")
    m = arith.load_model("glm5")
    assert (g["hs_config"], g["n_layers"], g["n_routed"], g["top_k"]) == tuple(
        str(x) for x in (m.hidden, m.layers, m.n_routed, m.top_k))
    claims = recorded.load("recorded/model_claims.csv").set_index("quantity").value
    assert g["claim_78"] == claims["allreduces_per_decode_step"]
    assert float(g["remote"]) == pytest.approx(4.63, abs=0.005)  # the EP note of arith.ep_vs_tp_volume, rounded


@pytest.mark.slow
def test_provenance_page_gives_the_first_page_its_figures(recorded_run):
    g, s = glued(recorded_run, "90_provenance"), serving()
    assert float(g["arc_single_stream"]) == figure(s, experiment="sweep_256_256", metric="output_throughput",
                                                   concurrency=1)
    assert float(g["arc_tot64"]) == figure(s, experiment="sweep_256_256", metric="total_throughput", concurrency=64)
    copy = recorded.load("recorded/copy_sweep.csv")
    assert float(g["arc_copy_latency"]) == float(copy[copy.tokens == 1].latency_us.iloc[0])
    intro = (ROOT / "intro.md").read_text()
    assert set(re.findall(r"90_provenance\.ipynb::(\w+)", intro)) <= set(g)


# --------------------------------------------------------------------------- a removed row or a renamed label fails loudly

def test_a_removed_sweep_row_fails_naming_it():
    s = serving()
    s = s[~((s.experiment == "sweep_256_256") & (s.concurrency == 64))]
    with pytest.raises(DataError, match=r"data/recorded/serving.csv has no row where .*concurrency=64.*"
                                        r"concurrency there: 1"):
        baselines_tuning.sweep_facts(s)


def test_a_renamed_experiment_label_fails_naming_it():
    s = serving()
    s["experiment"] = s.experiment.replace("summary_311", "summary_before_vm")
    with pytest.raises(DataError, match="no experiment='summary_311'.*summary_before_vm"):
        baselines_tuning.saturation_facts(s, baselines_tuning.saturation_claims(s))
    s = serving()
    s["experiment"] = s.experiment.replace("moe_runner_cutlass", "runner_cutlass")
    with pytest.raises(DataError, match="moe_runner_cutlass"):
        moe_runners.runner_facts(s)


def test_a_renamed_outcome_or_backend_fails_naming_it():
    m = recorded.load("recorded/backend_matrix.csv")
    m = m[~((m.component == "nsa_decode") & (m.outcome == "ok"))]
    with pytest.raises(DataError, match="component='nsa_decode', outcome='ok'"):
        nan_crash.matrix_facts(m)


def test_a_renamed_layout_or_system_fails_naming_it():
    m = arith.load_model("glm5")
    fit = arith.memory_fit(m, [{"system": "s", "count": 8, "memory_bytes": 96 * 2**30}])
    foot = recorded.load("reference/model_footprint.csv")
    with pytest.raises(DataError, match="layout 'TP8'"):
        expert_parallelism.memory_facts(m, fit.assign(layout=fit.layout.str.replace("TP8", "TP-8")), "s", foot, 0.9, 96.0)
    tables = provenance.all_tables()
    tables["reference/baremetal.csv"] = tables["reference/baremetal.csv"].assign(
        system=lambda d: d.system.str.replace("cutlass MoE", "CUTLASS MoE"))
    with pytest.raises(DataError, match="cutlass MoE"):
        provenance.headline(tables)


def test_value_picks_one_figure_and_names_disagreements():
    s = serving()
    # two sources give the same figure: it counts once
    assert recorded.value(s, experiment="sweep_256_256", metric="output_throughput", concurrency=64) == \
        figure(s, experiment="sweep_256_256", metric="output_throughput", concurrency=64)
    with pytest.raises(DataError, match="disagree on value"):
        recorded.value(s, experiment="sweep_256_256", concurrency=64)  # output and total throughput
    with pytest.raises(DataError, match="has no value"):
        recorded.value(s, experiment="moe_runner_cutlass", concurrency=64)  # a stated range
    with pytest.raises(DataError, match="no column 'workload'"):
        recorded.value(s, workload="256/256")


def test_ep_chapters_summary_counts_the_all_reduces_and_says_what_this_run_timed():
    """Chapter 05's summary multiplies by the all-reduces the diagnosis counts (157, arith.collectives_per_step's
    all-reduce count, as the seeds' floor placement.seed_floor_ms does), not the 158 collectives; and it says the
    VM/P2P chapter timed a message between GPUs only where this run's machine had two (issue 47 item 6)."""
    cells = json.loads((ROOT / "notebooks" / "05_expert_parallelism.ipynb").read_text())["cells"]
    md = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    summary = " ".join(md[md.index("## Summary"):].split())
    assert "by the {glue:text}`ans_n_ar` all-reduces of a decode step" in summary and "`n_coll`" not in summary
    assert "06_vm_p2p) {glue:text}`p2p_timed`" in summary and "times one small message between GPUs;" not in summary
    one = [{"system": "this machine: 1x NVIDIA H100 80GB HBM3", "count": 1, "memory_bytes": 1, "kind": "measured"}]
    two = [{"system": "this machine: 2x NVIDIA H200", "count": 1, "memory_bytes": 1, "kind": "measured"}]
    assert expert_parallelism.p2p_timed(one, "replay") == ("timed no message between GPUs in this run: its machine "
                                                           "has one GPU")
    assert expert_parallelism.p2p_timed(two, "auto").startswith("times one small message between two of this run's 2 GPUs")
    assert "this chapter read no machine" in expert_parallelism.p2p_timed([], "recorded")
    assert "no NVIDIA GPU" in expert_parallelism.p2p_timed([], "auto")
    # the committed H100 run: the GPUs its 05 saved, as a replay reads them
    from helpers.core import layout

    run = layout.Run(ROOT / "runs" / "h100-20261206b", "05_expert_parallelism")
    here = expert_parallelism.local_gpus("replay", run)
    assert expert_parallelism.p2p_timed(here, "replay").startswith("timed no message between GPUs in this run")
    m = arith.load_model("glm5")
    assert arith.collectives_per_step(m, "all_reduce") == 157 == arith.collectives_per_step(m) - 1


def test_outcome_words_are_the_recorded_matrix_words():
    schema = recorded.schema()["recorded/backend_matrix.csv"]["choices"]["outcome"]
    assert set(classify.OUTCOMES) == set(schema)


def test_ep_chapters_answer_and_memory_table():
    """Chapter 05's answer box (157 all-reduces x the recorded one-token copy), its range wording (never
    '0 % above') and the memory-fit table as shown: seven columns, with fits and the KV cache visible."""
    m = arith.load_model("glm5")
    claims, copy = recorded.load("recorded/model_claims.csv"), recorded.load("recorded/copy_sweep.csv")
    a = expert_parallelism.answer_facts(m, copy, claims)
    one = float(copy[copy.tokens == 1].latency_us.iloc[0])
    assert (a.ans_msg_kib, a.ans_copy_us) == (12.0, one)
    # reading item 16: the answer multiplies the step's all-reduces (the collectives less the logits' all-gather),
    # as the diagnosis counts them, not all the collectives
    assert a.ans_n_ar == arith.collectives_per_step(m) - 1
    assert a.ans_coll_ms == pytest.approx(a.ans_n_ar * one / 1000)
    box = "".join(json.loads((ROOT / "notebooks" / "05_expert_parallelism.ipynb").read_text())["cells"][0]["source"])
    assert "`ans_n_ar` all-reduces of" in box and "`n_coll` collectives of" not in box and "`repl_GB:.0f` GB against" in box
    assert a.moe_over_pct == pytest.approx(11.1, abs=0.05)       # 453 GB recorded against 408 GB derived
    with pytest.raises(DataError, match="one-token rows"):
        expert_parallelism.answer_facts(m, copy[copy.tokens != 1], claims)
    assert expert_parallelism._rel_to_range(441.8, 410, 440) == "0.4 % above"
    assert expert_parallelism._rel_to_range(400, 410, 440) == "2 % below"
    assert expert_parallelism._rel_to_range(420, 410, 440) == "inside"
    fit = arith.memory_fit(m, [{"system": "s", "count": 8, "memory_bytes": 96 * 2**30}], context_tokens=4096)
    shown = expert_parallelism.fit_table(fit)
    assert len(shown.columns) <= 7 and {"fits", "KV cache per GPU (tokens)", "sequences of 4096 tokens"} <= set(shown)
    with pytest.raises(DataError, match="no column"):
        expert_parallelism.fit_table(fit.drop(columns="fits"))



def test_ep_words_follow_the_numbers():
    """Section 3's words on EP come from the numbers (a reading found "memory, not bytes, rules it out" beside a
    fitting EP8 row, and "about the all-reduce's bytes" beside a ratio of 0.66): the bytes by BYTES_SAME, the
    memory by the fit table."""
    ep = expert_parallelism
    assert ep.bytes_words(0.95, 2, 14).startswith("The arithmetic agrees with the status report")
    rough = ep.bytes_words(0.662, 2, 14)
    assert rough.startswith("The arithmetic gives EP 0.66 times TP's bytes (derived), so the status report's "
                            "\"no fewer bytes\" is wrong by 34 %")
    assert rough.endswith("the rounds differ more, 2 against 14")
    assert "is wrong by 200 %" in ep.bytes_words(3.0, 2, 14)
    m = arith.load_model("glm5")
    fit = arith.memory_fit(m, [{"system": "s", "count": 8, "memory_bytes": 96 * 2**30}], mem_fraction=0.92)
    assert ep.memory_words(fit, "s") == ("EP8 with tensor-parallel attention fits as TP8 does: on these GPUs memory "
                                         "counts against data-parallel attention, not against EP")
    big = arith.memory_fit(m, [{"system": "b", "count": 8, "memory_bytes": 1000 * 2**30}])
    assert ep.memory_words(big, "b").endswith("memory rules out neither EP8 layout")


# ------------------------------------------------------------------------------------------ 08 This machine
@pytest.mark.slow
def test_this_machine_says_what_recorded_mode_cannot_measure(recorded_run):
    g = glued(recorded_run, "08_this_machine")
    for k in ("tm_vm", "tm_p2p", "tm_allreduce", "tm_predicted", "tm_observed", "tm_remedy"):
        assert g[k].startswith("not measured here: this page was built from recorded data alone"), (k, g[k])
    assert g["chk1"] == "not probed in this run" and g["tm_n_ar"] == "157"


@pytest.mark.slow
def test_this_machines_verdict_is_this_runs_probe_and_prices_nothing_between_gpus_it_lacks(auto_run):
    """The auto run on this machine: check 1's verdict is helpers.machine.virt's on the probe the run saved (read
    back independently of the chapter, with check 1's rule beside a failing verdict), and with fewer than two GPUs no pair or all-reduce is stated."""
    from helpers.machine import virt

    g = glued(auto_run, "08_this_machine")
    probe = json.loads((auto_run[2] / "results" / "01_environment" / "probe.json").read_text())
    v = virt.judge(probe["virtualization"])
    rule = f" ({virt.CHECK1_RULE})" if v.passes is False else ""
    assert g["tm_vm"] == f"check 1 {v.outcome}: {v.line()}{rule}" and g["chk1"] == f"{v.outcome}: {v.line()}"
    if len(probe["gpus"]) < 2:
        assert g["tm_p2p"].startswith("not measured here") and g["tm_allreduce"].startswith("not measured here")
    verdict = pd.read_csv(auto_run[2] / "results" / "08_this_machine" / "verdict.csv")
    assert dict(zip(verdict.part, verdict.line))["vm"] == g["tm_vm"]
