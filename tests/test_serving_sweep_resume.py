"""The serving sweep's resume against real local servers (tests/fixtures/fault_server.py): points made under
other settings are never mixed in, a point whose requests all failed is measured again, and a server that
stops answering is not asked for the rest of its points."""
import sys
from pathlib import Path

import pytest

from helpers.core import results
from helpers.serving import client as cl, live, sweep
from helpers.serving.server import Server, ServerSpec, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")
WL = [cl.Workload(4, 2)]


def server(tmp_path, mode):
    port = free_port()
    return Server(ServerSpec(argv=[sys.executable, FAULT, str(port), mode], port=port, name=mode),
                  tmp_path / f"{mode}-{port}.log", startup_timeout_s=30, stop_grace_s=1)


def test_points_under_other_settings_are_not_mixed_in(tmp_path):
    rows = tmp_path / "sweep.jsonl"
    with server(tmp_path, "ok") as srv:
        args = dict(base_url=srv.spec.base_url, model="fake", workloads=WL, concurrencies=[1, 2],
                    labels={"variant": "a"}, progress=False, timeout_s=10)
        one = sweep.sweep(rows, per_concurrency=1, **args)
        twenty = sweep.sweep(rows, per_concurrency=3, **args)
        again = []
        sweep.sweep(rows, per_concurrency=3, on_point=again.append, **args)
    assert list(one.num_requests) == [1, 2] and list(twenty.num_requests) == [3, 6]
    assert again == []                                                  # resumed: nothing to do
    assert len(results.read_rows(rows)) == 4                            # both kept on disk, never mixed
    latest = sweep.rows_frame(rows, {"variant": "a"})
    assert list(latest.num_requests) == [3, 6] and latest.settings_id.nunique() == 1


def test_a_point_whose_requests_all_failed_is_measured_again(tmp_path):
    rows = tmp_path / "sweep.jsonl"
    args = dict(model="fake", workloads=WL, concurrencies=[1, 2], labels={"variant": "a"}, per_concurrency=1,
                progress=False, timeout_s=10)
    with server(tmp_path, "http500") as bad:
        df = sweep.sweep(rows, bad.spec.base_url, **args)
    assert list(df.completed) == [0, 0] and "HTTP 500" in df.errors.iloc[0]
    calls = []
    with server(tmp_path, "ok") as good:
        df = sweep.sweep(rows, good.spec.base_url, on_point=calls.append, **args)
    assert [r["concurrency"] for r in calls] == [1, 2]                  # both failed points retried
    assert list(df.completed) == [1, 2] and len(df) == 2                # one row per point, the good one
    calls = []
    with server(tmp_path, "ok") as good:
        sweep.sweep(rows, good.spec.base_url, on_point=calls.append, **args)
    assert calls == []                                                   # finished points are not repeated


def test_a_server_that_stops_answering_is_not_asked_for_every_point(tmp_path, capsys):
    rows = tmp_path / "sweep.jsonl"
    with server(tmp_path, "hang") as srv:
        df = sweep.sweep(rows, srv.spec.base_url, "fake", WL, [1, 2, 4], labels={"variant": "a"}, per_concurrency=1,
                         progress=False, timeout_s=2)
    # the server's own record: the first point's warm-up request, which ran out of time (so the point's own
    # request was not sent), and nothing for the two points after it (2 and 4 more requests, each with a warm-up)
    asked = [line for line in srv.log_text().splitlines() if line.startswith("request ") and "completions" in line]
    assert len(asked) == 1, asked
    assert len(df) == 1 and df.completed.iloc[0] == 0 and df.timed_out.iloc[0] == 1
    assert "not answering" in capsys.readouterr().out


def test_sweep_server_keys_points_by_the_server_command_line(tmp_path):
    port = free_port()
    spec = ServerSpec(argv=[sys.executable, FAULT, str(port), "ok"], port=port, name="ok", memory_mb=512)
    s1 = live.server_settings(spec)
    spec2 = ServerSpec(argv=[sys.executable, FAULT, str(free_port()), "ok"], port=free_port(), name="ok")
    assert live.server_settings(spec2)["server_memory_mb"] is None and s1["server_memory_mb"] == 512
    df = live.sweep_server(spec, "fake", tmp_path / "s.jsonl", tmp_path, WL, [1], {"variant": "a"}, 1,
                           startup_timeout_s=30, request_timeout_s=10)
    assert df.completed.iloc[0] == 1
    assert df.server_memory_cap_mib.iloc[0] == 512 and 0 < df.server_peak_rss_mib.iloc[0] < 512


def test_a_matrix_runs_its_configurations_side_by_side_and_keeps_each_row(tmp_path):
    """run_matrix with workers: every configuration's server runs at once (the server's own record: each saw its
    request while all the others' were still alive), each row is kept with the workers it ran beside, and a
    resume runs none again."""
    import threading

    rows, names = tmp_path / "attempts.jsonl", ["a", "b", "c"]
    started, up, checked = {}, threading.Barrier(3, timeout=120), threading.Barrier(3, timeout=120)

    def run_one(name):
        srv = server(tmp_path, "ok")
        with srv:
            started[name] = srv
            r = cl.run_point(srv.spec.base_url, "fake", cl.Workload(4, 2), 1, 1, timeout_s=30)
            up.wait()                                   # all three servers are up (one at a time would hang here)
            alive = sum(s.running() for s in started.values())
            checked.wait()                              # none stops before every one has looked
        return {"outcome": "ok" if r["completed"] else "error", "alive": alive}

    df = sweep.run_matrix(rows, names, run_one, progress=False, workers=3)
    assert sorted(df.name) == names and set(df.outcome) == {"ok"} and set(df.workers) == {3}
    assert set(df.alive) == {3}                 # each ran while all three servers were up
    assert sweep.run_matrix(rows, names, lambda n: pytest.fail("ran again"), progress=False, workers=3).shape[0] == 3
    with pytest.raises(ValueError, match="workers=0"):
        sweep.run_matrix(rows, names, run_one, workers=0)
