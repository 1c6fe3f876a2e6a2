"""The numbers the decode-step chapter and the diagnosis put into their prose, read back out of the session's
execution of the book under `recorded` (tests/conftest.py) and checked against data/ independently of the
helpers that picked them. The fast tests that removed rows and renamed labels fail are in test_diagnosis.py
and test_stepreport.py."""

from pathlib import Path

import pytest

from helpers import repo_root
from helpers.book import recorded
from helpers.book.glue import read_glued
from helpers.model import arith

ROOT = repo_root()


def glued(run, stem: str) -> dict[str, str]:
    return read_glued(run[2] / "notebooks" / f"{stem}.ipynb")


def serving_value(experiment: str, concurrency: int) -> float:
    s = recorded.load("recorded/serving.csv")
    r = s[(s.experiment == experiment) & (s.metric == "output_throughput") & (s.concurrency == concurrency)]
    return float(r.value.iloc[0])


@pytest.mark.slow
def test_the_decode_step_chapter_cites_the_committed_h200_study(recorded_run):
    g = glued(recorded_run, "07_decode_step")
    study = recorded.study("decode-step")
    t = recorded.load(f"measured/{study.id}/timings.csv")
    step = t[(t.what == "step") & (t["mode"] == "graph") & (t.attention == "dense") & (t.context == 384)]
    assert g["where"] == f"data/measured/{study.id}"
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
    study = recorded.study("decode-step")
    by = recorded.load(f"measured/{study.id}/bytes.csv")
    de = float(by[(by.batch == 64) & (by.context == 384) & (by.attention == "dense")].distinct_experts.iloc[0])
    m = arith.load_model("glm5")
    fp8_64 = step.component_bytes(m, 8, 64, 384, de, "fp8").bytes_emulated.sum() / arith.GiB
    assert abs(float(g["gib_fp8_64"]) - fp8_64) < 1e-3 * fp8_64
    assert g["acc_ok"] == "passes" and g["acc_wrong_caught"] == "fails it"
    assert float(g["acc_fp8"]) <= float(g["acc_tol"]) == step.FP8_TOLERANCE < float(g["acc_wrong"])
    assert g["overlap_main"] == "off" and g["fp8_trial"].startswith("not tried")
    fp8_studies = recorded.measured_studies("decode-step-fp8")
    if fp8_studies:
        assert g["prec_source"].startswith(f"data/measured/{fp8_studies[0].id} (")
    else:
        assert g["prec_source"] == "none"


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
    assert f"data/measured/{recorded.study('decode-step').id}" in g["step_source_text"]
    assert g["meas_where"] == f"data/measured/{recorded.study('decode-step').id}"


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
