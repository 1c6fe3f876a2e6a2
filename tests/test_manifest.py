"""helpers.book.manifest.Manifest: the run manifest's one typed shape, loaded and saved in one place."""
import json
import shutil
import subprocess

import pytest

from helpers import repo_root
from helpers.book.manifest import Manifest, read_manifest
from helpers.book.targets import RunbookError

ROOT = repo_root()
# the runs committed to the repository (git ls-files), not run folders a test or a reader's `make book` leaves
# beside them: the readers' test collects this suite before and after `make book` and needs the same ids
_TRACKED = subprocess.run(["git", "ls-files", "runs/*/manifest.json"], cwd=ROOT, capture_output=True, text=True).stdout
COMMITTED = sorted((ROOT / f).parent for f in _TRACKED.split()) or sorted(
    p.parent for p in (ROOT / "runs").glob("*/manifest.json") if not p.parent.is_symlink())


@pytest.mark.parametrize("run", COMMITTED, ids=lambda p: p.name)
def test_a_committed_runs_manifest_loads_typed_and_saves_back_unchanged(run, tmp_path):
    raw = json.loads((run / "manifest.json").read_text())
    m = Manifest.load(run)
    assert (m.run_id, m.target, m.status, len(m.chapters)) == (raw["run_id"], raw["target"], raw["status"],
                                                             len(raw["chapters"]))
    m.save(tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text()) == raw == read_manifest(run)


def _refused(tmp_path, edit) -> str:
    raw = json.loads((COMMITTED[0] / "manifest.json").read_text())
    edit(raw)
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(RunbookError) as e:
        Manifest.load(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'manifest.json'}: not a valid run manifest")
    return str(e.value)


def test_an_unknown_key_is_refused_naming_the_file_and_the_known_keys(tmp_path):
    said = _refused(tmp_path, lambda m: m.update(chapter_count=9))
    assert "unknown key `chapter_count`" in said and "run_id, target, chapters" in said


def test_a_missing_required_key_or_a_wrong_type_is_refused(tmp_path):
    assert "`target` should be a str, got nothing (the key is missing)" in _refused(tmp_path, lambda m: m.pop("target"))
    assert "`hardware` should be a dict, got 'H200'" in _refused(tmp_path, lambda m: m.update(hardware="H200"))
    assert "`duration_s` should be a float, got '3 min'" in _refused(tmp_path, lambda m: m.update(duration_s="3 min"))


def test_an_older_run_without_the_later_keys_still_loads_and_keeps_its_shape(tmp_path):
    raw = json.loads((COMMITTED[0] / "manifest.json").read_text())
    for k in ("environment", "plan", "sessions", "session_duration_s", "replayed", "gpu_tier"):
        raw.pop(k, None)
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    m = Manifest.load(tmp_path)
    assert m.plan is None and m.sessions is None and m.to_dict() == raw
