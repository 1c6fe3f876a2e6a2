"""The tiers by cost hold: the unit tier's guard (tests/conftest.py) refuses a process, a model and a sleep and
puts back what it replaced, and `make test-fast` selects exactly the tests the guard applies to."""
import re
import subprocess
import threading
import time

import pytest

from conftest import TIER_MARKERS, UnitGuard, UnitTierError
from helpers import repo_root


def test_the_guard_refuses_a_process_a_sleep_and_a_model_naming_the_rule():
    import torch

    popen, sleep = subprocess.Popen._execute_child, time.sleep
    with UnitGuard("a::test") as g:
        with pytest.raises(UnitTierError, match=r"a::test starts a process \(subprocess\); the unit tier"):
            subprocess.run(["true"])
        with pytest.raises(UnitTierError, match="integration"):
            time.sleep(0.01)
        with pytest.raises(UnitTierError, match="builds a model"):
            torch.nn.Linear(2, 2)
        time.sleep(0)                                    # a yield, not a wait
        done = []
        t = threading.Thread(target=lambda: (time.sleep(0.001), done.append(1)))   # a library's own thread
        t.start()
        t.join()
        assert done == [1]
    assert len(g.seen) == 3
    assert subprocess.Popen._execute_child is popen and time.sleep is sleep


def test_the_guard_catches_a_process_the_code_under_test_swallows():
    with UnitGuard("a::test") as g:
        try:
            subprocess.run(["true"])
        except Exception:                                # as a probe that treats a failed tool as absent
            pass
    assert g.seen and "starts a process" in g.seen[0]


def test_make_test_fast_selects_the_tier_the_guard_holds():
    make = (repo_root() / "Makefile").read_text()
    expr = re.search(r"^UNIT_TIER\s*=\s*(.+)$", make, re.M).group(1).strip()
    assert sorted(re.findall(r"not (\w+)", expr)) == sorted(TIER_MARKERS) and " or " not in expr
    recipe = re.search(r"^test-fast:.*\n((?:\t.*\n)+)", make, re.M).group(1)
    assert "pytest -q" in recipe and '-m "$(UNIT_TIER)"' in recipe, recipe


def test_every_unit_test_starts_from_the_same_seeds():
    import random

    import numpy as np
    import torch

    draws = []
    for _ in range(2):
        with UnitGuard("a::test"):
            draws.append((random.random(), float(np.random.rand()), float(torch.rand(1))))
    assert draws[0] == draws[1]
