"""helpers.interconnect.findings: what the VM/P2P chapter cites, and that a missing row or a renamed label
fails loudly, naming it, instead of dropping a sentence."""
import pandas as pd
import pytest

from helpers import repo_root
from helpers.core.glue import read_glued
from helpers.interconnect import copies, figures as icfig, findings, recorded_labels, studies, suite
from helpers.interconnect.findings import FindingError
from helpers.interconnect.method import Method, MethodError

RUNS = repo_root() / "runs"


@pytest.fixture(scope="module")
def fid():
    return studies.fidelity_tables()


@pytest.fixture(scope="module")
def gaps():
    return studies.gap("allreduce-gap-stream"), studies.gap("allreduce-gap-idle")


@pytest.fixture(scope="module")
def cited(fid, gaps):
    return findings.fidelity_findings(fid, *gaps)


# ------------------------------------------------------------------ the fidelity section's numbers
def test_the_fidelity_section_cites_what_the_studies_hold(cited):
    c = cited
    assert (c["fid_setup_one"], c["fid_setup_multi"], c["fid_n_gpus"]) == ("1x NVIDIA H200", "2x NVIDIA H200", 2)
    assert c["fid_copy_same_ratio"] == pytest.approx(1.005, abs=5e-4) and c["fid_copy_same_verdict"] == "within"
    assert c["fid_tool_dir_ratio"] == pytest.approx(0.925, abs=5e-4)
    assert (round(c["fid_order_lo"], 3), round(c["fid_order_hi"], 3)) == (1.079, 1.085)
    assert (c["fid_graph_np_within"], c["fid_graph_np_rows"], c["fid_graph_t_within"]) == (25, 26, 24)
    assert c["fid_self_within"] == "25, 25 and 26" and c["fid_nccl_oop_within"] == 17
    assert (c["fid_aligned_lead_ms"], c["fid_aligned_within"]) == (0.3, 26)
    assert (c["fid_idle_leads"], c["fid_idle_times"]) == ("0.2, 2 and 20", "6.80, 7.40 and 9.85")
    assert (c["fid_gap_iters_lo"], c["fid_gap_iters_hi"]) == (20, 200)
    assert round(c["fid_gap_legacy_hi_us"], 1) == 17.1 and round(c["fid_gap_mix_hi_us"], 1) == 4.9
    assert c["fid_eager_within_from"] == "16 MiB" and round(c["fid_eager_floor_us"]) == 39
    assert c["fid_label"].startswith("measured on 1x NVIDIA H200 and on 2x NVIDIA H200 (lent machines, 2026-11-29)")


def test_the_chapter_glues_exactly_these_keys():
    """Every key the fidelity findings return is cited by chapter 06's Markdown, and every fid_ key it
    cites is returned: a key dropped on either side fails here, before the build."""
    import json
    import re

    nb = json.loads((repo_root() / "notebooks" / "06_vm_p2p.ipynb").read_text())
    md = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    used = {k.split(":")[0] for k in re.findall(r"\{glue:(?:text)?\}`([^`]+)`", md)}
    fid, gaps = studies.fidelity_tables(), (studies.gap("allreduce-gap-stream"), studies.gap("allreduce-gap-idle"))
    keys = set(findings.fidelity_findings(fid, *gaps))
    assert keys - used == set()
    assert {k for k in used if k.startswith("fid_")} - keys == set()


# ------------------------------------------------------------------ a missing row or a renamed label fails loudly
def test_a_missing_row_the_text_cites_is_named(fid, gaps):
    no_aligned = fid[~((fid.start == "aligned") & (fid.api == "torch"))]
    with pytest.raises(FindingError, match="the aligned start: no row timed by a method with .*start='aligned'"):
        findings.fidelity_findings(no_aligned, *gaps)
    no_turn = fid[~fid.quantity.str.contains("timed after the other direction", regex=False)]
    with pytest.raises(FindingError, match="either turn"):
        findings.fidelity_findings(no_turn, *gaps)
    no_lat = fid[fid.quantity != "GPU 0 -> GPU 1 peer copy, 16 B, GPU time per copy"]
    with pytest.raises(FindingError, match="our 16-byte peer copy: no row"):
        findings.fidelity_findings(no_lat, *gaps)
    no_shape = fid[~fid.tool_setting.str.startswith("-t 2")]
    with pytest.raises(FindingError, match="-t 2 -g 1 -G 1, in-place"):
        findings.fidelity_findings(no_shape, *gaps)
    stream, idle = gaps
    with pytest.raises(FindingError, match="idle study: barrier start"):
        findings.fidelity_findings(fid, stream, idle[idle.start != "barrier"])
    with pytest.raises(FindingError, match="legacy default stream"):
        findings.fidelity_findings(fid, stream[stream.stream != "legacy"], idle)


def test_a_renamed_method_label_is_named(fid, gaps):
    renamed = fid.copy()
    at = (renamed.start == "aligned") & (renamed.api == "torch")
    old = renamed.loc[at, "method"].iloc[0]
    renamed.loc[at, "method"] = old.replace("aligned", "deadline")
    with pytest.raises(MethodError, match="'graph\\+host_timer\\+rotate_256MiB\\+deadline_300us' disagrees"):
        findings.fidelity_findings(renamed, *gaps)
    # a renamed recorded string fails when the study loads (test_recorded_labels), and a label the text
    # looks up by its fields cannot drift from them: Method.label is computed, not typed
    assert Method.from_row(fid[at].iloc[0]).label == old


def test_a_copy_verdict_the_text_does_not_cite_fails(fid, gaps):
    extra = fid[(fid.quantity == "GPU 1 -> GPU 0 peer copy bandwidth") & (fid.setup == "2x NVIDIA H200")]
    extra = extra.assign(quantity="GPU 1 -> GPU 0 through host memory bandwidth")
    with pytest.raises(FindingError, match="the chapter does not cite them"):
        findings.fidelity_findings(pd.concat([fid, extra], ignore_index=True), *gaps)


def test_picking_helpers_name_what_they_looked_for(fid):
    with pytest.raises(FindingError, match="a test: no row with quantity='nothing'"):
        findings.rows(fid, "a test", quantity="nothing")
    with pytest.raises(FindingError, match="has no column"):
        findings.rows(fid, "a test", colour="red")
    with pytest.raises(FindingError, match="names .* methods"):
        findings.by_method(fid, "a test", harness="graph")
    with pytest.raises(FindingError, match="not method fields"):
        findings.by_method(fid, "a test", colour="red")
    with pytest.raises(FindingError, match="expected one"):
        findings.one(fid, "a test", setup="2x NVIDIA H200")


def test_tables_for_readers(fid, gaps):
    v = findings.verdict_table(fid)
    assert {"holds at", "within from", "method"} <= set(v.columns)
    assert "torch.distributed, graph, aligned start" in set(v.method)
    r = findings.allreduce_ratio_table(fid)
    assert "-np 2 -g 1 -G 1 | torch.distributed, graph" in r.columns and r.index.name == "size_bytes"
    assert set(findings.gap_table(gaps[0]).columns) >= {"method", "gap_us", "ratio"}


# ------------------------------------------------------------------ the measured sections, on the committed GPU runs
def _run(run):
    d = RUNS / run / "results" / "06_vm_p2p"
    return (pd.read_csv(d / "copy_sweep.csv"), recorded_labels.from_tidy(pd.read_csv(d / "collective_sweep.csv")),
            pd.read_csv(d / "fits.csv"), read_glued(RUNS / run / "notebooks" / "06_vm_p2p.ipynb"))


@pytest.mark.parametrize("run,label,gpus", [("h200x2-20261129f", "2x NVIDIA H200", 2),
                                            ("h200-20261201b", "1x NVIDIA H200", 1)])
def test_a_gpu_runs_sentences_come_back_word_for_word_from_its_tables(run, label, gpus):
    """The committed GPU runs were rendered by the chapter's old code; the findings give the same text
    from the same result files (GPU code paths cannot run here; this is their check)."""
    cs, coll, fits, glued = _run(run)
    rec = suite.recorded_copy_sweep()
    h = findings.harness_floor(cs, rec.sort_values("size_bytes").iloc[0], label)
    assert h["harness_text"] == glued["harness_text"] and repr(h["floor_eager_us"]) == glued["floor_eager_us"]
    dec = copies.decode_message_sizes().size_bytes.tolist()
    assert findings.variants(coll, dec, True, gpus, label).text == glued["variant_text"]
    assert findings.fit_text(fits, suite.recorded_fit().iloc[0]) == glued["fit_text"]
    assert findings.collective_text(True, coll, label) == glued["coll_text"]
    big, table = findings.largest_copy(cs)
    assert repr(big["big_bw"]) == glued["big_bw"] and big["big_path"] == glued["big_path"] and len(table)


def test_variants_without_the_rows_they_rank_fail():
    coll = _run("h200x2-20261129f")[1]
    with pytest.raises(FindingError, match="no variant row at the decode sizes"):
        findings.variants(coll, [3], True, 2, "2x NVIDIA H200")


def test_cpu_and_recorded_variants():
    rec = suite.recorded_copy_sweep()
    small = rec.sort_values("size_bytes").iloc[0]
    cpu = pd.DataFrame({"path": "cpu_memcpy", "harness": "eager", "size_bytes": [int(small.size_bytes), 2**20],
                        "time_us": [0.5, 20.0], "bandwidth_GBps": [1.0, 50.0]})
    h = findings.harness_floor(cpu, small)
    assert h["harness_text"].startswith("This machine has no GPU") and "0.50 us here" in h["harness_text"]
    assert findings.harness_floor(None, small)["harness_text"].startswith("Recorded mode measures nothing")
    with pytest.raises(FindingError, match="no cpu_memcpy eager copy"):
        findings.harness_floor(cpu[cpu.size_bytes == 2**20], small)
    assert findings.largest_copy(cpu)[0] == {"big_bw": 50.0, "big_path": "cpu memcpy", "big_mib": 1.0}
    assert findings.largest_copy(None)[0]["big_path"] == "none (recorded mode)"
    assert findings.variants(None, [1], False).text.startswith("Recorded mode: the variants were never run")
    assert "fewer than two GPUs" in findings.variants(None, [1], True, 0).text
    assert findings.collective_text(False, None).startswith("Recorded mode")
    assert findings.plan_text(True, ["No GPU here."]) == "No GPU here." and findings.plan_text(False, [])
    assert findings.where_measured(False) == "recorded mode: nothing measured on this machine"


def test_p2p_panel_names_its_source():
    probe = {"p2p_read": [["X", "OK"], ["OK", "X"]]}
    assert findings.p2p_panel(probe, True, 2).note == "The P2P matrix of this machine comes from the environment probe of this run."
    assert findings.p2p_panel(probe, True, 2).codes == probe["p2p_read"]
    cuda = pd.DataFrame([["self", "no"], ["no", "self"]])
    p = findings.p2p_panel({"p2p_read": None}, True, 2, cuda)
    assert p.codes == [["X", "NS"], ["NS", "X"]] and "has no P2P matrix" in p.note
    assert findings.p2p_panel(None, True, 1, cuda).note.startswith("The environment probe did not run")
    with pytest.raises(FindingError, match="peer-access answer"):
        findings.p2p_panel(None, True, 2)
    assert findings.p2p_panel({"gpus": []}, True, 0).note == "This machine has no GPU, so it has no P2P matrix."
    assert findings.p2p_panel(None, False, 0).note == ("The environment probe did not run in this run; in recorded "
                                                       "mode this machine is not examined.")


def test_the_chapters_figures_draw_from_a_gpu_runs_tables():
    from helpers.core import plotting

    cs, coll, _, _ = _run("h200x2-20261129f")
    rec, fit = suite.recorded_copy_sweep(), suite.recorded_fit().iloc[0]
    dec = copies.decode_message_sizes().size_bytes.tolist()
    for fig in (icfig.copy_figure(cs, rec, fit, "time_us"), icfig.copy_figure(cs, rec, fit, "bandwidth_GBps"),
                plotting.harness_figure(cs, rec),
                plotting.collectives_figure(coll, dec, suite.EAGER_METHOD.label),
                plotting.variants_figure(findings.variants(coll, dec, True, 2, "2x").rows, dec)):
        assert fig.axes[0].get_legend_handles_labels()[1]
    p2p = plotting.p2p_figure([["X", "NS"], ["NS", "X"]], None, "this machine: no GPU")
    assert len(p2p.axes) == 2 and not p2p.axes[1].axison
    empty = plotting.collectives_figure(None, dec, "eager", "nothing here")
    assert not empty.axes[0].axison
