import os

# Keep tests offline and quiet: no hub access, no telemetry, a non-interactive matplotlib.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Under `make test` several worker processes (pytest-xdist) share the cores: one OpenMP thread per process and
# per process it starts (servers, ranks, kernels), where torch would start one per core in each and the threads
# spin-wait on one another. The whole suite on the 2-core machine: 1,062 s of CPU and 712 s wall with it, 1,291 s
# and 821 s without (fresh clones at 3eb6554+1). A single-process run (the GPU tier among them) keeps the default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# --------------------------------------------------------------------------- one execution of the book per target
# Executing the whole book takes tens of seconds, so each target runs at most once per session; the
# chapter tests (test_notebooks.py, test_chapter_values.py) share these runs.
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

# An xdist worker runs with SIGINT ignored, and an ignored signal stays ignored across fork and exec: every
# process a test started there would shrug off the Ctrl-C the interruption tests send. Give workers Python's own.
import signal as _signal  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)

from onceper import once_per_session  # noqa: E402


def run_book(target, tmp_path_factory, build):
    """Execute every chapter under `target` into a fresh run folder, once per test session: (process, manifest,
    run folder). With `build`, the site goes into the run folder's parent (<runs>/_build/html, beside the run),
    never into the repository's _build/, which belongs to the reader's own `make book`."""
    from helpers import repo_root

    def execute(runs):
        args = [sys.executable, "-m", "helpers.book.runbook", "--target", target, "--runs-dir", str(runs),
                "--run-id", target]
        args += ["--out-dir", str(runs)] if build else ["--no-build"]
        proc = subprocess.run(args, capture_output=True, text=True, cwd=repo_root(), timeout=1800)
        manifest = json.loads((runs / target / "manifest.json").read_text())
        return proc, manifest, runs / target

    return once_per_session(tmp_path_factory, f"runs-{target}", execute)


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory):
    return run_book("recorded", tmp_path_factory, build=False)


@pytest.fixture(scope="session")
def auto_run(tmp_path_factory):
    return run_book("auto", tmp_path_factory, build=True)


# --------------------------------------------------------------------------- each committed run built once
# The strict build of a committed run (runs/<id>, tracked by git) takes tens of seconds; test_committed_runs.py reads
# its status page and test_book_site.py checks it in the browser, so each run is built once per session into
# a folder of its own and shared. The tests read the site; the browser check adds screenshots beside it.
@pytest.fixture(scope="session")
def committed_site(tmp_path_factory):
    """committed_site(run_id): the html folder of runs/<run_id> built strictly (-W -n), once per session."""
    from helpers import repo_root
    from helpers.book import runbook

    def site(run_id):
        root = repo_root()
        return once_per_session(tmp_path_factory, f"site-{run_id}", lambda out: runbook.build(
            root / "runs" / run_id, root, strict=True, echo=lambda *a: None, out_dir=out).parent)
    return site


# --------------------------------------------------------------------------- several processes (`make test`)
# `make test` runs the suite in worker processes (pytest-xdist, `-n 4 --dist loadgroup`). A module-scoped
# fixture is made once per process that runs a test of its module, so a module that defines one (the
# cpu-demo run, the replay run, the fp8 tables) runs whole in one worker; the tests of every other module are
# handed out one by one, costliest first (tests/scheduler.py, through xdist's public scheduler hook and its
# scheduling protocol). An expensive session-wide result is made once for all workers (tests/onceper.py).
# A module whose module fixture is cheap next to its tests, or made once per session anyway, sets
# SPREAD_ACROSS_WORKERS = True and has its tests spread out. Without xdist this changes nothing.
import scheduler  # noqa: E402


def pytest_configure(config):
    import onceper

    onceper.IN_WORKER = hasattr(config, "workerinput")


def _default_timeout(config) -> float:
    return float(config.getini("timeout") or 600)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """In a worker of `--dist loadgroup`, the collection costliest first (scheduler.order_items): the order the
    scheduler hands it out in. A run in one process keeps pytest's order."""
    if hasattr(config, "workerinput") and config.workerinput.get("dist") == "loadgroup":
        scheduler.order_items(items, _default_timeout(config))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup: scheduler.CostliestFirst (a module with a module fixture as one unit, costliest first)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return scheduler.CostliestFirst(config, int(config.getoption("numprocesses")), log=log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """The dist mode travels to every worker (its collection is ordered for it)."""
    node.workerinput["dist"] = node.config.getvalue("dist")


# --------------------------------------------------------------------------- the scaled-down model, computed once
# The FP8 accuracy checks of the scaled-down GLM-5 (data/models/glm5-mini.yaml) build and run the decode step
# (seconds each): the files that read them (test_fp8.py, test_stepreport.py; integration tests) share one
# computation per session. The tables are read, never changed.
@pytest.fixture(scope="session")
def glm5_mini_fp8_check(tmp_path_factory):
    """step.fp8_check("glm5-mini", 4, 32): the FP8 step against fp32, and a wrong scale caught (once per
    session, for every worker)."""
    from helpers.model import step

    return once_per_session(tmp_path_factory, "glm5-mini-fp8-check", lambda _: step.fp8_check("glm5-mini", 4, 32))


@pytest.fixture(scope="session")
def glm5_mini_fp8_product_errors(tmp_path_factory):
    """step.fp8_product_errors("glm5-mini"): each FP8 product against fp32 and bf16 (once per session)."""
    from helpers.model import step

    return once_per_session(tmp_path_factory, "glm5-mini-fp8-products", lambda _: step.fp8_product_errors("glm5-mini"))


# --------------------------------------------------------------------------- the unit tier's rule, enforced
# The unit tier (`make test-fast`: every test marked neither integration, slow nor gpu) is deterministic,
# starts no process, builds or runs no model and does not sleep, so that the whole tier takes under a minute
# (CONTRIBUTING.md, "Tests"). While a unit test sets up, runs and tears down, the calls that would break the
# rule raise UnitTierError, and the test fails even where the code under test catches that error.
import os as _os  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

TIER_MARKERS = ("integration", "slow", "gpu")
UNIT_RULE = ("the unit tier (tests marked neither integration, slow nor gpu) starts no process, builds or runs no "
             "model and does not sleep (CONTRIBUTING.md, 'Tests'): mark the test @pytest.mark.integration, or "
             "test its logic without that")


class UnitTierError(RuntimeError):
    """A unit test did what only an integration test may do."""


def in_unit_tier(item) -> bool:
    return not any(item.get_closest_marker(m) for m in TIER_MARKERS)


_MODEL_CLASSES: dict = {}


def _model_classes():
    """The classes whose construction builds a model: torch's nn.Module (transformers' models, the tiny serving
    model) and the emulated decode step's weights (RankModel, in whichever helpers.model module holds it);
    looked up again only when a module was imported since."""
    if len(sys.modules) not in _MODEL_CLASSES:
        _MODEL_CLASSES.clear()
        _MODEL_CLASSES[len(sys.modules)] = _find_model_classes()
    return _MODEL_CLASSES[len(sys.modules)]


def _find_model_classes():
    out = []
    torch = sys.modules.get("torch")
    if torch is not None:
        out.append(torch.nn.Module)
    for name, mod in list(sys.modules.items()):
        cls = getattr(mod, "RankModel", None) if name.startswith("helpers.model") else None
        if isinstance(cls, type) and cls not in out:
            out.append(cls)
    return out


class UnitGuard:
    """For one test: the random generators seeded; what starts a process, builds a model or sleeps on the main
    thread raises UnitTierError naming the test and the rule, and is remembered in `seen`."""

    def __init__(self, nodeid: str):
        self.nodeid, self.seen, self._undo = nodeid, [], []

    def _refuse(self, what: str):
        def refuse(*args, **kwargs):
            msg = f"{self.nodeid} {what}; {UNIT_RULE}"
            self.seen.append(msg)
            raise UnitTierError(msg)
        return refuse

    def _swap(self, owner, attr: str, new) -> None:
        if hasattr(owner, attr):
            own = attr in vars(owner)
            self._undo.append((owner, attr, vars(owner)[attr] if own else None, own))
            setattr(owner, attr, new)

    def __enter__(self):
        import multiprocessing.process
        import random
        import subprocess as sp

        # deterministic: every phase starts from the same seeds (Python's, numpy's and torch's, where imported)
        random.seed(0)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed(0)
        if "torch" in sys.modules:
            sys.modules["torch"].manual_seed(0)

        self._swap(sp.Popen, "_execute_child", self._refuse("starts a process (subprocess)"))
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            self._swap(_os, name, self._refuse(f"starts a process (os.{name})"))
        self._swap(multiprocessing.process.BaseProcess, "start", self._refuse("starts a process (multiprocessing)"))
        for cls in _model_classes():
            self._swap(cls, "__init__", self._refuse(f"builds a model ({cls.__module__}.{cls.__qualname__})"))
        real_sleep, refuse_sleep = time.sleep, self._refuse("sleeps (time.sleep)")

        def sleep(seconds):
            if seconds and threading.current_thread() is threading.main_thread():
                refuse_sleep()
            return real_sleep(seconds)
        self._swap(time, "sleep", sleep)
        return self

    def __exit__(self, *exc) -> None:
        for owner, attr, old, own in reversed(self._undo):
            if own:
                setattr(owner, attr, old)
            else:
                delattr(owner, attr)
        self._undo = []


def _unit_phase(item):
    """Runs one phase of a test (setup, call, teardown) under UnitGuard where the test is in the unit tier."""
    if not in_unit_tier(item):
        return (yield)
    guard = UnitGuard(item.nodeid)
    with guard:
        try:
            result = yield
        except BaseException as exc:
            if guard.seen and not isinstance(exc, UnitTierError):
                raise UnitTierError(guard.seen[0]) from exc
            raise
    if guard.seen:
        raise UnitTierError(guard.seen[0])
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _unit_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _unit_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _unit_phase(item))


def pytest_terminal_summary(terminalreporter):
    """The session's cost beside pytest's own wall time: CPU seconds of this process and its children, and the
    load average, so that a time taken on a busy machine is read as such (the unit tier's budget is 60 s wall
    on a quiet 2-core machine)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    load = " ".join(f"{x:.2f}" for x in _os.getloadavg()) if hasattr(_os, "getloadavg") else "unknown"
    terminalreporter.write_line(f"cpu: {cpu:.1f} s (this process and its children); load average {load}")


# --------------------------------------------------------------------------- the GPU tier's rule
# A `gpu` test may skip only for missing hardware ("no GPU", "one GPU", "no FP8"); any other skip fails it
# (tests/gpu_tier_plugin.py; helpers.book.gputier records the tier in a run and publish checks it).
from gpu_tier_plugin import pytest_runtest_makereport  # noqa: E402,F401
