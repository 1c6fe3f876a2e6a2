"""The serving chapters' live plans and parameter specs (helpers.serving.experiments); the live runs
themselves are exercised end to end by tests/test_cpu_demo.py."""
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


def test_each_chapter_validates_its_parameters_cell_with_its_spec():
    import json

    from helpers import repo_root
    from papermill.translators import PythonTranslator

    for stem, specs in (("02_nan_crash", ex.NAN_PARAMS), ("03_baselines_tuning", ex.BASELINE_PARAMS),
                        ("04_moe_runners", ex.RUNNER_PARAMS)):
        nb = json.loads((repo_root() / "notebooks" / f"{stem}.ipynb").read_text())
        cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
        names = [p.name for p in PythonTranslator.inspect({"source": "".join(cell["source"])})]
        assert set(names) == set(specs), stem
        ns = {}
        exec("".join(cell["source"]), ns)
        params.validate({k: ns[k] for k in names}, specs)  # the committed defaults are valid
