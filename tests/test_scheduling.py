"""`make test`'s scheduler (tests/scheduler.py): the order of the collection as pytest resolves the tests' marks,
which tests keep together in one worker, and how units reach workers through xdist's scheduling protocol."""
import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import scheduler

pytest_plugins = ["pytester"]

SOURCE = textwrap.dedent('''
    import pytest

    pytestmark = pytest.mark.integration

    @pytest.fixture(scope="module")
    def shared():
        return 1

    def test_plain():
        pass

    @pytest.mark.slow
    @pytest.mark.timeout(1500)
    @pytest.mark.parametrize("x", [1, 2])
    def test_minutes(x):
        pass

    @pytest.mark.timeout(30)
    def test_short():
        pass

    @pytest.mark.slow
    class TestGroup:
        def test_inside(self):
            pass
''')


def test_each_tests_cost_is_its_tier_then_its_time_limit_as_pytest_reads_its_marks(pytester):
    pytester.makepyfile(test_marked=SOURCE, test_unmarked=SOURCE.replace("pytestmark = pytest.mark.integration", ""))
    collected, _ = pytester.inline_genitems()
    items = [i for i in collected if i.module.__name__ == "test_marked"]
    keys = {item.name: scheduler.cost_key(item, 600) for item in items}
    assert keys == {"test_plain": (1, -600), "test_minutes[1]": (0, -1500.0), "test_minutes[2]": (0, -1500.0),
                    "test_short": (1, -30.0), "test_inside": (0, -600)}     # the class's mark reaches its test
    scheduler.order_items(items, 600, together=lambda path: False)
    assert [i.name for i in items] == ["test_minutes[1]", "test_minutes[2]", "test_inside", "test_plain",
                                       "test_short"]                     # stable within a key
    unit = next(i for i in collected if i.module.__name__ == "test_unmarked" and i.name == "test_plain")
    assert scheduler.cost_key(unit, 600) == (2, -600)                       # the unit tier


TOGETHER = textwrap.dedent('''
    import pytest

    @pytest.fixture(scope="module")
    def server():
        yield 1             # its teardown (a server stopped) runs after the module's last test

    def test_unit_first():
        pass

    @pytest.mark.integration
    def test_uses_the_server(server):
        pass

    @pytest.mark.slow
    def test_slow_last(server):
        pass
''')


def test_a_module_that_keeps_together_keeps_its_own_order_at_its_costliest_tests_place(pytester):
    """CI at 6490351: sorted by their own keys, the unit test written first in a module with a module fixture ran
    last, so the fixture's teardown (stopping its server) ran inside it and the unit tier's guard failed it."""
    pytester.makepyfile(test_together=TOGETHER, test_other=SOURCE)
    items, _ = pytester.inline_genitems()
    scheduler.order_items(items, 600, together=lambda path: path.name == "test_together.py")
    names = [(i.module.__name__, i.name) for i in items]
    mine = [n for m, n in names if m == "test_together"]
    assert mine == ["test_unit_first", "test_uses_the_server", "test_slow_last"]       # pytest's order kept
    first = names.index(("test_together", "test_unit_first"))
    assert names[first:first + 3] == [("test_together", n) for n in mine]             # together, and in the
    assert first < names.index(("test_other", "test_plain"))                            # slow tier's place


SESSION = textwrap.dedent('''
    import pytest

    @pytest.fixture(scope="session")
    def recorded_run():
        return 1

    @pytest.fixture
    def through(recorded_run):
        return recorded_run

    @pytest.mark.slow
    @pytest.mark.timeout(1800)
    def test_minutes():
        pass

    def test_unit(recorded_run):
        pass

    @pytest.mark.slow
    def test_reads_it(recorded_run):
        pass

    @pytest.mark.slow
    def test_reads_it_too(through):
        pass
''')


def test_one_test_per_shared_session_result_goes_first_to_make_it(pytester):
    """The first test (in cost order) that asks for a shared session result, directly or through a fixture, goes
    before the minutes-long tests, so the result is made at the start rather than when its other tests reach the
    workers side by side (the whole suite at accd3e4: three workers waiting 43-57 s on the one making the auto
    book); the others keep their places, as does every test where no test asks for a session result."""
    pytester.makepyfile(test_session=SESSION, test_other=SOURCE)
    items, _ = pytester.inline_genitems()
    scheduler.order_items(items, 600, together=lambda path: False)
    names = [i.name for i in items]
    assert names[:2] == ["test_reads_it", "test_minutes"]
    assert names.index("test_reads_it_too") < names.index("test_unit")          # its own place, by its marks
    assert [i.name for i in scheduler.session_makers(items, lambda path: False, ("auto_run",))] == []
    assert [i.name for i in scheduler.session_makers(items[1:], lambda path: False)] == ["test_reads_it_too"]
    only_other = [i for i in items if i.module.__name__ == "test_other"]
    before = [i.name for i in only_other]
    scheduler.order_items(only_other, 600, together=lambda path: False)
    assert [i.name for i in only_other] == before


def test_a_module_with_a_module_fixture_keeps_together_unless_it_says_spread(tmp_path):
    path = tmp_path / "test_mod.py"
    path.write_text(SOURCE)
    assert scheduler.keeps_together(path)
    path.write_text(SOURCE + "\nSPREAD_ACROSS_WORKERS = True\n")
    assert not scheduler.keeps_together(path)
    path.write_text(SOURCE.replace('scope="module"', 'scope="function"'))
    assert not scheduler.keeps_together(path)


def test_units_are_single_tests_or_whole_modules_placed_at_their_first_test():
    collection = ["a.py::t1", "m.py::t1", "b.py::t1", "m.py::t2", "a.py::t2"]
    assert scheduler.split_units(collection, lambda path: path == "m.py") == [[0], [1, 3], [2], [4]]


class Worker:
    """What the scheduler sees of an xdist worker (xdist's WorkerController): the tests sent and its shutdown."""

    def __init__(self, name):
        self.name, self.sent, self.shutting_down = name, [], False
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices):
        self.sent += list(indices)

    def shutdown(self):
        self.shutting_down = True


def test_the_costliest_units_go_to_the_workers_about_to_be_free(tmp_path):
    """Eight tests costliest first (0 the costliest), two workers. Each holds two tests (the one it runs and the
    next it must know): the costliest left for a worker whose tests in hand are all cheap ones, the cheapest
    left as the next test of one still busy with a costly one. So 0 and 1 start at once on the two workers,
    not one behind the other."""
    collection = [f"t.py::t{i}" for i in range(8)]
    sched = scheduler.CostliestFirst(None, 2, together=lambda path: False)
    a, b = Worker("a"), Worker("b")
    for w in (a, b):
        sched.add_node(w)
        sched.add_node_collection(w, collection)
    assert sched.collection_is_completed and not sched.tests_finished
    sched.schedule()
    assert (a.sent, b.sent) == ([0, 7], [1, 6])
    sched.mark_test_complete(a, 0)          # a now runs 7 (cheap): it gets the costliest left as its next
    assert a.sent == [0, 7, 2]
    sched.mark_test_complete(a, 7)          # a now runs 2 (costly): the cheapest left is its next
    assert a.sent == [0, 7, 2, 5]
    assert sched.remove_node(b) == "t.py::t1"   # b crashed running 1: 1 and 6 go back to the front
    assert sched.units[0] == [1, 6] and sched.has_pending
    for i in (2, 5):
        sched.mark_test_complete(a, i)
    assert a.sent == [0, 7, 2, 5, 1, 6] and not a.shutting_down   # the crashed unit, whole, once a is about free
    for i in (1, 6):
        sched.mark_test_complete(a, i)
    assert a.sent == [0, 7, 2, 5, 1, 6, 4, 3] and a.shutting_down   # nothing left to give: a is shut down
    for i in (4, 3):
        sched.mark_test_complete(a, i)
    assert sched.tests_finished and not sched.units and not sched.has_pending


def test_a_worker_that_collected_other_tests_is_refused_naming_it():
    sched = scheduler.CostliestFirst(None, 2, together=lambda path: False)
    a, b = Worker("a"), Worker("b")
    for w in (a, b):
        sched.add_node(w)
    sched.add_node_collection(a, ["t.py::x", "t.py::y"])
    sched.schedule()
    with pytest.raises(RuntimeError, match="worker b collected other tests"):
        sched.add_node_collection(b, ["t.py::y", "t.py::x"])


ORDER_PLUGIN = textwrap.dedent('''
    import scheduler

    def pytest_collection_finish(session):
        items = list(session.items)
        scheduler.order_items(items, 600)
        print("ORDER", [(i.nodeid.split("::")[0], scheduler.cost_key(i, 600)) for i in items])
''')


def _this_workers_order(request, tests: Path):
    """[(path, key)] in the order this process holds its collection, where it is a worker of `make test`
    (--dist loadgroup: tests/conftest.py ordered it with scheduler.order_items, as the ORDER_PLUGIN below does) that
    collected every test module with nothing deselected; None elsewhere (one process, or a run that selects tests),
    where the suite is collected anew in a subprocess. Collecting the suite costs about 10 s of CPU, and `make test`'s
    workers have just done it."""
    config = request.config
    if getattr(config, "workerinput", {}).get("dist") != "loadgroup":
        return None
    if config.option.keyword or config.option.markexpr or config.getoption("deselect"):
        return None
    items = request.session.items
    if {i.path.name for i in items} != {p.name for p in tests.glob("test_*.py")}:
        return None
    return [(i.nodeid.split("::")[0], scheduler.cost_key(i, 600)) for i in items]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_suites_costliest_tests_are_handed_out_first(tmp_path, request):
    """The real suite, collected as a worker collects it: the minutes-long tests (the cpu-demo chapters, the
    readers' commands) come before every other test but the one test per shared session result that makes it
    (scheduler.SESSION_RESULTS), and the unit tier after every integration test."""
    tests = Path(scheduler.__file__).parent
    order = _this_workers_order(request, tests)
    if order is None:
        (tmp_path / "order_plugin.py").write_text(ORDER_PLUGIN)
        env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{tests}"}
        r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "order_plugin",
                            "-p", "no:cacheprovider", str(tests)], capture_output=True, text=True, timeout=280,
                           cwd=tests.parent, env=env)
        line = next((x for x in r.stdout.splitlines() if x.startswith("ORDER ")), None)
        assert line, r.stdout[-2000:] + r.stderr[-2000:]
        order = ast.literal_eval(line[len("ORDER "):])      # [(path, (rank, -limit)), ...] as the plugin printed
    longest = {"test_cpu_demo_nan_crash.py", "test_cpu_demo_baselines.py", "test_cpu_demo_moe_runners.py",
               "test_readers_commands.py"}
    n = sum(path.split("/")[-1] in longest for path, _ in order)
    lead = next(i for i, (path, _) in enumerate(order) if path.split("/")[-1] in longest)
    assert 0 < lead <= len(scheduler.SESSION_RESULTS), order[:lead + 1]     # the session results' makers first
    assert {path.split("/")[-1] for path, _ in order[lead:lead + n]} == longest, order[:lead + n + 3]
    ranks = [key[0] for path, key in order if not scheduler.keeps_together(tests.parent / path)]
    assert ranks == sorted(ranks) and ranks.count(2) > 500      # (a module kept together keeps its own order)
