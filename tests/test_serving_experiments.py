"""The serving chapters' live plans (helpers.serving.experiments); the live runs themselves are exercised
end to end by tests/test_cpu_demo_*.py, the chapters' parameter specs by tests/test_serving_chapters.py."""
import pytest

from helpers.core import params
from helpers.serving import experiments as ex


def test_live_plans_say_why_and_refuse_live_where_impossible():
    nan = {"mode": "auto", "engine": "transformers", "device": "cpu", "model_path": ""}
    assert ex.nan_plan(nan).live  # the demo matrix runs wherever transformers serve does
    assert not ex.nan_plan({**nan, "mode": "recorded"}).live
    base = {"mode": "auto", "engine": "transformers", "device": "cpu", "server_url": "", "model_path": "",
            "variants": ["batched"]}
    assert not ex.baseline_plan(base).live  # auto does not launch the tiny model for the sweep
    assert ex.baseline_plan({**base, "server_url": "http://127.0.0.1:9"}).live
    with pytest.raises(params.ParameterError, match="'variants'"):
        ex.baseline_plan({**base, "variants": ["turbo"]})
    with pytest.raises(params.ParameterError, match="mode='live' with engine='sglang' cannot run here"):
        ex.runner_plan({"mode": "live", "engine": "sglang", "device": "cpu", "model_path": "", "runners": ["auto"]})

