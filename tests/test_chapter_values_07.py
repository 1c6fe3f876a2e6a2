"""The numbers the decode-step chapter and the diagnosis put into their prose, read back out of the session's
execution of the book under `recorded` (tests/conftest.py) and checked against data/ independently of the
helpers that picked them. The fast tests that removed rows and renamed labels fail are in test_diagnosis.py
and test_stepreport.py."""

from pathlib import Path

import pytest

from helpers import repo_root
from helpers.core import recorded
from helpers.core.glue import read_glued
from helpers.model import arith
from helpers.model import measured as mb

ROOT = repo_root()


def glued(run, stem: str) -> dict[str, str]:
    return read_glued(run[2] / "notebooks" / f"{stem}.ipynb")


def serving_value(experiment: str, concurrency: int) -> float:
    s = recorded.load("recorded/serving.csv")
    r = s[(s.experiment == experiment) & (s.metric == "output_throughput") & (s.concurrency == concurrency)]
    return float(r.value.iloc[0])


def step_study() -> tuple[str, "object"]:
    """The study the step measurement comes from in recorded mode, chosen here from data/ alone: the last
    registered fused study whose fused bf16 sweep ran graphs and eager, op level, sparse points and two
    contexts (its bf16 fused rows), else the unfused study (role decode-step). Returns (id, its timings)."""
    import json

    full = []
    for s in recorded.measured_studies("decode-step-fused"):
        meta = json.loads((ROOT / "data" / "measured" / s.id / "meta.json").read_text())
        for m in meta["sweeps"].values():
            c = m["config"]
            if (c["dtype"], c.get("fusion")) == ("bf16", "fused") and {"graph", "eager"} <= set(c["modes"]) \
                    and c["op_level"] and c["sparse_points"] and len(c["contexts"]) > 1:
                full.append(s.id)
    if full:
        t = recorded.load(f"measured/{full[-1]}/timings.csv")
        return full[-1], t[(t.dtype == "bf16") & (t.fusion == "fused")]
    sid = recorded.study("decode-step").id
    return sid, recorded.load(f"measured/{sid}/timings.csv")


@pytest.mark.slow
def test_the_decode_step_chapter_cites_the_committed_h200_study(recorded_run):
    g = glued(recorded_run, "07_decode_step")
    sid, t = step_study()
    step = t[(t.what == "step") & (t["mode"] == "graph") & (t.attention == "dense") & (t.context == 384)]
    assert g["where"] == f"data/measured/{sid}"
    assert float(g["step_1"]) == float(step[step.batch == 1].median_us.iloc[0]) / 1e3
    assert float(g["step_64"]) == float(step[step.batch == 64].median_us.iloc[0]) / 1e3
    assert g["check_text"].startswith("This run did not execute the two-rank check") and g["cpu_text"] == ""
    m = arith.load_model("glm5")
    assert (g["heads"], g["moe_layers"]) == (str(m.heads), str(m.moe_layers))


@pytest.mark.slow
def test_the_decode_step_chapter_states_the_fp8_bytes_and_accuracy(recorded_run):
    """The FP8 section under recorded: bytes derived from the model file and the committed study's routing
    (recomputed here), the CPU accuracy check within its tolerance, and where its timings come from."""
    from helpers.model import step

    g = glued(recorded_run, "07_decode_step")
    sid, t = step_study()
    by = recorded.load(f"measured/{sid}/bytes.csv")
    if "dtype" in by.columns:
        by = by[by.dtype == "bf16"]
    de = float(by[(by.batch == 64) & (by.context == 384) & (by.attention == "dense")].distinct_experts.iloc[0])
    m = arith.load_model("glm5")
    fp8_64 = step.component_bytes(m, 8, 64, 384, de, "fp8").bytes_emulated.sum() / arith.GiB
    assert abs(float(g["gib_fp8_64"]) - fp8_64) < 1e-3 * fp8_64
    assert g["acc_ok"] == "passes" and g["acc_wrong_caught"] == "fails it"
    assert float(g["acc_fp8"]) <= float(g["acc_tol"]) == step.FP8_TOLERANCE < float(g["acc_wrong"])
    steps = t[(t.what == "step") & (t.context == 384)]
    overlapped = "overlap" in steps.columns and steps.overlap.astype(bool).all()
    assert g["overlap_main"] == ("on" if overlapped else "off") and g["fp8_trial"].startswith("not tried")
    # FP8 against bf16 from the fused step's study where one holds both (what an engine's FP8 costs), the
    # second stream's saving from the unfused FP8 study (the fused study times no step on one stream)
    fp8_studies = recorded.measured_studies("decode-step-fp8")
    fused = [s for s in recorded.measured_studies("decode-step-fused")
             if {"bf16", "fp8"} <= set(recorded.load(f"measured/{s.id}/timings.csv").query("fusion == 'fused'").dtype)]
    fs = mb.fusion_study()
    if fused and fs is not None and fs.id in {s.id for s in fused}:
        assert g["prec_source"].startswith(f"data/measured/{fs.id} (")
        ft = recorded.load(f"measured/{fs.id}/timings.csv")
        sel = ft[(ft.fusion == "fused") & (ft.what == "step") & (ft.context == 384) & (ft["mode"] == "graph")
                 & (ft.attention == "dense")].set_index(["dtype", "batch"]).median_us
        assert abs(float(g["fp8_step_x_1"]) - sel["fp8", 1] / sel["bf16", 1]) < 1e-9
        assert "moe_triton" in g["prec_experts_impl"]
    elif fp8_studies:
        assert g["prec_source"].startswith(f"data/measured/{fp8_studies[0].id} (")
    else:
        assert g["prec_source"] == "none"
    if fp8_studies:
        assert g["overlap_source"].startswith(f"data/measured/{fp8_studies[0].id} (")


@pytest.mark.slow
def test_the_diagnosis_cites_the_recorded_observations_and_says_it_read_nothing(recorded_run):
    g = glued(recorded_run, "07_diagnosis")
    assert float(g["obs_vm_1"]) == serving_value("sweep_256_256", 1)
    assert float(g["sat_primary"]) == serving_value("sweep_256_256", 64)
    b = recorded.load("reference/baremetal.csv")
    cut = b[(b.metric == "output_throughput") & b.system.str.contains("cutlass")]
    assert float(g["c_obs_bm_64"]) == float(cut[cut.concurrency == 64].value.iloc[0])
    m = arith.load_model("glm5")
    assert g["n_coll"] == str(arith.collectives_per_step(m))
    assert g["n_ar"] == str(sum(c.per_step for c in arith.collective_schedule(m) if c.kind == "all_reduce"))
    assert float(g["bmb_obs_1"]) == float(cut[cut.concurrency == 1].value.iloc[0])
    assert float(g["vm_obs_1"]) == serving_value("sweep_256_256", 1)
    assert float(g["bmb_lo_1"]) <= float(g["bmb_pt_1"]) <= float(g["bmb_hi_1"])
    assert g["conclusion_case"] in ("unsettled", "settled_low", "settled_high")
    assert g["run_text"] == "In recorded mode this chapter ignores the run's own measurements."
    assert g["step_source_text"].startswith("In recorded mode the chapter reads nothing from the run")
    assert f"data/measured/{step_study()[0]}" in g["step_source_text"]
    assert g["meas_where"] == f"data/measured/{step_study()[0]}"


@pytest.mark.slow
def test_the_decode_step_chapter_cites_the_fusion_study(recorded_run):
    """Section 5 (what fusion bought) and the engine comparison under recorded: every glued figure read
    back against the committed fused study's rows, picked here with pandas alone."""
    import json

    g = glued(recorded_run, "07_decode_step")

    def whole(sid):      # its fused bf16 sweep timed graphs and eager, two contexts, op by op and DSA sparse
        sw = json.loads((ROOT / "data" / "measured" / sid / "meta.json").read_text())["sweeps"]
        c = next((m["config"] for m in sw.values() if (m["config"]["dtype"], m["config"].get("fusion")) == ("bf16", "fused")), {})
        return ({"graph", "eager"} <= set(c.get("modes", ())) and bool(c.get("op_level"))
                and bool(c.get("sparse_points")) and len(c.get("contexts", ())) > 1)
    studies = recorded.measured_studies("decode-step-fused")
    s = ([x for x in studies if whole(x.id)] or studies)[-1]      # the last whole study (a QUICK one is not)
    t = recorded.load(f"measured/{s.id}/timings.csv")
    st = t[(t.what == "step") & (t["mode"] == "graph") & (t.attention == "dense") & (t.context == 384)]
    pick = lambda d, f, b, col="median_us": float(st[(st.dtype == d) & (st.fusion == f) & (st.batch == b)][col].iloc[0])  # noqa: E731
    assert g["fusion_where"] == f"data/measured/{s.id}"
    for d in ("bf16", "fp8"):
        assert float(g[f"fus_{d}_1"]) == pick(d, "fused", 1) / 1e3
        assert float(g[f"unf_{d}_64"]) == pick(d, "unfused", 64) / 1e3
        assert float(g[f"fus_x_{d}_1"]) == pytest.approx(pick(d, "unfused", 1) / pick(d, "fused", 1))
        assert int(g[f"k_fus_{d}_1"]) == int(pick(d, "fused", 1, "kernels"))
        assert int(g[f"k_unf_{d}_1"]) == int(pick(d, "unfused", 1, "kernels"))
    assert float(g["fp8_vs_bf16_64"]) == pytest.approx(pick("fp8", "fused", 64) / pick("bf16", "fused", 64))
    meta = json.loads((ROOT / "data" / "measured" / s.id / "meta.json").read_text())
    # a sweep the device script cut short (finished: false) has no compile time
    comp = {sw["config"]["dtype"]: sw.get("compile_s") for sw in meta["sweeps"].values() if sw["config"].get("fusion") == "fused"}
    assert float(g["compile_s_bf16"]) == pytest.approx(comp["bf16"])
    # the op list for SGLang: one kernel per listed op, the budget's count less the collectives
    from helpers.model import budget as bd
    m = arith.load_model("glm5")
    assert int(g["k_sglang"]) + int(g["k_sglang_coll"]) == bd.kernels_per_step(m)
    assert float(g["k_vs_sglang"]) == pytest.approx(pick("bf16", "fused", 1, "kernels") / int(g["k_sglang"]))
    # the engine comparison: the whole step's measured time over the composite, recomputed from the composite
    from helpers.model import measured as mb
    floor = next(sw["graph_us_per_kernel"] for sw in meta["sweeps"].values()
                 if (sw["config"]["dtype"], sw["config"].get("fusion")) == ("bf16", "fused"))
    eng = mb.engine_composite(m, 1, 384, "bf16", floor)["us_step"].sum()
    assert float(g["eng_bf16_1"]) == pytest.approx(pick("bf16", "fused", 1) / eng)


@pytest.mark.slow
def test_page_one_cites_only_values_the_chapters_glue(recorded_run):
    """The pages that cite chapters' values (page 1) find every one in a run made by this book: the
    'not in this run' marker is for older runs only."""
    from helpers.book import runbook as rb, staging

    root = repo_root()
    for doc in rb.toc_entries(root):
        md = root / f"{doc}.md"
        if not md.exists():
            continue
        for m in staging.CROSS_GLUE.finditer(md.read_text()):
            stem = Path(m.group("nb")).stem
            assert m.group("key") in glued(recorded_run, stem), f"{doc}.md cites {m.group(0)}"


@pytest.mark.slow
def test_the_diagnosis_states_the_held_out_calibration_from_the_registered_bands(recorded_run):
    """Issue 45: the calibration glued in section 3, recomputed here from the two data files alone."""
    g = glued(recorded_run, "07_diagnosis")
    h = recorded.load("reference/holdouts.csv").set_index("key")
    b = recorded.load("reference/holdout_bands.csv").set_index("key")
    obs = h["observed"].astype(float)
    inside = (b["band_low"].astype(float) <= obs) & (obs <= b["band_high"].astype(float))
    err = ((b["point"].astype(float) - obs) / obs).abs()
    assert g["cal_n"] == str(len(h)) and g["cal_n_systems"] == str(h["system"].nunique())
    assert g["cal_n_inside"] == str(int(inside.sum()))
    assert float(g["cal_median_err_pct"]) == pytest.approx(100 * err.median(), rel=1e-6)
    assert float(g["cal_worst_err_pct"]) == pytest.approx(100 * err.max(), rel=1e-6)
    assert g["cal_registered"] == "; ".join(sorted(set(b["registered"])))
