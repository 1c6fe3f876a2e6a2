"""The re-running appendix opens with a list of targets computed from targets/ and the committed runs (issue 24, item 8)."""
import json
import shutil
from pathlib import Path

import pytest

from helpers.book import publish, rerun
from helpers.book.targets import known_targets

import committed

ROOT = Path(__file__).resolve().parents[1]
RUNS, NO_GIT = committed.runs_or_reason(ROOT)  # the runs git tracks (tests/committed.py)

SITE_RUN = publish.site_run(ROOT)


def test_the_page_holds_the_table_as_generated():
    assert not NO_GIT, NO_GIT
    page = (ROOT / rerun.PAGE).read_text()
    assert rerun.table(ROOT, RUNS) in page, ("appendix/rerun.md's list of targets is out of date (a target or a committed "
                                       "run changed): run `python -m helpers.book.rerun --write`")
    assert page.index(rerun.BEGIN) < page.index("## "), "the list of targets is not the first thing on the page"


def test_one_row_per_target_with_a_time_that_says_where_it_comes_from():
    assert not NO_GIT, NO_GIT
    rows = {r[0].strip("`"): r for r in rerun.rows(ROOT, RUNS)}
    assert set(rows) == set(known_targets(ROOT))
    runs = rerun.committed_runs(ROOT, RUNS)
    published = SITE_RUN.split("/")[-1]
    for name, (_, hw, time, without, _parts) in rows.items():
        assert hw and without, name
        if name in runs:
            said = ("the published run" if runs[name].run_id == published   # its id: SITE_RUN only
                    else f"run `{runs[name].run_id}`")
            assert f"measured ({said}" in time, (name, time)
            assert "SITE_RUN" not in time, (name, time)   # reading item 21: a variable's name reads as unfilled
        else:
            assert f"(stated in targets/{name}.yaml)" in time or time == "not stated, no committed run", (name, time)


def test_the_time_of_a_committed_run_is_its_wall_time(tmp_path):
    for d in ("targets", "notebooks"):
        shutil.copytree(ROOT / d, tmp_path / d)
    shutil.copy(ROOT / "_toc.yml", tmp_path / "_toc.yml")
    run = tmp_path / "runs" / "x1"
    run.mkdir(parents=True)
    run.joinpath("manifest.json").write_text(json.dumps({
        "run_id": "x1", "target": "recorded", "chapters": [], "status": "ok", "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:03:00+00:00", "hardware": {"gpu_count": 0, "gpu_names": []}}))
    rows = lambda ids: {r[0].strip("`"): r for r in rerun.rows(tmp_path, ids)}  # noqa: E731
    assert "measured" not in rows([])["recorded"][2], "a run that is not committed does not count"
    assert rows(["x1"])["recorded"][2] == "3 min, measured (run `x1` on no GPU)"
    run.joinpath("manifest.json").write_text(run.joinpath("manifest.json").read_text().replace('"ok"', '"failed"'))
    assert "measured" not in rows(["x1"])["recorded"][2]


def test_a_target_that_requires_something_says_the_run_is_refused():
    rows = {r[0].strip("`"): r for r in rerun.rows(ROOT, [])}
    assert rows["sglang-8gpu"][3].startswith("Nothing: the runbook refuses")
    assert "required: `model_path`" in rows["sglang-8gpu"][1]


def test_estimates_and_hardware_are_read_from_the_description():
    assert rerun.stated_estimate("Sized to finish in about a minute on a 2-core machine.") == \
        "about a minute on a 2-core machine"
    assert rerun.stated_estimate("Fast.") is None
    assert rerun.hardware("The default. A host with eight GPUs (four at the least), such as; more.", {}) == \
        "A host with eight GPUs (four at the least)"
    assert rerun.hardware("The default. Measure what this machine can.", {}) == "Any machine"
    assert rerun.hardware("Needs a host with 8 GPUs, sglang.", {"packages": {"sglang": "x"}}) == \
        "A host with 8 GPUs (required: `sglang`)"


def test_a_page_without_markers_is_refused():
    with pytest.raises(ValueError, match="no generated table"):
        rerun.replace_table("# page\n", "x")


def test_each_target_says_which_parts_of_this_machine_it_fills():
    """Issue 44: per target, which parts of chapter 08's verdict it fills, from the modes it runs the chapters in."""
    rows = {r[0].strip("`"): r for r in rerun.rows(ROOT, [])}
    assert rows["recorded"][4] == "This machine: no part (nothing measured)"
    assert rows["multi-gpu"][4].startswith("This machine: VM or not, P2P and the all-reduce on two GPUs or more")
    assert rows["sglang-8gpu"][4].endswith("the observation, loss and thresholds")
    assert "observation only from `server_url` or typed parameters" in rows["h200"][4]
