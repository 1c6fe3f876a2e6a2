"""helpers.model.stepstudy, the one block both decode-step device scripts run after their sweeps: packing
the raw sweeps that committed studies kept (data/measured/<study>/raw/, as the H200 wrote them) gives back
those studies' merged files and README drafts."""
import json
import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from helpers import repo_root
from helpers.model import stepstudy

ROOT = repo_root()
MEASURED = ROOT / "data" / "measured"


def _date(study: str) -> str:
    return re.search(r"\((\d{4}-\d\d-\d\d)\)", (MEASURED / study / "README.md").read_text()).group(1)


def _same_study(study: str, out) -> None:
    """`out`, packed from `study`'s raw sweeps, holds what the committed study holds (a study packed before
    the fused path existed has no `fusion` column: merge_sweeps adds it as "unfused")."""
    d = MEASURED / study
    for f in ("timings.csv", "bytes.csv"):       # equal up to the last digit a CSV round trip moves
        got, committed = pd.read_csv(out / f), pd.read_csv(d / f)
        if "fusion" in set(got.columns) - set(committed.columns):
            assert set(got.pop("fusion")) == {"unfused"}
        pd.testing.assert_frame_equal(got, committed, check_exact=False, rtol=1e-12)
    assert json.loads((out / "meta.json").read_text()) == json.loads((d / "meta.json").read_text())
    assert (d / "README.md").read_text().startswith((out / "README.md").read_text())   # the draft, then notes
    assert sorted(p.relative_to(out / "raw") for p in (out / "raw").rglob("*")) == sorted(
        p.relative_to(d / "raw") for p in (d / "raw").rglob("*"))


@pytest.mark.integration
def test_the_entry_the_fused_script_runs_packs_a_committed_study_as_it_was_packed(tmp_path):
    study = "step-fused-h200-20261202c"
    d = MEASURED / study
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "helpers.model.stepstudy", "fused", "--study", study, "--out",
                        str(tmp_path), "--work", str(d / "raw"), "--commit", (d / "COMMIT").read_text().strip(),
                        "--date", _date(study)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    _same_study(study, tmp_path)
    assert "kernels per step" in r.stdout and "missing sweeps: []" in r.stdout
    reg = yaml.safe_load((tmp_path / "register.yaml").read_text())
    assert reg[study]["role"] == "decode-step-fused" and reg[study]["commit"] == (d / "COMMIT").read_text().strip()
    assert set(pd.read_csv(tmp_path / "timings.csv")["source"]) == {study}


def test_the_fp8_kind_packs_its_committed_study_and_prints_its_figures(tmp_path, capsys):
    study = "step-fp8-h200-20261201"
    d = MEASURED / study
    assert stepstudy.main(["fp8", "--study", study, "--out", str(tmp_path), "--work", str(d / "raw"),
                           "--commit", (d / "COMMIT").read_text().strip(), "--date", _date(study)]) == 0
    _same_study(study, tmp_path)
    out = capsys.readouterr().out
    assert "bf16 2 streams" in out and "fp8 1 stream" in out and "GiB read per step" in out


def test_a_missing_sweep_is_named_and_no_sweep_writes_nothing(tmp_path, capsys):
    raw = MEASURED / "step-fused-h200-20261202c" / "raw"
    work = tmp_path / "work"
    shutil.copytree(raw / "fused-fp8", work / "fused-fp8")
    res = stepstudy.pack("fused", "s", tmp_path / "one", work, "abc", "2099-01-01")
    assert res.meta["missing"] == ["fused-bf16", "unfused-bf16", "unfused-fp8"]
    assert "`unfused-bf16`: no timings (bench-unfused-bf16.log says why)" in (tmp_path / "one" / "README.md").read_text()
    assert "missing sweeps: ['fused-bf16', 'unfused-bf16', 'unfused-fp8']" in stepstudy.figures(
        stepstudy.KINDS["fused"], res)
    (tmp_path / "empty").mkdir()
    assert stepstudy.pack("fused", "s", tmp_path / "none", tmp_path / "empty", "abc", "2099-01-01") is None
    assert "wrote timings.csv" in capsys.readouterr().out and not (tmp_path / "none" / "timings.csv").exists()


def test_bad_input_is_refused_naming_it(tmp_path, capsys):
    assert stepstudy.main(["fp8", "--study", "s", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "nope"),
                           "--commit", "abc"]) == 2
    assert f"--work {tmp_path / 'nope'}: no such folder" in capsys.readouterr().err
    with pytest.raises(ValueError, match="study kind 'fp9'"):
        stepstudy.pack("fp9", "s", tmp_path, tmp_path, "abc", "2099-01-01")


@pytest.mark.parametrize("kind", sorted(stepstudy.KINDS))
def test_each_device_script_calls_the_module_instead_of_its_own_copy(kind):
    text = (ROOT / stepstudy.KINDS[kind].script).read_text()
    assert f"python3 -m helpers.model.stepstudy {kind} " in text
    assert "python3 - <<" not in text and "merge_sweeps({" not in text
