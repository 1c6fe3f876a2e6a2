"""Issue 47, item 7 (the drift warning is issue 46's): `--resume NAME` finds the run in --runs-dir before a folder
of that name here; a point that can never fit in its cell's time limit fails at once, naming the limit to set,
instead of first costing a run that ends "partial", rc 0; the first point's probe reads a cold server as a warm one.
(The load API's bounds are in tests/test_load_bounds.py.) Each fails on 1beba90."""
import sys
from pathlib import Path

import pytest

from helpers.book.manifest import run_dir_arg
from helpers.serving import client as cl, sweep
from helpers.serving.server import Server, ServerSpec, free_port

FIXTURES = Path(__file__).parent / "fixtures"


def test_resume_name_is_the_run_in_runs_dir_before_a_folder_here(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    here = tmp_path / "elsewhere"
    (here / "r1").mkdir(parents=True)
    monkeypatch.chdir(here)
    assert run_dir_arg("r1", runs, "--resume") == (runs / "r1").resolve()
    assert run_dir_arg("./r1", runs, "--resume") == (here / "r1").resolve()      # a path is a path
    (here / "only-here").mkdir()
    assert run_dir_arg("only-here", runs, "--resume") == (here / "only-here").resolve()


def _server(tmp_path, script, mode, env=None):
    port = free_port()
    spec = ServerSpec(argv=[sys.executable, str(FIXTURES / script), str(port), mode], port=port, name=mode,
                      env=env or {})
    return Server(spec, tmp_path / f"{mode}.log", startup_timeout_s=30, stop_grace_s=1)


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_point_that_can_never_fit_fails_at_once_naming_the_limit(tmp_path, monkeypatch):
    """A saturated server (one request at a time, 0.5 s each) and a 30-s cell: the 64-request point needs about
    30 s at least, more than the cell's whole limit less its margin (20 s). On 1beba90 the sweep measured the
    first point and ended partial (rc 0), and only a resumed run, measuring nothing, said the point could not fit."""
    monkeypatch.setenv(sweep.CELL_TIMEOUT_ENV, "30")
    sweep.start_cell_clock()
    with _server(tmp_path, "fault_server.py", "ok", {"FAULT_REPLY_DELAY_S": "0.5"}) as srv:
        with pytest.raises(sweep.SweepCannotProgress, match="more than the cell's whole time limit") as e:
            sweep.sweep(tmp_path / "rows.jsonl", srv.spec.base_url, "fake", [cl.Workload(4, 2)], [1, 64],
                        per_concurrency=1, timeout_s=60, progress=False)
    assert "execution_timeout" in str(e.value) and "point 4/2 x 64" in str(e.value)
    assert [r["concurrency"] for r in sweep.results.read_rows(tmp_path / "rows.jsonl")] == [1]   # kept


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_the_first_points_probe_reads_a_cold_server_as_a_warm_one(tmp_path, monkeypatch):
    """A server taking 0.3 s a request, its first 3 s more (kernels run for the first time): the probe's estimate
    on it stays within twice the estimate of the same server warm (1beba90's single probe counted the cold
    request: some 10 times the warm estimate)."""
    monkeypatch.delenv(sweep.CELL_TIMEOUT_ENV, raising=False)
    w = cl.Workload(4, 8)
    with _server(tmp_path, "hostile_server.py", "cold", {"HOSTILE_DELAY_S": "3", "HOSTILE_WARM_S": "0.3"}) as srv:
        cold, how = sweep.probe_point_s(srv.spec.base_url, "fake", w, 1, 4, budget_s=60, timeout_s=30)
        warm, _ = sweep.probe_point_s(srv.spec.base_url, "fake", w, 1, 4, budget_s=60, timeout_s=30)
    assert cold is not None and warm is not None and cold <= 2 * warm, (cold, warm, how)


def test_a_cell_clock_ends_with_the_limit_it_was_started_under(monkeypatch):
    """CI rehearsal at dfa3fc1: the test above left its 30-s cell clock running after its environment was put
    back, and a later sweep test in the same worker found '0 s of the cell's 30 s limit' left and ran no point.
    The clock belongs to the limit it was started under: unset or changed, the budget starts again."""
    monkeypatch.setenv(sweep.CELL_TIMEOUT_ENV, "30")
    assert sweep.start_cell_clock() == 30 and sweep.time_left() is not None
    monkeypatch.delenv(sweep.CELL_TIMEOUT_ENV)
    assert sweep.time_left() is None                           # no limit set: no budget, not the old one's end
    monkeypatch.setenv(sweep.CELL_TIMEOUT_ENV, "500")
    assert sweep.time_left() > 30                              # another limit: its own budget
