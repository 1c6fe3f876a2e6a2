"""`make test`'s scheduler (tests/conftest.py): which tests keep together in one worker and the order units are
handed out in, read from each test's source."""
import textwrap
from pathlib import Path

import conftest

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

    class TestGroup:
        def test_inside(self):
            pass

    def helper():
        pass
''')


def test_each_tests_cost_is_its_tier_then_its_time_limit(tmp_path):
    path = tmp_path / "test_mod.py"
    path.write_text(SOURCE)
    costs = conftest.unit_costs(path, default_timeout=600)
    assert costs == {"test_plain": (1, -600), "test_minutes": (0, -1500.0), "test_short": (1, -30.0),
                     "TestGroup::test_inside": (1, -600)}
    assert sorted(costs, key=costs.get)[0] == "test_minutes"
    assert conftest.keeps_together(path)
    path.write_text(SOURCE + "\nSPREAD_ACROSS_WORKERS = True\n")
    assert not conftest.keeps_together(path)
    path.write_text(SOURCE.replace("pytestmark = pytest.mark.integration", ""))
    assert conftest.unit_costs(path)["test_plain"] == (2, -600)   # the unit tier


def test_the_suites_costliest_tests_are_handed_out_first():
    """The minutes-long tests (the cpu-demo chapters, the readers' commands) sort before every other test of
    the suite, and the unit tier after every integration test."""
    root = Path(conftest.__file__).parent
    costs = {(f.name, name): c for f in sorted(root.glob("test_*.py")) for name, c in conftest.unit_costs(f).items()}
    first = sorted(costs, key=costs.get)[:15]
    assert {f for f, _ in first} == {"test_cpu_demo_nan_crash.py", "test_cpu_demo_baselines.py",
                                     "test_cpu_demo_moe_runners.py", "test_readers_commands.py"}, first
    assert max(c for c in costs.values() if c[0] < 2) < min(c for c in costs.values() if c[0] == 2)
