"""The serving chapters' live plans (helpers.serving.experiments), which take the typed ServerChoice the chapters
build once from their parameters; the live runs themselves are exercised end to end by tests/test_cpu_demo_*.py,
the chapters' parameter specs by tests/test_serving_chapters.py."""
import ast
from pathlib import Path

import pytest

from helpers import repo_root
from helpers.core import params
from helpers.serving import experiments as ex
from helpers.serving.config import ServerChoice


def test_live_plans_say_why_and_refuse_live_where_impossible():
    nan = ServerChoice(mode="auto", engine="transformers", device="cpu")
    assert ex.nan_plan(nan).live  # the demo matrix runs wherever transformers serve does
    assert not ex.nan_plan(ServerChoice(mode="recorded")).live
    base = ServerChoice(mode="auto", engine="transformers", device="cpu")
    assert not ex.baseline_plan(base, ("batched",)).live  # auto does not launch the tiny model for the sweep
    assert ex.baseline_plan(ServerChoice(mode="auto", url="http://127.0.0.1:9"), ("batched",)).live
    with pytest.raises(params.ParameterError, match="'variants'"):
        ex.baseline_plan(base, ("turbo",))
    with pytest.raises(params.ParameterError, match="mode='live' with engine='sglang' cannot run here"):
        ex.runner_plan(ServerChoice(mode="live", engine="sglang"), ("auto",))


def _functions_taking_a_parameter_dict(path: Path, text: str | None = None) -> list[str]:
    """Functions of `path` (or of `text`) with an argument named like the notebook's parameter dict."""
    out = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in node.args.args + node.args.kwonlyargs:
                if a.arg in ("P", "params_dict", "parameters"):
                    out.append(f"{path.name}:{node.name}({a.arg})")
    return out


def test_no_function_below_the_chapters_takes_the_notebooks_parameter_dict():
    """Issue 46: the chapters type their parameters once (helpers.chapters.*.config); the domain packages take
    the typed configs. A function below helpers.chapters with an argument named P is the old parameter bag."""
    src = repo_root() / "src" / "helpers"
    found = [f for p in sorted(src.rglob("*.py")) if "chapters" not in p.parts and "book" not in p.parts
             for f in _functions_taking_a_parameter_dict(p)]
    assert found == [], found
    # and the check finds one where there is one
    planted = "def baseline_sweep(P: dict, run):\n    return P['mode']\n"
    assert _functions_taking_a_parameter_dict(Path("x.py"), planted) == ["x.py:baseline_sweep(P)"]


def test_the_chapters_build_their_configs_once_from_validated_parameters():
    import json

    from helpers.chapters import baselines_tuning as ch

    nb = json.loads((repo_root() / "notebooks" / "03_baselines_tuning.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    values: dict = {}
    exec("".join(cell["source"]), {}, values)
    c = ch.config(params.validate({**values, "load_modes": "on", "server_url": "http://127.0.0.1:9"}, ch.PARAMS))
    assert c.server.url == "http://127.0.0.1:9" and c.server.real_engine and c.study.resolved(c.server) == "full"
    assert c.study.workload.name == "256/256" and c.sweep.concurrencies[0] == 1
    local = ch.config(params.validate({**values, "load_modes": "on", "engine": "transformers",
                                                "variants": ["batched"]}, ch.PARAMS))
    assert local.study.resolved(local.server) == "check"     # the tiny model is not measured: a harness check
    assert ch.config(params.validate(values, ch.PARAMS)).study.resolved(c.server) == "off"
