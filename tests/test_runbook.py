"""The runbook end to end on a small throw-away book: real papermill kernels, a real build."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import minibook
from helpers.book import runbook


@pytest.fixture()
def mini(tmp_path, monkeypatch):
    ok_body = ("results.save_table(out, 'numbers', pd.DataFrame({'x': [1, 2]}))\n"
               "glue('answer', 42.0, display=False)\n")
    root = minibook.book(tmp_path / "book", {
        "01_first": (ok_body, "First"),
        "02_broken": ("raise ValueError('boom: the GPU caught fire')\n", "Broken"),
        "03_after": (ok_body, "After")})
    (root / "targets" / "typo.yaml").write_text(
        "description: bad\nparameters: {mode: auto}\nchapters: {01_first: {sizes: [1]}}\n")
    monkeypatch.setenv("BOOK_ROOT", str(root))
    return root


def _cli(*args, env_root=None):
    env = dict(os.environ)
    if env_root:
        env["BOOK_ROOT"] = str(env_root)
    return subprocess.run([sys.executable, "-m", "helpers.book.runbook", *args], capture_output=True,
                          text=True, env=env, timeout=600)


@pytest.mark.integration
def test_help_lists_usage():
    r = _cli("--help")
    assert r.returncode == 0 and "--target" in r.stdout and "--render" in r.stdout


@pytest.mark.integration
def test_unknown_target_is_refused_with_known_names():
    r = _cli("--target", "nope")
    assert r.returncode == 2
    assert "unknown target 'nope'" in r.stderr and "auto" in r.stderr and "recorded" in r.stderr


@pytest.mark.integration
def test_list_targets_shows_the_shipped_targets():
    r = _cli("--list-targets")
    assert r.returncode == 0 and "recorded" in r.stdout and "auto" in r.stdout


def test_plan_refuses_parameters_a_chapter_does_not_declare(mini):
    with pytest.raises(runbook.RunbookError, match=r"typo.yaml: chapter 01_first does not declare parameter 'sizes'"):
        runbook.plan(runbook.load_target("typo", mini), mini)
    t = runbook.Target("t", "d", parameters={"modee": "auto"})
    with pytest.raises(runbook.RunbookError, match="declared by no chapter"):
        runbook.plan(t, mini)
    t = runbook.Target("t", "d", chapters={"99_ghost": {}})
    with pytest.raises(runbook.RunbookError, match="99_ghost.*chapters: 01_first, 02_broken, 03_after"):
        runbook.plan(t, mini)


@pytest.mark.integration
def test_failing_chapter_is_reported_and_the_rest_still_run_and_render(mini):
    r = _cli("--target", "quick", "--run-id", "r1", env_root=mini)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("[")]
    assert len(lines) == 3 and "ok" in lines[0] and "failed" in lines[1] and "boom" in lines[1]
    run = mini / "runs" / "r1"
    m = json.loads((run / "manifest.json").read_text())
    assert [c["status"] for c in m["chapters"]] == ["ok", "failed", "ok"]
    assert m["status"] == "failed" and m["target"] == "quick"
    err = m["chapters"][1]["error"]
    assert err["ename"] == "ValueError" and "GPU caught fire" in err["evalue"]
    assert all(c["duration_s"] > 0 for c in m["chapters"])
    assert m["chapters"][0]["parameters"]["mode"] == "auto"
    assert {"hostname", "logical_cpus"} <= set(m["hardware"])
    assert "python" in m["versions"] and "papermill" in m["versions"]
    assert (run / "results" / "01_first" / "numbers.csv").exists()
    assert (run / "notebooks" / "02_broken.ipynb").exists()  # kept, with the error in it
    assert (mini / "runs" / "latest").resolve() == run.resolve()
    html = mini / "_build" / "html"
    status = (html / "appendix" / "status.html").read_text()
    assert "failed" in status and "ValueError" in status and "r1" in status
    broken = (html / "notebooks" / "02_broken.html").read_text()
    assert "failed" in broken and "GPU caught fire" in broken
    first = (html / "notebooks" / "01_first.html").read_text()
    assert "42.0" in first  # glue rendered from the executed notebook, execution off

    # re-render the same run elsewhere: nothing is executed again
    shutil.rmtree(html)
    before = (run / "manifest.json").read_text()
    r = _cli("--render", str(run), env_root=mini)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (html / "index.html").exists() and (run / "manifest.json").read_text() == before
    # and into a folder of its own (--out-dir), leaving the book's _build/ as it was
    stamp = (html / "index.html").stat().st_mtime_ns
    r = _cli("--render", str(run), "--out-dir", str(mini.parent / "elsewhere"), env_root=mini)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (mini.parent / "elsewhere" / "_build" / "html" / "appendix" / "status.html").exists()
    assert (html / "index.html").stat().st_mtime_ns == stamp


@pytest.mark.integration
def test_render_refuses_a_folder_that_is_not_a_run(mini, tmp_path):
    r = _cli("--render", str(tmp_path), env_root=mini)
    assert r.returncode == 2 and "not a run directory" in r.stderr


@pytest.mark.integration
def test_chapters_option_skips_the_rest(mini):
    r = _cli("--target", "quick", "--run-id", "r2", "--chapters", "01_first", "--no-build", env_root=mini)
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads((mini / "runs" / "r2" / "manifest.json").read_text())
    assert [c["status"] for c in m["chapters"]] == ["ok", "skipped", "skipped"]


def test_status_page_lists_every_chapter():
    m = {"run_id": "x", "target": "auto", "target_description": "d", "started": "s", "finished": "f",
         "status": "failed", "hardware": {"gpu_count": 0}, "versions": {"torch": "2"},
         "chapters": [{"stem": "a", "status": "ok", "duration_s": 1.5, "parameters": {"mode": "auto"}},
                      {"stem": "b", "status": "failed", "duration_s": 2.0, "parameters": {},
                       "error": {"ename": "E", "evalue": "bad | thing"}}]}
    page = runbook.status_page(runbook.Manifest(**m), {"a": "Chapter A"})
    assert "Chapter A" in page and "**failed**" in page and "bad \\| thing" in page
    assert "1 ok, 1 failed, 0 skipped" in page and "gpu_count" in page


@pytest.mark.parametrize("commit,clean,says", [
    (None, False, "unrecorded commit"), ("abc1234+dirty", False, "modified commit"),
    ("abc1234 (from BOOK_COMMIT)", False, "unverified commit"), ("abc1234", True, "clean commit `abc1234`")])
def test_status_page_says_which_commit_a_run_was_made_from(commit, clean, says):
    m = {"run_id": "x", "target": "auto", "status": "ok", "chapters": [],
         "versions": {"book_commit": commit} if commit else {}}
    assert runbook.commit_provenance(runbook.Manifest(**m))[1] is clean
    assert says in runbook.status_page(runbook.Manifest(**m), {})
