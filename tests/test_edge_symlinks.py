"""A run's files are never followed through symbolic links (issue 36, item 2). Runs are shared and committed and
git keeps links: on 8874c48 a `.runbook.lock` that is a link made `--resume` truncate the link's target and write
the lock record into it, and a `rows.jsonl` link had its target's last line cut as "torn". Now the lock, the rows,
the tables, the logs and the manifest are opened with O_NOFOLLOW and a run folder holding a link is refused at
once, naming the path; the file the link points to is left byte for byte."""
import os
import subprocess
import sys

import pytest

import minibook
from helpers.core import results
from helpers.book import runbook

VICTIM = b"a file the user can write\nits last line has no newline"

FAILING = """
from helpers.core import results
results.append_row(out / "points.jsonl", {"i": 0})
raise RuntimeError("stopped on purpose, to be resumed")
"""


@pytest.fixture()
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_bytes(VICTIM)
    return v


@pytest.fixture()
def failed_run(tmp_path):
    book = minibook.book(tmp_path / "book", {"01_fail": (FAILING, "Fails")})
    env = {**os.environ, "BOOK_ROOT": str(book)}
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "quick", "--run-id", "r",
                        "--no-build"], cwd=book, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode != 0 and "stopped on purpose" in r.stdout + r.stderr, r.stdout + r.stderr
    return book, book / "runs" / "r", env


def resume(book, env):
    return subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--resume", "r", "--no-build"], cwd=book,
                          env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_resume_refuses_a_linked_lock_and_a_linked_rows_file_and_leaves_their_targets(failed_run, victim):
    book, run, env = failed_run
    lock = run / runbook.LOCK_NAME
    lock.symlink_to(victim)
    r = resume(book, env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(lock) in r.stderr and "symbolic link" in r.stderr and "remove the link" in r.stderr, r.stderr
    assert victim.read_bytes() == VICTIM and lock.is_symlink()
    lock.unlink()
    rows = run / "results" / "01_fail" / "points.jsonl"
    rows.unlink()
    rows.symlink_to(victim)
    r = resume(book, env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(rows) in r.stderr and "symbolic link" in r.stderr, r.stderr
    assert victim.read_bytes() == VICTIM
    assert not lock.exists() and not lock.is_symlink()          # the refused run's own lock is gone again


def test_the_lock_itself_refuses_a_link(tmp_path, victim):
    (tmp_path / runbook.LOCK_NAME).symlink_to(victim)
    with pytest.raises(runbook.RunbookError, match="symbolic link"):
        runbook.RunLock(tmp_path).acquire()
    assert victim.read_bytes() == VICTIM


@pytest.mark.parametrize("write", [
    lambda p: results.append_row(p, {"i": 1}),
    lambda p: results.read_rows(p),
    lambda p: results.save_json(p.parent, p.stem, {"i": 1}),
    lambda p: results.mark_partial(p.parent, "why"),
    lambda p: results.append_text(p).write("x"),
], ids=["append_row", "read_rows", "save_json", "mark_partial", "append_text"])
def test_each_run_file_writer_refuses_a_link_naming_it(tmp_path, victim, write):
    link = tmp_path / "partial.json"        # one name for all (mark_partial writes partial.json)
    link.symlink_to(victim)
    with pytest.raises(results.WriteError) as e:
        write(link)
    assert str(link) in str(e.value) and "symbolic link" in str(e.value)
    assert victim.read_bytes() == VICTIM and link.is_symlink()


def test_a_table_written_over_a_temporary_files_link_does_not_write_through_it(tmp_path, victim):
    (tmp_path / f".t.json.{os.getpid()}.tmp").symlink_to(victim)
    with pytest.raises(results.WriteError):
        results.save_json(tmp_path, "t", {"i": 1})
    assert victim.read_bytes() == VICTIM
