"""Every bad target, argument and parameter value is refused before the first chapter starts, with one clear
message each (naming the file, the chapter, the parameter, the value and what is allowed)."""
import json
import os
import subprocess
import sys

import pytest

from helpers import repo_root
from helpers.book import precheck, runbook

ROOT = repo_root()
CHAPTERS = [runbook.stem(d) for d in runbook.chapters(ROOT)]


def target_file(tmp_path, text: str, name: str = "t.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# ---------------------------------------------------------------- the target file
@pytest.mark.parametrize("text,says", [
    ("description: x\nparameters: {mode: auto\n", r"t.yaml: not valid YAML at line \d+"),
    ("- mode: auto\n- x\n", "t.yaml: a target is a mapping .* top level is a list"),
    ("description: x\nparameters: [mode, auto]\n", "t.yaml: `parameters` must be a mapping NAME: VALUE"),
    ("description: x\nchapters: [02_nan_crash]\n", "t.yaml: `chapters` must be a mapping CHAPTER"),
    ("description: x\nchapters: {02_nan_crash: [1]}\n", r"t.yaml: `chapters: 02_nan_crash:` must be a mapping"),
    ("description: x\nexecution_timeout: abc\n", "t.yaml: `execution_timeout` must be a whole number .* got 'abc'"),
    ("description: x\nexecution_timeout: 0\n", "0 would remove the time limit"),
    ("description: x\nexecution_timeout: .nan\n", "`execution_timeout` must be a whole number"),
    ("description: x\nskip: 06_vm_p2p\n", "`skip` must be a list of chapter stems.*read letter by letter"),
    ("parameters: {mode: auto}\n", "needs a `description`"),
    ("description: x\nparameter: {mode: auto}\n", r"unknown key\(s\) \['parameter'\]"),
])
def test_a_malformed_target_is_refused_naming_the_file(tmp_path, text, says):
    with pytest.raises(runbook.RunbookError, match=says):
        runbook.load_target(target_file(tmp_path, text), ROOT)


def test_a_target_that_is_a_directory_or_missing_is_refused(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(runbook.RunbookError, match="is a directory; a target is a YAML file"):
        runbook.load_target(str(tmp_path / "dir.yaml"), ROOT)
    with pytest.raises(runbook.RunbookError, match="unknown target 'nope'; known targets: .*auto"):
        runbook.load_target("nope", ROOT)


def test_several_problems_in_one_target_are_each_named(tmp_path):
    with pytest.raises(runbook.RunbookError) as e:
        runbook.load_target(target_file(tmp_path, "description: x\nskip: abc\nexecution_timeout: 0\n"), ROOT)
    lines = str(e.value).splitlines()
    assert len(lines) == 2 and all(line.startswith(str(tmp_path / "t.yaml")) for line in lines)


# ---------------------------------------------------------------- parameter values, before the run
@pytest.mark.parametrize("params,says", [
    ({"02_nan_crash": {"startup_timeout_s": float("nan")}},
     r"parameter 'startup_timeout_s' = nan is not allowed: expected a finite number >= 1"),
    ({"07_diagnosis": {"tolerance": float("nan")}}, r"07_diagnosis: parameter 'tolerance' = nan"),
    ({"06_vm_p2p": {"worker_timeout_s": float("inf")}}, r"parameter 'worker_timeout_s' = inf is not allowed"),
    ({"03_baselines_tuning": {"concurrencies": [1, 0]}}, r"parameter 'concurrencies' = \[1, 0\]"),
    ({"03_baselines_tuning": {"workloads": ["256-256"]}}, r"parameter 'workloads' = \['256-256'\]"),
    ({"06_vm_p2p": {"sweep": "huge"}}, r"parameter 'sweep' = 'huge' is not allowed: expected one of 'quick', 'full'"),
    ({"02_nan_crash": {"tp_size": 2.5}}, r"parameter 'tp_size' = 2.5 is not allowed: expected an integer"),
])
def test_bad_values_in_a_target_are_refused_before_the_run(tmp_path, params, says):
    import yaml

    text = yaml.safe_dump({"description": "x", "chapters": params})     # NaN and infinity as .nan and .inf
    t = runbook.load_target(target_file(tmp_path, text), ROOT)
    with pytest.raises(runbook.RunbookError, match=str(tmp_path / "t.yaml") + ": chapter .*" + says):
        runbook.plan(t, ROOT)


def test_every_bad_value_gets_its_own_message_with_its_origin(tmp_path):
    t = runbook.load_target(target_file(tmp_path, "description: x\nparameters: {mode: fast}\n"
                                                  "chapters: {07_diagnosis: {tolerance: 5}}\n"), ROOT)
    runbook.apply_overrides(t, ["06_vm_p2p.worker_timeout_s=.nan", "02_nan_crash.decode_tokens=0"])
    with pytest.raises(runbook.RunbookError) as e:
        runbook.plan(t, ROOT)
    lines = str(e.value).splitlines()
    assert any("t.yaml: chapter 07_diagnosis: parameter 'tolerance' = 5" in x for x in lines)
    assert any("the command line (-p 06_vm_p2p.worker_timeout_s=.nan): chapter 06_vm_p2p: parameter "
               "'worker_timeout_s' = nan" in x for x in lines)
    assert any("(-p 02_nan_crash.decode_tokens=0): chapter 02_nan_crash: parameter 'decode_tokens' = 0" in x
               for x in lines)
    modes = [x for x in lines if "parameter 'mode' = 'fast'" in x]
    assert len(modes) == len(CHAPTERS)        # one per chapter that would receive it, each with what it allows
    assert all("t.yaml: chapter" in x and "expected one of" in x for x in modes)


def test_unknown_and_malformed_command_line_parameters_are_errors(tmp_path):
    t = runbook.load_target("recorded", ROOT)
    runbook.apply_overrides(t, ["06_vm_p2p.sizes=[1]"])
    with pytest.raises(runbook.RunbookError, match=r"\(-p 06_vm_p2p.sizes=\[1\]\): chapter 06_vm_p2p does not "
                                                   r"declare parameter 'sizes'; it declares: mode, run_dir"):
        runbook.plan(t, ROOT)
    for bad in ("=3", "x", ".x=1", "a.=1"):
        with pytest.raises(runbook.RunbookError, match="expected NAME=VALUE or CHAPTER.NAME=VALUE"):
            runbook.apply_overrides(runbook.load_target("recorded", ROOT), [bad])
    t = runbook.load_target("recorded", ROOT)
    runbook.apply_overrides(t, ["nosuchparam=1"])
    with pytest.raises(runbook.RunbookError, match=r"\(-p nosuchparam=1\): parameter 'nosuchparam' is declared by no"):
        runbook.plan(t, ROOT)


def test_every_chapter_checks_can_be_read_from_its_notebook():
    for doc in runbook.chapters(ROOT):
        c = precheck.chapter_checks(ROOT / f"{doc}.ipynb")
        assert set(c.defaults) == set(c.specs), doc      # every declared parameter is validated
        assert precheck.problems(runbook.stem(doc), ROOT / f"{doc}.ipynb", dict(c.defaults), {}) == [], doc


def test_shipped_targets_pass_the_checks():
    for name in runbook.known_targets(ROOT):
        try:
            runbook.plan(runbook.load_target(name, ROOT), ROOT)
        except runbook.RunbookError as e:   # only what this machine lacks (a checkpoint, sglang) may refuse one
            assert "cannot run here" in str(e) and "is not allowed" not in str(e), (name, str(e))


# ---------------------------------------------------------------- arguments
@pytest.mark.parametrize("text", ["", ",", " , ,"])
def test_an_empty_chapter_selection_is_refused(text):
    with pytest.raises(runbook.RunbookError, match="names no chapter; give comma-separated chapter stems"):
        runbook.parse_chapters(text, ROOT)
    assert runbook.parse_chapters(None, ROOT) is None
    assert runbook.parse_chapters("01_environment, 01_environment", ROOT) == ["01_environment"]


@pytest.mark.parametrize("run_id", ["../x", "latest", "a/b", "", ".hidden", "x" * 200, "a b", "..", "ok..no"])
def test_run_ids_are_plain_names(run_id):
    with pytest.raises(runbook.RunbookError, match="a run id is a plain name"):
        runbook.check_run_id(run_id)


def test_good_run_ids_pass():
    for rid in ("20261201-h200-mine", "r1", "a.b_c-d"):
        assert runbook.check_run_id(rid) == rid


@pytest.mark.parametrize("content,says", [
    ("{not json", "not a readable run manifest"),
    ("[]", "the top level is a list"),
    ('{"run_id": "x", "target": "t", "chapters": [{"stem": "a", "docname": "a", "status": "weird"}]}',
     "status 'weird' is not one of"),
    ('{"run_id": "x", "target": "t"}', "`chapters` should be a list"),
    ("", "not a readable run manifest"),
])
def test_a_corrupt_manifest_is_refused_naming_the_file(tmp_path, content, says):
    (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(runbook.RunbookError, match=f"{tmp_path / 'manifest.json'}: .*{says}"):
        runbook.read_manifest(tmp_path)


def test_the_manifest_is_written_atomically(tmp_path):
    runbook.write_manifest(tmp_path, {"a": 1})
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]    # no temporary file left


# ---------------------------------------------------------------- the command line, end to end
def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "helpers.book.runbook", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "BOOK_ROOT": str(ROOT)})


@pytest.mark.integration
@pytest.mark.parametrize("args,says", [
    (["--chapters", ""], "--chapters '' names no chapter"),
    (["--chapters", ","], "--chapters ',' names no chapter"),
    (["--run-id", "../x"], "--run-id '../x': a run id is a plain name"),
    (["--run-id", "latest"], "--run-id 'latest': a run id is a plain name"),
    (["--target", "recorded", "-p", "07_diagnosis.tolerance=.nan"], "parameter 'tolerance' = nan is not allowed"),
    (["--resume", "runs/h200-20261202f", "-p", "mode=auto"], "--resume continues a run with the plan"),
    (["--render", "runs/no-such-run"], "no such run folder"),
])
def test_the_command_line_refuses_with_one_message_and_creates_nothing(tmp_path, args, says):
    r = _cli(*args, "--runs-dir", str(tmp_path / "runs"), *([] if "--render" in args else ["--no-build"]))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and says in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_render_refuses_a_corrupt_manifest(tmp_path):
    run = tmp_path / "runs" / "broken"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text('{"run_id": "broken", "chapt')
    r = _cli("--render", str(run))
    assert r.returncode == 2 and "manifest.json: not a readable run manifest" in r.stderr and "Traceback" not in r.stderr
