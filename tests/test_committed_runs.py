"""The committed runs (runs/<id>, tracked by git) as the current main renders them: each strictly, with a
status page that says which commit it was made from; and the listing of those runs, which is git's, never the
reader's own runs beside them. The modules that read runs/ or _build/ are run again after the readers' commands
(tests/test_readers_commands.py): this is one of them."""
import subprocess

import pytest

import committed
from helpers.book import runbook

# The runs git tracks, not every runs/*/manifest.json: the reader's own runs (`make book`, an interrupted
# run) and runs/latest are not committed and change nothing here (tests/committed.py).
COMMITTED_RUNS, NO_GIT = committed.runs_or_reason(runbook.repo_root())


@pytest.mark.slow
@pytest.mark.parametrize("run_id", COMMITTED_RUNS)
def test_every_committed_run_renders_strictly_at_this_commit(run_id, committed_site):
    """A committed run is rendered by the current main with the strict build (-W -n), into a build
    folder of its own (once per session: tests/conftest.py, committed_site; test_book_site.py checks the same
    builds in the browser); its status page says which commit it was made from."""
    if NO_GIT:
        pytest.fail(NO_GIT)
    root = runbook.repo_root()
    run = root / "runs" / run_id
    html = committed_site(run_id)
    status = (html / "appendix" / "status.html").read_text()
    assert run_id in status and "made from" in status
    made_after_recording = str(runbook.read_manifest(run).get("started", "")) >= "2026-12-01"
    if made_after_recording:
        assert runbook.commit_provenance(runbook.Manifest.load(run))[1], f"{run_id} is not from a clean commit"


@pytest.mark.integration
def test_committed_runs_are_the_runs_git_tracks_and_not_the_readers(tmp_path):
    """In a git repository with one committed run, a run of the reader's own beside it (with its
    manifest), an untracked h200-* run (the pattern .gitignore keeps visible) and runs/latest pointing at
    the reader's run: only the committed one is listed. Outside a git checkout the listing fails, saying
    why, and the parametrized test fails with that reason rather than collecting nothing."""
    repo = tmp_path / "repo"
    (repo / "runs" / "committed-1").mkdir(parents=True)
    (repo / "runs" / "committed-1" / "manifest.json").write_text("{}")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "runs"], check=True)
    subprocess.run([*git, "commit", "-qm", "one run"], check=True)
    for mine in ("20261201-120000-auto-host", "h200-mine"):
        (repo / "runs" / mine).mkdir()
        (repo / "runs" / mine / "manifest.json").write_text("{}")
    (repo / "runs" / "latest").symlink_to("20261201-120000-auto-host")
    assert committed.runs(repo) == ["committed-1"]

    with pytest.raises(committed.NoGitError, match="need a git checkout"):
        committed.runs(tmp_path / "runs-without-git")
    ids, why = committed.runs_or_reason(tmp_path)
    assert ids == ["no-git"] and "git ls-files runs/" in why
    assert NO_GIT is None, NO_GIT
