"""The runs the repository commits: the run folders under runs/ that git tracks, and only those.

`make book` (and `make run`, an interrupted run, a run made on a GPU host and copied here) leaves the
reader's own runs in runs/ and points runs/latest at the newest; none of them is committed, so none of
them may change what the tests about committed runs check. Git is the one record of what is committed:
without git or outside a git checkout, this raises an error saying so (a test that asks for the list
fails with it) rather than testing nothing."""
import re
import subprocess
from pathlib import Path

MANIFEST = re.compile(r"runs/([^/]+)/manifest\.json")


class NoGitError(RuntimeError):
    """The committed runs cannot be listed: git is missing, or the folder is not a git checkout."""


def runs(root: Path) -> list[str]:
    """The run ids of the runs/<id>/manifest.json files git tracks in `root`, sorted."""
    # safe.directory: only a file list is read, so a checkout owned by another user (a CI container) is fine
    cmd = ["git", "-c", f"safe.directory={Path(root).resolve()}", "-C", str(root), "ls-files", "-z", "--", "runs/"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise NoGitError("the tests about committed runs list them with `git ls-files runs/`, and git is not "
                         "installed here; install git (apt-get install git) and run the tests from a git clone")
    if p.returncode != 0:
        raise NoGitError(f"`git ls-files runs/` failed in {root} (exit {p.returncode}): {p.stderr.strip()}; the "
                         f"tests about committed runs need a git checkout of the repository (git clone)")
    ids = sorted({m.group(1) for f in p.stdout.split("\0") if (m := MANIFEST.fullmatch(f))})
    if not ids:
        raise NoGitError(f"git tracks no runs/<id>/manifest.json in {root}; the repository commits runs "
                         f"(the published site shows one), so this checkout is incomplete")
    return ids


def runs_or_reason(root: Path) -> tuple[list[str], str | None]:
    """For parametrizing at collection: (ids, None), or (one placeholder id, why) when git cannot say, so
    that the test fails with the reason instead of collecting nothing."""
    try:
        return runs(root), None
    except NoGitError as exc:
        return ["no-git"], str(exc)
