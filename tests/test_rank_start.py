"""The CPU ranks of the sharding checks (helpers.model.step.run_sharded) fork from one server that imported
the step package once, instead of each launch spawning fresh interpreters that import torch again (issue 37:
seconds per launch on the 2-core machine). What the ranks compute is checked by tests/test_step.py and
tests/test_fp8.py, which run through this start method."""
from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from helpers.model.step import checks


def test_ranks_start_from_a_fork_server_that_preloads_the_step():
    ctx = checks.rank_context(mp)
    assert ctx.get_start_method() == "forkserver"
    from multiprocessing import forkserver

    assert "helpers.model.step" in forkserver._forkserver._preload_modules


@pytest.mark.integration
def test_two_launches_share_the_server_and_agree():
    """Two launches in one process: the second forks from the server the first started, and both give the
    same logits (the ranks' results do not depend on which launch they came from)."""
    from multiprocessing import forkserver

    a = checks.run_sharded("glm5-mini", 2, 1, 8)
    pid = forkserver._forkserver._forkserver_pid
    b = checks.run_sharded("glm5-mini", 2, 1, 8)
    assert pid is not None and forkserver._forkserver._forkserver_pid == pid
    assert list(a) == list(b) == ["sharded"] and torch.equal(a["sharded"], b["sharded"])
