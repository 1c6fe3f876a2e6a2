"""`make test`'s order of work (pytest-xdist, `--dist loadgroup`): costliest first, a module with a module fixture
whole in one worker.

Two parts, each through a public interface:
- In every process that collects (each worker), `order_items` (tests/conftest.py's pytest_collection_modifyitems)
  sorts the collected tests costliest first by their marks as pytest resolves them (`item.get_closest_marker`:
  slow, then integration, then the unit tier; within a tier the highest `pytest.mark.timeout` first). The sort is
  stable and the same in every worker, so the workers' collections stay identical, as xdist requires. Before
  them all goes one test per shared session result (SESSION_RESULTS: the book executed per target), the first
  that asks for it: it makes the result at the start, beside the minutes-long tests, where its other tests would
  otherwise reach it together later and wait, idle, on the one worker making it (tests/onceper.py).
- In the controlling process, `CostliestFirst` is the scheduler that xdist's hook `pytest_xdist_make_scheduler`
  returns. It implements xdist's scheduling protocol (`xdist.scheduler.protocol.Scheduling`) itself, subclassing
  nothing and reading no private attribute: units are single tests, or a whole module where `keeps_together`
  says so (its module fixture would otherwise be made once per worker: the cpu-demo chapter runs), queued in
  collection order (costliest first: a unit sits where its first test does). A worker runs a test only once it
  knows the next one (for module fixtures' teardown), so it always holds two: the costliest unit left is given
  to a worker whose tests in hand are all from the cheap end of the queue (or that has none), and a worker
  that still holds a costly test gets the cheapest unit left as its next, so that the costly units go to the
  workers that are about to be free rather than queue behind one another. A worker with nothing left to get is
  shut down (it finishes what it holds).
"""
from __future__ import annotations

import collections
import re
from pathlib import Path

#: a module that defines a module- (or class-, package-) scoped fixture keeps its tests in one worker
MODULE_FIXTURE = re.compile(r"""@pytest\.fixture\(\s*scope\s*=\s*["'](module|class|package)["']""")
SPREAD = re.compile(r"^SPREAD_ACROSS_WORKERS\s*=\s*True", re.M)
#: tier ranks, lowest first: the order the tiers are handed out in
TIER_RANK = {"slow": 0, "integration": 1}
UNIT_TIER_RANK = 2
#: a worker holds this many tests (the one it runs and the next it must know before it runs it)
HOLD = 2
#: session fixtures made once for all workers (tests/conftest.py, tests/onceper.py) that many tests wait on: one test
#: asking for each goes first. The whole suite at accd3e4 on the 2-core machine: the recorded book (32 s of CPU) was
#: made from 220 s on, two workers waiting 22-29 s on it, then the auto book (47 s of CPU) from 252 s on, three
#: workers waiting 43-57 s on it, one core idle the while (fixtures asked for by tests sorted side by side)
SESSION_RESULTS = ("recorded_run", "auto_run")


def keeps_together(module_path) -> bool:
    """Whether the tests of this module run in one worker: it defines a module- (or class-, package-) scoped
    fixture and does not set SPREAD_ACROSS_WORKERS = True (a fixture cheap next to its tests, or made once per
    session anyway)."""
    try:
        text = Path(module_path).read_text()
    except OSError:
        return False
    return bool(MODULE_FIXTURE.search(text)) and not SPREAD.search(text)


def cost_key(item, default_timeout: float) -> tuple[int, float]:
    """A collected test's sort key, lowest first: (its tier's rank, minus its time limit), from its marks as
    pytest resolves them (the test's own, its class's, its module's pytestmark)."""
    rank = min((r for name, r in TIER_RANK.items() if item.get_closest_marker(name)), default=UNIT_TIER_RANK)
    mark = item.get_closest_marker("timeout")
    limit = float(mark.args[0]) if mark is not None and mark.args else default_timeout
    return rank, -limit


def order_items(items: list, default_timeout: float, together=keeps_together) -> None:
    """Sort `items` in place, costliest first (a stable sort: equal keys keep pytest's order). The tests of a
    module that keeps together (`together(its path)`) keep pytest's order among themselves, all at the key of
    its costliest: its module fixture is then torn down after the module's last test in the source, as in a
    run in one process (sorted by their own keys, a unit-tier test written first would run last, and the
    fixture's teardown, a server stopped, would run inside it and fail the unit tier's guard)."""
    keys = {id(item): cost_key(item, default_timeout) for item in items}
    module_key: dict = {}
    for item in items:
        path = item.path
        if path not in module_key:
            module_key[path] = None
            if together(path):
                module_key[path] = min(keys[id(i)] for i in items if i.path == path)
    items.sort(key=lambda item: module_key[item.path] or keys[id(item)])
    makers = session_makers(items, together)
    items[:] = makers + [item for item in items if item not in makers]


def session_makers(items: list, together=keeps_together, results=SESSION_RESULTS) -> list:
    """For each of `results` (fixture names), the first of `items` that asks for it (directly or through another
    fixture), of a module that does not keep together: the tests that make the shared session results."""
    makers = []
    for name in results:
        item = next((i for i in items if name in getattr(i, "fixturenames", ()) and not together(i.path)), None)
        if item is not None and item not in makers:
            makers.append(item)
    return makers


def split_units(collection: list[str], together) -> list[list[int]]:
    """The collection's indices in units, in collection order: a unit is one test, or every test of a module for
    which `together(path)` holds, placed where its first test is."""
    units, of_module = [], {}
    for i, nodeid in enumerate(collection):
        path = nodeid.split("::", 1)[0]
        if path not in of_module:
            of_module[path] = None
            if together(path):
                of_module[path] = len(units)
                units.append([])
        k = of_module[path]
        if k is None:
            units.append([i])
        else:
            units[k].append(i)
    return units


class CostliestFirst:
    """xdist's scheduling protocol (xdist.scheduler.protocol.Scheduling): units from the costly end of the queue to
    workers about to be free, from the cheap end as the next test of a worker still busy with a costly one."""

    def __init__(self, config, numnodes: int, together=None, log=None):
        self.config, self.numnodes, self.log = config, numnodes, log
        self._together = together or (lambda path: keeps_together(Path(config.rootpath) / path))
        self.collection: list[str] | None = None
        self.units: collections.deque = collections.deque()   # not yet handed out, costliest first
        self.pending: dict = {}                             # node -> its tests not yet reported, in order
        self.cheap: dict = {}                               # node -> those of them taken from the cheap end
        self.collections: dict = {}                         # node -> what it collected

    # ------------------------------------------------------------------ the protocol's properties
    @property
    def nodes(self) -> list:
        return list(self.pending)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.collections) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.collection is None or self.units:
            return False
        return all(len(p) < HOLD for p in self.pending.values())

    @property
    def has_pending(self) -> bool:
        return bool(self.units) or any(self.pending.values())

    # ------------------------------------------------------------------ nodes and their collections
    def add_node(self, node) -> None:
        self.pending[node], self.cheap[node] = [], set()

    def add_node_collection(self, node, collection) -> None:
        if self.collection is not None and list(collection) != self.collection:
            raise RuntimeError(f"worker {node.gateway.id} collected other tests than the first worker; the "
                               "collection must not depend on the process (order_items is a stable sort)")
        self.collections[node] = list(collection)

    def remove_node(self, node) -> str | None:
        """A node is gone (finished, or crashed): its unreported tests go back to the front of the queue; the
        first of them is the one it was running (None where it had none)."""
        left = self.pending.pop(node)
        self.cheap.pop(node)
        if not left:
            return None
        self.units.appendleft(left)
        for other in self.nodes:
            self._top_up(other)
        return self.collection[left[0]]

    # ------------------------------------------------------------------ progress
    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        self.pending[node].remove(item_index)
        self.cheap[node].discard(item_index)
        self._top_up(node)

    def mark_test_pending(self, item: str):
        raise NotImplementedError("CostliestFirst does not take tests back (xdist's worksteal mode only)")

    def remove_pending_tests_from_node(self, node, indices) -> None:
        raise NotImplementedError("CostliestFirst does not take tests back (xdist's worksteal mode only)")

    def schedule(self) -> None:
        if self.collection is None:
            self.collection = next(iter(self.collections.values()))
            self.units = collections.deque(split_units(self.collection, self._together))
        for node in self.nodes:
            self._top_up(node)

    def _top_up(self, node) -> None:
        """Give `node` units until it holds HOLD tests: the costliest left where all it holds came from the cheap
        end (or it holds none), else the cheapest left; shut it down where none is left."""
        if node.shutting_down or self.collection is None:
            return
        while len(self.pending[node]) < HOLD and self.units:
            costly = set(self.pending[node]) <= self.cheap[node]
            unit = self.units.popleft() if costly else self.units.pop()
            if not costly:
                self.cheap[node].update(unit)
            self.pending[node].extend(unit)
            node.send_runtest_some(unit)
        if not self.units:
            node.shutdown()
