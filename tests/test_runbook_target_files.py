"""Target files that YAML would read wrongly or slowly are refused before anything runs, with one line naming
the file (issue 23, item 6): a key given twice (naming both lines), a file too large to be a target, an empty
target name. Real runbook processes over a throw-away book."""
import os
import subprocess
import sys
import time

import pytest

import minibook
from helpers.book import runbook

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture()
def book(tmp_path):
    return minibook.book(tmp_path / "book", {"01_first": ("glue('answer', 1.0, display=False)\n", "First")})


def rb(book, *args):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", *args, "--run-id", "r", "--no-build"],
                       cwd=book, env={**os.environ, "BOOK_ROOT": str(book)}, capture_output=True, text=True,
                       timeout=240)
    return r, time.monotonic() - t0


@pytest.mark.parametrize("text,key,lines", [
    ("description: x\nparameters: {mode: auto}\nchapters:\n  01_first: {mode: auto}\n  01_first: {mode: recorded}\n",
     "01_first", (4, 5)),
    ("description: x\nparameters:\n  mode: recorded\n  mode: auto\n", "mode", (3, 4)),
    ("description: x\ndescription: y\n", "description", (1, 2)),
])
def test_a_key_given_twice_is_refused_naming_both_lines(book, text, key, lines):
    (book / "targets" / "dup.yaml").write_text(text)
    r, _ = rb(book, "--target", "dup")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"the key {key!r} appears twice, at line {lines[0]} and at line {lines[1]}" in r.stderr
    assert "dup.yaml" in r.stderr and not (book / "runs" / "r").exists()


def test_a_duplicate_key_in_a_command_line_value_is_refused(book):
    r, _ = rb(book, "--target", "quick", "-p", "mode={a: 1, a: 2}")
    assert r.returncode == 2 and "appears twice" in r.stderr and "-p 'mode={a: 1, a: 2}'" in r.stderr


def test_a_target_too_large_is_refused_unread_and_at_once(book):
    big = book / "targets" / "big.yaml"
    with big.open("w") as f:
        f.write("description: " + "x" * 2_000_000 + "\n")
    r, took = rb(book, "--target", "big")
    assert r.returncode == 2 and "too large for a target" in r.stderr and "big.yaml" in r.stderr, r.stderr
    assert len(r.stderr) < 500 and not (book / "runs" / "r").exists()


def test_an_empty_target_name_is_refused_not_run_as_auto(book):
    r, _ = rb(book, "--target", "")
    assert r.returncode == 2 and "--target ''" in r.stderr and "give a target name" in r.stderr, r.stderr
    assert not (book / "runs" / "r").exists()
