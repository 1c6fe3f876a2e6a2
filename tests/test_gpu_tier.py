"""The GPU test tier of a run (helpers.book.gputier, tests/gpu_tier_plugin.py, helpers.book.publish): a `gpu`
test skips only for missing hardware; the tier's result is recorded in the run's manifest with the names of
what passed, failed and skipped and the commit; publish refuses a run whose tier failed or is not recorded,
naming the tests; the first-call check's verdicts (helpers.model.firstcall)."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.book import gputier
from helpers.book.manifest import Manifest
from helpers.model import firstcall
from tierreport import tier_record

ROOT = Path(__file__).resolve().parents[1]


def test_only_missing_hardware_lets_a_gpu_test_skip():
    for ok in ("no GPU: no CUDA device", "one GPU: needs two GPUs", "no FP8: sm80", "no P2P: the VM"):
        assert gputier.hardware_skip(ok)
    for bad in ("flaky on this host", "needs Triton", "", "GPU busy"):
        assert not gputier.hardware_skip(bad)


def _rec(run_dir, passed=("t.py::a",), failed=(), skipped=(), code=0, commit="abc1234"):
    return tier_record(run_dir, passed, failed, skipped, code, commit)


def _manifest(rec=None, commit="abc1234"):
    m = {"run_id": "r", "target": "h200", "chapters": [], "versions": {"book_commit": commit}}
    if rec is not None:
        m["gpu_tier"] = rec
    return m


def _typed(rec=None, commit="abc1234"):
    return Manifest.from_dict(_manifest(rec, commit), "a test's manifest")


def test_a_passed_tier_at_the_measuring_commit_lets_a_run_be_published(tmp_path):
    assert gputier.problems(_typed(_rec(tmp_path)), tmp_path) == []
    assert "**passed** at `abc1234`: 1 passed, 0 failed, 0 skipped" in gputier.summary(_typed(_rec(tmp_path)))


def test_a_run_without_a_tier_record_is_refused_with_the_command(tmp_path):
    found = gputier.problems(_typed(), tmp_path / "r")
    assert len(found) == 1 and "no record of the GPU test tier" in found[0]
    assert "python -m helpers.book.gputier runs/r" in found[0] and "abc1234" in found[0]


def test_a_failed_tier_is_refused_naming_the_tests(tmp_path):
    rec = _rec(tmp_path, failed=("tests/test_fp8.py::test_gpu_fp8_step", "tests/test_step.py::test_gpu_graph"), code=1)
    assert not rec["ok"]
    found = gputier.problems(_typed(rec), tmp_path)
    assert any("tests/test_fp8.py::test_gpu_fp8_step" in p and "tests/test_step.py::test_gpu_graph" in p
               for p in found), found


def test_a_tier_run_at_another_commit_or_running_nothing_or_skipping_without_cause_is_refused(tmp_path):
    assert any("not at the commit that measured" in p
               for p in gputier.problems(_typed(_rec(tmp_path, commit="fff0000")), tmp_path))
    assert any("ran no test" in p for p in gputier.problems(_typed(_rec(tmp_path, passed=(), code=5)), tmp_path))
    off = _rec(tmp_path, skipped=[("t.py::b", "flaky here")])
    assert not off["ok"] and any("other than missing hardware: t.py::b" in p
                                 for p in gputier.problems(_typed(off), tmp_path))
    hw = _rec(tmp_path, skipped=[("t.py::c", "one GPU: needs two GPUs")])
    assert hw["ok"] and gputier.problems(_typed(hw), tmp_path) == []


def test_the_first_call_verdicts():
    base = {"first_vs_second": 0.0, "third_vs_second": 0.0, "replay_vs_second": 0.0, "after_other_batch_vs_second": 0.0}
    assert firstcall.verdict(base) == "same"
    assert firstcall.verdict({**base, "first_vs_second": 0.114}) == "first call differs"
    assert firstcall.verdict({**base, "after_other_batch_vs_second": 0.05}) == "first call differs"
    assert firstcall.verdict({**base, "first_vs_second": 0.07, "third_vs_second": 0.07}) == "run to run"
    assert firstcall.verdict({**base, "error": "boom"}) == "error: boom"
    with pytest.raises(ValueError, match="unknown keys.*'batches'"):
        firstcall.FirstCallConfig.parse({"batches": 4})


@pytest.mark.integration
def test_the_first_call_check_runs_in_a_fresh_process_and_reports_its_failure():
    row = firstcall.run_fresh(firstcall.FirstCallConfig(dtype="bf16", batch=2, context=16, device="cpu"), 120)
    assert row["verdict"] == "same" and row["first_vs_second"] == 0.0 and not row["compiled"], row
    bad = firstcall.run_fresh(firstcall.FirstCallConfig(overlap="on", device="cpu"), 120)
    assert bad["verdict"].startswith("error:") and "second CUDA stream" in bad["error"]


TIER_TESTS = '''
    import pytest

    @pytest.mark.gpu
    def test_passes():
        assert True

    @pytest.mark.gpu
    def test_fails():
        assert 1 == 2

    @pytest.mark.gpu
    def test_skips_for_hardware():
        pytest.skip("one GPU: needs two")

    @pytest.mark.gpu
    def test_skips_for_no_good_reason():
        pytest.skip("too slow today")

    def test_not_gpu():
        pytest.skip("anything goes outside the tier")
'''


@pytest.mark.integration
def test_the_tier_runs_real_pytest_records_names_and_fails_a_skip_without_cause(tmp_path):
    """A checkout with four `gpu` tests (one passes, one fails, one skips for hardware, one for no good
    reason) and a run folder: gputier.run runs pytest -m gpu there, with the plugin, and records it."""
    src = tmp_path / "repo"
    (src / "tests").mkdir(parents=True)
    (src / "tests" / "test_t.py").write_text(textwrap.dedent(TIER_TESTS))
    (src / "tests" / "conftest.py").write_text("from gpu_tier_plugin import pytest_runtest_makereport  # noqa\n")
    (src / "tests" / "gpu_tier_plugin.py").write_text((ROOT / "tests" / "gpu_tier_plugin.py").read_text())
    (src / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\ntestpaths = tests\n")
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    run.joinpath("manifest.json").write_text(json.dumps(_manifest(commit="abc1234")))
    rec = gputier.run(run, src, timeout_s=120)
    assert rec["passed"] == ["tests/test_t.py::test_passes"]
    assert sorted(f["name"] for f in rec["failed"]) == ["tests/test_t.py::test_fails",
                                                         "tests/test_t.py::test_skips_for_no_good_reason"]
    assert [s["name"] for s in rec["skipped"]] == ["tests/test_t.py::test_skips_for_hardware"]
    assert not rec["ok"] and rec["exit_code"] == 1 and rec["commit"] == "abc1234"
    saved = json.loads(run.joinpath("manifest.json").read_text())["gpu_tier"]
    assert saved == rec and (run / gputier.JUNIT).exists() and (run / gputier.LOG).exists()
    found = gputier.problems(Manifest.from_dict({**_manifest(), "gpu_tier": saved}, "a test's manifest"), run)
    assert any("test_fails" in p and "test_skips_for_no_good_reason" in p for p in found)
    cli = subprocess.run([sys.executable, "-m", "helpers.book.gputier", str(tmp_path / "nope")],
                         capture_output=True, text=True, cwd=src, timeout=60)
    assert cli.returncode == 2 and "not a run directory" in cli.stderr
