"""The health probe's time limit is a parameter (issue 23, item 8): a server whose /health answers after a few
seconds is seen healthy under the default, and where it answers later than the limit the startup error says
it answered, and after how long, instead of "did not answer". Real local servers (tests/fixtures/fault_server.py)."""
import os
import sys
import time
from pathlib import Path

import pytest

from helpers.serving.server import Server, ServerSpec, StartupTimeout, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")


def slow_health(delay_s, **kw):
    port = free_port()
    return ServerSpec(argv=[sys.executable, FAULT, str(port), "ok"], port=port, name="slow-health",
                      env={"FAULT_HEALTH_DELAY_S": str(delay_s)}, **kw)


def test_a_health_answer_after_3_s_is_healthy_under_the_default(tmp_path):
    with Server(slow_health(3), tmp_path / "s.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        assert srv.startup_s is not None and srv.startup_s >= 3


def test_a_health_answer_later_than_the_limit_is_named_with_its_time(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(StartupTimeout) as e:
        with Server(slow_health(4, health_timeout_s=1), tmp_path / "s.log", startup_timeout_s=8, stop_grace_s=1):
            pass
    msg = str(e.value)
    assert "answered, but after 4." in msg and "health_timeout_s" in msg and "did not answer" not in msg, msg
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "5"])
def test_a_bad_health_limit_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="health_timeout_s"):
        slow_health(0, health_timeout_s=bad)
