"""A bad input of any kind is refused before work starts, with one message that names the input, what is allowed
and the fix, or is honoured: none accepted wrongly, none ignored, none hangs (issue 23, acceptance).

A sweep of some 870 inputs across the classes of this and the last round's issues (every chapter parameter with
a wrong type, NaN, infinity, a negative, out-of-range, empty, huge or too-long value, on the command line and
one per parameter in a target file; model names; sizes whose combination explodes, the time a plan implies
included; values thousands of characters long; target files; -p syntax; --runs-dir; --chapters; --run-id;
--target; --resume and --render, and options that would have no effect), each run through the
runbook's own command line in this process (helpers.book.runbook.main) with the execution step replaced by a
recorder: no chapter is executed, no process started. A case is

- refused: main returned 2 (or argparse exited 2) before the recorder was reached, with a message holding every
  phrase the case names (the input, what is allowed, the fix);
- honoured: the recorder was reached and the plan it would run carries the value (checked per case);
- wrongly accepted (the recorder was reached for an input that must be refused), ignored (reached, value not in
  the plan), unclear (refused without the phrases), crashed (an exception other than the runbook's own), hung
  (over TIME_BOUND_S).

`pytest -s tests/test_bad_inputs.py` prints the table per class.
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


from helpers import chapters as chapter_modules, repo_root
from helpers.book import planning, precheck, runbook, targets
from helpers.core import params

ROOT = repo_root()
TIME_BOUND_S = 10
MAX_LINE = 1000   # a refusal's longest line (a long value is shown by a few items or characters and its size)
STEMS = [runbook.stem(d) for d in runbook.chapters(ROOT)]


@dataclass
class Case:
    cls: str                       # the class of input
    label: str
    argv: list[str]
    says: tuple[str, ...] = ()     # phrases a refusal must hold (case-insensitive)
    honour: Callable | None = None  # steps -> True where the plan carries the value (the case must be honoured)
    setup: Callable | None = None  # tmp_path -> extra argv (files made for the case)
    target: str | None = "auto"    # None: no --target (--resume and --render take none)


def _steps(target, only):
    return {st["stem"]: st for st in planning.plan(target, ROOT, only)}


# ---------------------------------------------------------------- chapter parameter values
def _bad_values(spec: params.Spec) -> list[tuple[str, str]]:
    """(label, YAML text) of values `spec` must refuse, chosen by the kind of value it describes."""
    d = spec.describe
    common = [("wrong type: a mapping", "{a: 1}"), ("null", "null")]
    if d.startswith(("an integer", "a finite number")):
        lo = d.split(">= ")[1].split(" ")[0] if ">= " in d else None
        out = [("wrong type: text", "abc"), ("NaN", ".nan"), ("infinity", ".inf"), ("minus infinity", "-.inf"),
               ("huge", "1.0e+300"), ("a list", "[1]"), ("a boolean", "true")]
        if lo is not None and float(lo) >= 0:
            out.append(("negative", "-1"))
        if d.startswith("an integer"):
            out.append(("not whole", "2.5"))
        return out + common
    if d.startswith("a list of"):
        item = "1" if "each an integer" in d or "each a finite" in d else "'a'"
        return [("empty list", "[]"), ("wrong type: a number", "5"), ("wrong type: text", "abc"),
                ("too long (65 items)", "[" + ",".join([item] * 65) + "]"), ("NaN item", "[.nan]"),
                ("negative item", "[-1]"), ("huge item", "[1.0e+300]")] + common
    if d.startswith("one of"):
        return [("unknown name", "nosuch"), ("empty", "''"), ("a list", "[auto]"), ("a number", "3")] + common
    if d.startswith("a model under"):
        return [("unknown model", "nosuch"), ("a path outside data/models", "../../targets/auto"),
                ("a path inside", "glm5/../glm5"), ("empty", "''"), ("a number", "5")] + common
    if d.startswith("a string"):
        return [("too long (5000 characters)", "a" * 5000), ("a number", "5"), ("a list", "[a]")]
    if d.startswith("True or False"):
        return [("text", "maybe"), ("a number", "2")] + common
    if "INPUT/OUTPUT" in d:
        return [("no slash", "'256-256'"), ("zero tokens", "'0/8'"), ("10^18 tokens", "'1000000000000000000/8'"),
                ("negative", "'-1/8'"), ("empty", "[]"), ("a number", "5")] + common
    return [("a number", "5"), ("empty list", "[]"), ("empty name", "['']"),
            ("too long (65 names)", "[" + ",".join(["a"] * 65) + "]")] + common


def parameter_cases() -> list[Case]:
    out = []
    for s in STEMS:
        specs = precheck.declared_specs(s) or {}
        for name, spec in specs.items():
            if name in planning.ALWAYS:
                continue
            for label, text in _bad_values(spec):
                out.append(Case("parameter value", f"{s}.{name}: {label}", ["-p", f"{s}.{name}={text}"],
                                (s, f"'{name}'", "expected", "fix")))
    return out


def target_value_cases() -> list[Case]:
    """Each chapter's parameters with one of their bad values given in a target file (`chapters: CHAPTER:`)."""
    out = []
    for s in STEMS:
        for name, spec in (precheck.declared_specs(s) or {}).items():
            if name in planning.ALWAYS:
                continue
            for label, text in _bad_values(spec)[:1]:
                body = f"description: x\nparameters: {{mode: auto}}\nchapters:\n  {s}:\n    {name}: {text}\n"
                out.append(Case("target file value", f"{s}.{name}: {label}", [], ("t.yaml", s, f"'{name}'",
                                                                                   "expected", "fix"),
                                setup=_target_file(body)))
    return out


# ---------------------------------------------------------------- sizes whose combination explodes
def _p(*items):
    return [a for it in items for a in ("-p", it)]


SIZE_CASES = [
    Case("sizes", "4096-entry concurrencies", _p("03_baselines_tuning.concurrencies=[" + ",".join(["1"] * 4096) + "]"),
         ("concurrencies", "(4096 items)", "a list of 1 to 64"), target="cpu-demo"),
    Case("sizes", "a workload of 10^18 tokens", _p("03_baselines_tuning.workloads=['1000000000000000000/8']"),
         ("workloads", "each side 1 to"), target="cpu-demo"),
    Case("sizes", "tiny model of 256 GiB", _p("03_baselines_tuning.tiny_hidden=8192", "03_baselines_tuning.tiny_layers=64",
                                             "03_baselines_tuning.tiny_experts=256",
                                             "03_baselines_tuning.tiny_moe_intermediate=16384"),
         ("tiny_hidden", "GiB", "estimated", "smaller"), target="cpu-demo"),
    Case("sizes", "cpu_contexts x cpu_batches of a TiB", _p("07_decode_step.cpu_contexts=[1000000]",
                                                           "07_decode_step.cpu_batches=[4096]"),
         ("cpu_contexts", "GiB", "estimated", "smaller cpu_batches")),
    Case("sizes", "a sweep of 12 million requests", _p("03_baselines_tuning.concurrencies=[4096,4096,4096]",
                                                      "03_baselines_tuning.requests_per_concurrency=1000"),
         ("12288000 requests", "fewer"), target="cpu-demo"),
    Case("sizes", "chapter 03 past its cell limit", _p("03_baselines_tuning.workloads=['64/4096','32/4096']",
                                                      "03_baselines_tuning.requests_per_concurrency=20"),
         ("03_baselines_tuning", "takes at least", "assumed", "cell limit of 900 s", "execution_timeout"),
         target="cpu-demo"),
    Case("sizes", "chapter 04 past its cell limit", _p("04_moe_runners.repeats=20", "04_moe_runners.workload='64/4096'"),
         ("04_moe_runners", "takes at least", "assumed", "cell limit of 900 s", "fewer runners"), target="cpu-demo"),
    Case("sizes", "07_decode_step CPU sweep past its cell limit",
         _p("07_decode_step.cpu_batches=[" + ",".join(str(i) for i in range(1, 65)) + "]",
            "07_decode_step.cpu_contexts=[" + ",".join(str(i) for i in range(1, 65)) + "]"),
         ("cpu_batches", "takes at least", "assumed", "cell limit", "fewer cpu_batches")),
    Case("sizes", "a 100,000-entry list (short message)", _p("06_vm_p2p.hostpath_world_sizes=[" + ",".join(["1"] * 100_000) + "]"),
         ("hostpath_world_sizes", "(100000 items)", "a list of 1 to")),
]


# ---------------------------------------------------------------- target files
def _target_file(text: str | bytes, name: str = "t.yaml"):
    def setup(tmp: Path) -> list[str]:
        p = tmp / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["--target", str(p)]
    return setup


def _dir_target(tmp: Path) -> list[str]:
    (tmp / "d.yaml").mkdir()
    return ["--target", str(tmp / "d.yaml")]


TARGET_CASES = [Case("target file", label, [], says, setup=_target_file(text)) for label, text, says in [
    ("duplicate chapter entry", "description: x\nchapters:\n  02_nan_crash: {mode: live}\n  02_nan_crash: {mode: recorded}\n",
     ("appears twice", "02_nan_crash", "line 3", "line 4", "keep one")),
    ("duplicate top-level key", "description: x\ndescription: y\n", ("appears twice", "description", "keep one")),
    ("duplicate parameter", "description: x\nparameters: {mode: auto, mode: recorded}\n", ("appears twice", "'mode'", "keep one")),
    ("oversized", "description: x\n# " + "y" * (targets.MAX_TARGET_BYTES + 10) + "\n", ("t.yaml", "at most 256 KiB")),
    ("unknown key", "description: x\nparameter: {mode: auto}\n", ("unknown key", "parameter")),
    ("a list", "- mode: auto\n", ("t.yaml", "mapping")),
    ("a scalar", "just text\n", ("t.yaml", "mapping")),
    ("empty file", "", ("t.yaml",)),
    ("null", "null\n", ("t.yaml",)),
    ("bad YAML", "description: x\nparameters: {mode: auto\n", ("t.yaml", "YAML")),
    ("binary", b"\x00\xff\xfe\x00garbage", ("t.yaml",)),
    ("no description", "parameters: {mode: auto}\n", ("description",)),
    ("parameters a list", "description: x\nparameters: [mode, auto]\n", ("parameters", "mapping")),
    ("chapters a list", "description: x\nchapters: [02_nan_crash]\n", ("chapters", "mapping")),
    ("chapter entry a list", "description: x\nchapters: {02_nan_crash: [1]}\n", ("02_nan_crash", "mapping")),
    ("unknown chapter", "description: x\nchapters: {99_nope: {mode: auto}}\n", ("99_nope", "chapters:")),
    ("unknown parameter of a chapter", "description: x\nchapters: {02_nan_crash: {nosuch: 1}}\n", ("nosuch", "02_nan_crash")),
    ("parameter of no chapter", "description: x\nparameters: {nosuch: 1}\n", ("nosuch", "no chapter")),
    ("bad value", "description: x\nparameters: {mode: fast}\n", ("'mode'", "expected", "fix")),
    ("execution_timeout 0", "description: x\nexecution_timeout: 0\n", ("execution_timeout",)),
    ("execution_timeout negative", "description: x\nexecution_timeout: -5\n", ("execution_timeout",)),
    ("execution_timeout NaN", "description: x\nexecution_timeout: .nan\n", ("execution_timeout",)),
    ("execution_timeout text", "description: x\nexecution_timeout: abc\n", ("execution_timeout",)),
    ("execution_timeout huge", "description: x\nexecution_timeout: 100000000000\n", ("execution_timeout",)),
    ("skip a string", "description: x\nskip: 06_vm_p2p\n", ("skip", "list")),
    ("skip an unknown chapter", "description: x\nskip: [99_nope]\n", ("99_nope",)),
    ("requires a list", "description: x\nrequires: [sglang]\n", ("requires",)),
]] + [
    Case("target file", "a directory", [], ("is a directory",), setup=_dir_target),
    Case("target file", "empty name", ["--target", ""], ("--target ''", "give a target name", "auto")),
    Case("target file", "unknown name", ["--target", "nope"], ("unknown target 'nope'", "auto")),
    Case("target file", "a path out of targets/", ["--target", "../../etc/passwd"], ("passwd",)),
    Case("target file", "a blank name", ["--target", "   "], ("--target",)),
]


# ---------------------------------------------------------------- -p syntax
P_CASES = [Case("-p syntax", f"-p {text!r}", [a for part in text.split(" -p ") for a in ("-p", part)], says)
           for text, says in [
    ("foo", ("foo", "NAME=VALUE")), ("=1", ("=1",)), ("", ("-p",)), (".mode=auto", (".mode",)),
    ("a.b.c=1", ("a.b.c",)), ("03_baselines_tuning.=1", ("03_baselines_tuning.",)),
    ("nosuch.mode=auto", ("nosuch",)), ("nosuch=1", ("nosuch",)), ("03_baselines_tuning.nosuch=1", ("nosuch",)),
    ("mode={a", ("mode",)), ("mode=[unclosed", ("mode",)), ("mode", ("mode", "NAME=VALUE")),
    ("mode=auto=x", ("mode",)), ("07_diagnosis.tolerance=", ("tolerance",)),
    ("run_dir=/tmp", ("'run_dir'", "set by the runbook", "remove it")),
    ("mode=auto -p mode=recorded", ("mode", "given twice", "give it once")),
    ("07_diagnosis.tolerance=0.3 -p 07_diagnosis.tolerance=0.5", ("07_diagnosis.tolerance", "given twice")),
]]


# ---------------------------------------------------------------- --runs-dir, --chapters, --run-id
def _runs_file(tmp: Path) -> list[str]:
    (tmp / "f").write_text("x")
    return ["--runs-dir", str(tmp / "f")]


def _runs_under_file(tmp: Path) -> list[str]:
    (tmp / "f").write_text("x")
    return ["--runs-dir", str(tmp / "f" / "runs")]


def _runs_read_only(tmp: Path) -> list[str]:
    (tmp / "ro").mkdir()
    os.chmod(tmp / "ro", 0o555)
    return ["--runs-dir", str(tmp / "ro")]


def _existing_run(tmp: Path) -> list[str]:
    (tmp / "runs" / "taken").mkdir(parents=True)
    return ["--run-id", "taken"]


RO_HONOURED = os.geteuid() == 0   # root writes a read-only folder: the input is honoured, not refused
CLI_CASES = [
    Case("--runs-dir", "a file", [], ("--runs-dir", "is a file", "give a folder"), setup=_runs_file),
    Case("--runs-dir", "under a file", [], ("--runs-dir", "which is a file"), setup=_runs_under_file),
    Case("--runs-dir", "read-only", [], ("--runs-dir", "cannot be written"), setup=_runs_read_only,
         honour=(lambda steps: True) if RO_HONOURED else None),
    Case("--runs-dir", "empty", ["--runs-dir", ""], ("--runs-dir",)),
    Case("--runs-dir", "in /proc", ["--runs-dir", "/proc/nope/runs"], ("--runs-dir",)),
] + [Case("--chapters", f"--chapters {text!r}", ["--chapters", text], says) for text, says in [
    ("nosuch", ("nosuch", "01_environment")), ("", ("--chapters", "names no chapter")), (",", ("names no chapter",)),
    ("01_environment,nosuch", ("nosuch",)), ("../x", ("../x",)), ("x" * 5000, ("xxxx",)),
    ("01_ENVIRONMENT", ("01_ENVIRONMENT",)), ("01_environment.ipynb", ("01_environment.ipynb",)),
]] + [Case("--run-id", f"--run-id {text[:20]!r}", ["--run-id", text], ("--run-id", "plain name")) for text in [
    "../x", "a/b", "", ".", "..", "latest", "x" * 300, "a b", "é", "a\nb", ".hidden",
]] + [
    Case("--run-id", "an existing run", [], ("already exists", "--resume"), setup=_existing_run),
    Case("--run-id", "an option-like id", ["--run-id", "-x"], ("--run-id",)),
]


# ---------------------------------------------------------------- --resume, --render and options without effect
def _folder(kind: str):
    def setup(tmp: Path) -> list[str]:
        run = tmp / "runs" / "r"
        run.mkdir(parents=True)
        if kind == "torn manifest":
            (run / "manifest.json").write_text('{"chapters": [')
        elif kind == "no plan":
            (run / "manifest.json").write_text('{"chapters": [], "status": "ok"}')
        elif kind == "a list":
            (run / "manifest.json").write_text("[1, 2]")
        return ["--resume", str(run)]
    return setup


def _file_run(tmp: Path) -> list[str]:
    (tmp / "f").write_text("x")
    return ["--resume", str(tmp / "f")]


RUN_CASES = [Case("--resume/--render", label, argv, says, target=None) for label, argv, says in [
    ("--resume of no run", ["--resume", "nosuch"], ("nosuch", "no such run")),
    ("--resume ''", ["--resume", ""], ("--resume ''", "is empty", "give a run folder")),
    ("--render ''", ["--render", ""], ("--render ''", "is empty", "give a run folder")),
    ("--out-dir ''", ["--target", "auto", "--out-dir", ""], ("--out-dir ''", "is empty")),
    ("--resume '../x'", ["--resume", "../x"], ("--resume",)),
    ("--resume with --target", ["--resume", "r", "--target", "auto"], ("--target", "cannot change")),
    ("--resume with -p", ["--resume", "r", "-p", "mode=auto"], ("-p", "cannot change")),
    ("--resume with --chapters", ["--resume", "r", "--chapters", "01_environment"], ("--chapters", "cannot change")),
    ("--resume with --run-id", ["--resume", "r", "--run-id", "x"], ("--run-id", "cannot change")),
    ("--render and --resume", ["--render", "r", "--resume", "r"], ("--render and --resume", "give one")),
    ("--render of no run", ["--render", "nosuch"], ("nosuch", "no such run")),
    ("--render with --target", ["--render", "r", "--target", "auto"], ("--target", "no effect")),
    ("--render with -p", ["--render", "r", "-p", "mode=auto"], ("-p", "no effect")),
    ("--render with --chapters", ["--render", "r", "--chapters", "01_environment"], ("--chapters", "no effect")),
    ("--render with --no-build", ["--render", "r", "--no-build"], ("--no-build", "no effect")),
    ("--out-dir with --no-build", ["--no-build", "--out-dir", "/tmp/x"], ("--out-dir", "no effect", "drop")),
    ("--no-strict with --no-build", ["--no-build", "--no-strict"], ("--no-strict", "no effect", "drop")),
]] + [Case("--resume/--render", f"--resume of a folder with {kind}", [], says, setup=_folder(kind), target=None)
      for kind, says in [("no manifest", ("manifest",)), ("torn manifest", ("manifest",)),
                         ("no plan", ("manifest.json", "not a valid run manifest")), ("a list", ("manifest",))]] + [
    Case("--resume/--render", "--resume of a file", [], ("--resume",), setup=_file_run, target=None),
]


LONG = "x" * 5000
LONG_CASES = [Case("long values", label, argv, says, target=target) for label, argv, says, target in [
    ("--target of 5000 characters", ["--target", LONG], ("unknown target", "(5002 characters)", "known targets"), None),
    ("--run-id of 5000 characters", ["--run-id", LONG], ("--run-id", "plain name", "(5002 characters)"), "auto"),
    ("--chapters of 5000 characters", ["--chapters", LONG], ("--chapters", "(5002 characters)"), "auto"),
    ("--resume of 5000 characters", ["--resume", LONG], ("--resume", "no such run"), None),
    ("--render of 5000 characters", ["--render", LONG], ("--render", "no such run"), None),
    ("--runs-dir of 5000 characters", ["--runs-dir", "/tmp/" + LONG], ("--runs-dir",), "auto"),
    ("-p name of 5000 characters", ["-p", LONG + "=1"], ("declared by no chapter",), "auto"),
    ("-p chapter of 5000 characters", ["-p", LONG + ".mode=auto"], ("(5002 characters)",), "auto"),
    ("-p value of a million characters", ["-p", "07_diagnosis.model=" + "x" * 1_000_000],
     ("'model'", "characters)", "glm5-mini"), "auto"),
    ("-p list of 100,000 names", ["-p", "03_baselines_tuning.variants=[" + ",".join(["a"] * 100_000) + "]"],
     ("'variants'", "(100000 items)"), "cpu-demo"),
]]


# ---------------------------------------------------------------- -p NAME (every chapter that declares it)
GLOBAL_CASES = [Case("parameter value", f"-p {text[:40]} (every chapter)", ["-p", text], says, target=target)
                for text, says, target in [
    ("startup_timeout_s=.inf", ("'startup_timeout_s' = inf", "expected", "fix"), "cpu-demo"),
    ("startup_timeout_s=0", ("'startup_timeout_s' = 0", "expected", "fix"), "cpu-demo"),
    ("mode=fast", ("'mode' = 'fast'", "expected one of", "fix"), "auto"),
    ("mode=live", ("07_diagnosis", "'mode' = 'live'", "expected one of"), "auto"),
    ("model=nosuch", ("'model' = 'nosuch'", "glm5-mini"), "auto"),
    ("concurrencies=[]", ("'concurrencies' = []", "a list of 1 to"), "cpu-demo"),
    ("tolerance=-0.5", ("'tolerance' = -0.5", ">= 0.01"), "auto"),
]]


# ---------------------------------------------------------------- inputs that must be honoured
def _has(stem, name, want):
    return lambda steps: steps[stem]["parameters"].get(name) == want


HONOURED = [
    Case("honoured", "-p over the target's chapter value", ["-p", "startup_timeout_s=30"],
         honour=_has("03_baselines_tuning", "startup_timeout_s", 30), target="cpu-demo"),
    Case("honoured", "-p CHAPTER.NAME over -p NAME", ["-p", "mode=recorded", "-p", "06_vm_p2p.mode=auto"],
         honour=lambda st: st["06_vm_p2p"]["parameters"]["mode"] == "auto"
         and st["01_environment"]["parameters"]["mode"] == "recorded"),
    Case("honoured", "the same -p twice", ["-p", "07_diagnosis.tolerance=0.3", "-p", "07_diagnosis.tolerance=0.3"],
         honour=_has("07_diagnosis", "tolerance", 0.3)),
    Case("honoured", "a known model", ["-p", "07_diagnosis.model=glm5-mini"], honour=_has("07_diagnosis", "model", "glm5-mini")),
    Case("honoured", "concurrencies at the edge", ["-p", "03_baselines_tuning.concurrencies=[1,64]"],
         honour=_has("03_baselines_tuning", "concurrencies", [1, 64]), target="cpu-demo"),
    Case("honoured", "--chapters narrows the run", ["--chapters", "01_environment"],
         honour=lambda st: [s for s, v in st.items() if not v["skip"]] == ["01_environment"]),
    Case("honoured", "tolerance at its bound", ["-p", "07_diagnosis.tolerance=1.0"],
         honour=_has("07_diagnosis", "tolerance", 1.0)),
    Case("honoured", "a longer cell limit lets a long sweep through", [],
         honour=_has("03_baselines_tuning", "requests_per_concurrency", 20),
         setup=_target_file("description: x\nexecution_timeout: 7200\nparameters: {mode: auto}\nchapters:\n"
                            "  03_baselines_tuning: {mode: live, engine: transformers, device: cpu, concurrencies: [1, 4, 16], "
                            "workloads: ['64/4096', '32/4096'], requests_per_concurrency: 20, variants: [batched]}\n")),
]


def all_cases() -> list[Case]:
    return parameter_cases() + target_value_cases() + GLOBAL_CASES + SIZE_CASES + LONG_CASES + TARGET_CASES + P_CASES + CLI_CASES + RUN_CASES + HONOURED


# ---------------------------------------------------------------- running one case
class _Hung(Exception):
    pass


def attempt(case: Case, tmp: Path, monkeypatch) -> tuple[str, str, float]:
    """(outcome, message, seconds) of one case through runbook.main, nothing executed."""
    reached: dict = {}

    def recorder(args, target, run_dir, root, only, manifest, out_dir):
        reached.update(target=target, only=only)
        return 0

    monkeypatch.setattr(runbook, "_execute_and_build", recorder)
    extra = case.setup(tmp) if case.setup else []
    argv = ["--runs-dir", str(tmp / "runs"), *case.argv, *extra]
    if case.target is not None:
        argv = ["--no-build", "--target", case.target, *argv]
    err = io.StringIO()

    def alarm(*_):
        raise _Hung

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(TIME_BOUND_S)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = runbook.main(argv)
    except SystemExit as e:      # argparse
        rc = e.code
    except _Hung:
        return "hung", "", time.perf_counter() - t0
    except Exception as e:       # noqa: BLE001 - a raw traceback is an outcome of its own
        return "crashed", f"{type(e).__name__}: {e}", time.perf_counter() - t0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chmod(tmp, 0o755)
        for p in tmp.iterdir():
            if p.is_dir():
                os.chmod(p, 0o755)
    seconds, msg = time.perf_counter() - t0, err.getvalue()
    if reached:
        if case.honour is None:
            return "wrongly accepted", msg, seconds
        ok = case.honour(_steps(reached["target"], reached["only"]))
        return ("honoured" if ok else "ignored"), msg, seconds
    if case.honour is not None:
        return "refused an input to honour", msg, seconds
    if rc != 2:
        return f"exit {rc}", msg, seconds
    if max(len(line) for line in msg.splitlines() or [""]) > MAX_LINE:
        return "unclear (a line over MAX_LINE characters)", msg, seconds
    low = msg.lower()
    missing = [s for s in case.says if s.lower() not in low]
    return ("unclear" if missing else "refused"), msg, seconds


CASES = all_cases()
COLUMNS = ["refused", "honoured", "wrongly accepted", "ignored", "hung"]


def table(results: list[tuple[Case, str, str, float]]) -> str:
    """The sweep's outcomes per class of input."""
    classes = Counter(c.cls for c, *_ in results)
    lines = [f"{'class':<18}{'cases':>6}" + "".join(f"{c:>17}" for c in COLUMNS) + f"{'other':>7}"]
    for cls, n in classes.items():
        got = Counter(o for c, o, _m, _s in results if c.cls == cls)
        other = sum(v for k, v in got.items() if k not in COLUMNS)
        lines.append(f"{cls:<18}{n:>6}" + "".join(f"{got.get(c, 0):>17}" for c in COLUMNS) + f"{other:>7}")
    got = Counter(o for _c, o, _m, _s in results)
    lines.append(f"{'all':<18}{len(results):>6}" + "".join(f"{got.get(c, 0):>17}" for c in COLUMNS)
                 + f"{sum(v for k, v in got.items() if k not in COLUMNS):>7}")
    lines.append(f"slowest case {max(s for *_x, s in results):.2f} s (bound {TIME_BOUND_S} s)")
    return "\n".join(lines)


def test_every_bad_input_is_refused_clearly_or_honoured(tmp_path, monkeypatch):
    """The whole sweep (one test: some 870 cases in seconds); its table is printed (pytest -s shows it)."""
    results = []
    for i, case in enumerate(CASES):
        (tmp_path / f"c{i}").mkdir()
        outcome, msg, seconds = attempt(case, tmp_path / f"c{i}", monkeypatch)
        results.append((case, outcome, msg, seconds))
    print("\n" + table(results))
    bad = [f"{c.cls}: {c.label}: {o} ({s:.1f} s): {m[:300]!r}" for c, o, m, s in results
           if o not in ("refused", "honoured") or s >= TIME_BOUND_S]
    assert not bad, "\n".join(bad)


def test_the_sweep_covers_every_class():
    assert len(CASES) >= 200
    assert set(Counter(c.cls for c in CASES)) >= {"parameter value", "sizes", "target file", "-p syntax", "--runs-dir",
                                                 "--chapters", "--run-id", "--resume/--render", "long values", "target file value",
                                                 "honoured"}
    assert sum(c.honour is None for c in CASES) >= 200


def test_every_chapter_with_parameters_is_in_the_sweep():
    with_params = {s for s in STEMS if precheck.declared_specs(s)}
    swept = {c.label.split(".")[0] for c in CASES if c.cls == "parameter value"}
    assert with_params and with_params <= swept
    assert all(chapter_modules.MODULES.get(s) for s in with_params)
