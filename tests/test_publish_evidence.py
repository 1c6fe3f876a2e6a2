"""The publish gate checks the GPU tier's evidence, not a record that says it passed (issue 47, items 3 and 4), on
real files: a run folder with a JUnit report and the record of it (tests/tierreport.py), edited or forged as the
adversarial run did. On 1beba90 a report edited to hold a failure, a deleted report, a hand-made record naming one
made-up test, `ok: "false"` and `exit_code` -9 beside `ok: true` all published, a record of the wrong shape
crashed publish with a traceback, and `python -m helpers.book.gputier RUN` wrote the pytest log through a symlinked
logs/gpu-tier.log into the file it pointed to."""
import json
import shutil
import subprocess
import sys

import pytest

from helpers import repo_root
from helpers.book import gputier, publish
from helpers.book.manifest import Manifest, versions
from tierreport import SUITE, tier_record

ROOT = repo_root()


def _typed(rec, commit="abc1234"):
    m = {"run_id": "r", "target": "h200", "chapters": [], "versions": {"book_commit": commit}, "gpu_tier": rec}
    return Manifest.from_dict(m, "a test's manifest")


def test_the_tiers_own_record_and_report_pass(tmp_path):
    rec = tier_record(tmp_path, passed=("tests/test_a.py::test_x", "t.py::a"), skipped=[("t.py::c", "one GPU: two")])
    assert rec["report_sha256"] and gputier.problems(_typed(rec), tmp_path) == []


def test_a_report_edited_after_the_tier_is_refused(tmp_path):
    rec = tier_record(tmp_path, passed=("t.py::a", "t.py::b"))
    report = tmp_path / gputier.JUNIT
    report.write_text(report.read_text().replace('name="b" time="0.1">', 'name="b" time="0.1"><failure message="x"/>'))
    found = gputier.problems(_typed(rec), tmp_path)
    assert len(found) == 1 and "is not the one recorded" in found[0], found


def test_a_deleted_report_is_refused(tmp_path):
    rec = tier_record(tmp_path)
    (tmp_path / gputier.JUNIT).unlink()
    assert any(f"{gputier.JUNIT} is missing" in p for p in gputier.problems(_typed(rec), tmp_path))


def test_a_hand_made_record_naming_a_made_up_test_is_refused(tmp_path):
    tier_record(tmp_path, passed=("t.py::a",))               # the tier's real report
    forged = {"commit": "abc1234", "ok": True, "failed": [], "passed": ["tests/test_made_up.py::test_it"],
              "skipped": [], "exit_code": 0, "started": "2026-12-04T12:00:00+00:00", "duration_s": 1.0}
    found = gputier.problems(_typed(forged), tmp_path)
    assert any("disagree on the tests passed: t.py::a, tests/test_made_up.py::test_it" in p for p in found), found


@pytest.mark.parametrize("edit,said", [
    (lambda r: r.update(ok="false"), "`ok` is 'false', not a bool"),
    (lambda r: r.update(ok=1), "`ok` is '1', not a bool"),
    (lambda r: r.update(exit_code=-9), "says ok, but pytest exited -9"),
    (lambda r: r.update(passed="t.py::a"), "`passed` is 't.py::a', not a list"),
    (lambda r: r.update(failed=["t.py::a"]), "`failed` is not a list of {name} entries"),
    (lambda r: r.update(exit_code=True), "`exit_code` is 'True', not a int"),
    (lambda r: r.pop("started"), "`started` is 'None', not a str"),
])
def test_a_record_that_is_not_the_tiers_is_refused_in_one_line(tmp_path, edit, said):
    rec = tier_record(tmp_path)
    edit(rec)
    found = gputier.problems(_typed(rec), tmp_path)
    assert any(said in p for p in found) and all("\n" not in p for p in found), found


def test_an_older_record_without_a_hash_is_held_to_its_report(tmp_path):
    """A record from before report_sha256 (as the run published when issue 47 came): its report is read again and
    must hold the same tests, and come from inside the tier's recorded run."""
    rec = tier_record(tmp_path, passed=("t.py::a", "t.py::b"))
    rec.pop("report_sha256")
    report = tmp_path / gputier.JUNIT
    report.write_text(report.read_text().replace(f'name="{SUITE}abc1234"', 'name="pytest"'))
    assert gputier.problems(_typed(rec), tmp_path) == []
    report.write_text(report.read_text().replace('name="b" time="0.1">', 'name="b" time="0.1"><failure message="x"/>')
                      .replace('failures="0"', 'failures="1"'))
    assert any("disagree on the tests failed: t.py::b" in p for p in gputier.problems(_typed(rec), tmp_path))
    rec["started"] = "2026-12-05T12:00:00+00:00"               # the report is a day older than the tier's run
    tier_record(tmp_path, passed=("t.py::a", "t.py::b"))
    report.write_text(report.read_text().replace(f'name="{SUITE}abc1234"', 'name="pytest"'))
    assert any("outside the tier's run" in p for p in gputier.problems(_typed(rec), tmp_path))


def test_a_linked_report_is_refused(tmp_path):
    rec = tier_record(tmp_path / "elsewhere")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / gputier.JUNIT).symlink_to(tmp_path / "elsewhere" / gputier.JUNIT)
    assert any("is a symbolic link" in p for p in gputier.problems(_typed(rec), tmp_path / "run"))


@pytest.fixture()
def published_copy(tmp_path):
    site = ROOT / publish.site_run(ROOT)
    run = tmp_path / "r"
    run.mkdir()
    shutil.copy(site / "manifest.json", run / "manifest.json")
    shutil.copy(site / gputier.JUNIT, run / gputier.JUNIT)
    return run


@pytest.mark.integration
@pytest.mark.parametrize("tier", [[], {"commit": 3, "ok": True}, {"failed": ["x"], "ok": True, "passed": "p"}])
def test_publish_names_a_malformed_record_in_one_line_never_a_traceback(published_copy, tier):
    m = json.loads((published_copy / "manifest.json").read_text())
    m["gpu_tier"] = tier
    (published_copy / "manifest.json").write_text(json.dumps(m))
    p = subprocess.run([sys.executable, "-m", "helpers.book.publish", str(published_copy)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines and all(x.startswith("error: ") for x in lines), lines
    assert any("gpu_tier" in x or "GPU test tier record is malformed" in x for x in lines), lines


@pytest.mark.integration
def test_the_tier_refuses_to_write_its_log_through_a_link(tmp_path):
    """gputier.run on a run whose logs/gpu-tier.log is a link: refused naming the link, before pytest runs, and
    the file it points to is left as it was (1beba90 overwrote it with the pytest log)."""
    run = tmp_path / "runs" / "r"
    (run / "logs").mkdir(parents=True)
    run.joinpath("manifest.json").write_text(json.dumps({"run_id": "r", "target": "h200", "chapters": [],
                                                         "versions": {"book_commit": "abc1234"}}))
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (run / "logs" / "gpu-tier.log").symlink_to(victim)
    src = tmp_path / "repo"
    src.mkdir()
    with pytest.raises(gputier.GpuTierError, match="is a symbolic link"):
        gputier.run(run, src, timeout_s=60)
    assert victim.read_text() == "keep me" and not (run / gputier.JUNIT).exists()
    m = json.loads(run.joinpath("manifest.json").read_text())   # the command line runs at this checkout's commit
    m["versions"]["book_commit"] = versions(ROOT)["book_commit"]
    run.joinpath("manifest.json").write_text(json.dumps(m))
    cli = subprocess.run([sys.executable, "-m", "helpers.book.gputier", str(run)], capture_output=True, text=True,
                         cwd=src, timeout=60)
    assert cli.returncode == 2 and "symbolic link" in cli.stderr and "Traceback" not in cli.stderr
    assert victim.read_text() == "keep me"
