"""The cpu-demo target's serving chapters (02, 03, 04) end to end: each chapter launches real `transformers serve`
processes against tiny models built at run time. Each chapter runs alone, in a run folder of its own, from the
test module that checks it (tests/test_cpu_demo_*.py): a module keeps together in one worker under `make test`
(tests/conftest.py), so the three chapters, minutes each on 2 cores, run in parallel workers instead of one
after another in one."""
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import repo_root

ROOT = repo_root()

#: lighter than the target through the runbook's own -p, and enough for every assertion of the modules: chapter
#: 03's sweep at concurrencies 1 and 2, still a batch (its load study's harness check has concurrencies of its own;
#: unbatched at 16 sent 80 requests one after another, minutes of a loaded 2-core machine; at 4, 20 of the 25
#: requests of each workload and variant); chapter 04 with two repeats (the spread
#: needs two) of two runners (a comparison needs two; each runner's servers were about 29 s of CPU of the module's 86),
#: each swept at concurrencies 1 and 2 (still a batch; the target's 8 sent 40 of the 45 requests of every repeat)
LIGHTER = {"03_baselines_tuning": ["-p", "03_baselines_tuning.concurrencies=[1,2]"],
           "04_moe_runners": ["-p", "04_moe_runners.repeats=2", "-p", "04_moe_runners.runners=[eager,grouped_mm]",
                              "-p", "04_moe_runners.concurrencies=[1,2]"]}


def run_chapter(tmp_path_factory, stem: str):
    """Chapter `stem` of the cpu-demo target, alone, in a fresh run folder: (process, manifest, run folder).
    The servers' models go into <runs>/models, so that a test can find a server left running by its command
    line."""
    runs = tmp_path_factory.mktemp(f"runs-demo-{stem}")
    proc = subprocess.run(
        [sys.executable, "-m", "helpers.book.runbook", "--target", "cpu-demo", "--runs-dir", str(runs),
         "--run-id", "demo", "--chapters", stem, "--no-build", *LIGHTER.get(stem, [])],
        capture_output=True, text=True, cwd=ROOT, timeout=1800,
        env={**os.environ, "BOOK_MODEL_CACHE": str(runs / "models")})
    run = runs / "demo"
    return proc, json.loads((run / "manifest.json").read_text()), run


def assert_ran(demo, stem: str) -> None:
    """The chapter ran to the end: its status ok (else its error named) and the runbook's exit status 0."""
    proc, manifest, _ = demo
    status = {c["stem"]: c for c in manifest["chapters"]}
    err = status[stem].get("error") or {}
    assert status[stem]["status"] == "ok", f"{stem}: {err.get('ename')}: {err.get('evalue')}\n{proc.stdout[-2000:]}"
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def left_running(run: Path) -> list[str]:
    """The processes whose command line names this run's model folder (every demo server's does)."""
    models = str(run.parent / "models")
    alive = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if models in cmd:
                alive.append(f"{proc.name}: {cmd[:200]}")
    return alive
