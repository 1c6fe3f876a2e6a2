"""Chapter 03's load-study parameters (issue 38): each bad input the issue names is refused before any request,
by the runbook while it plans (nothing executed) and by the chapter's own validation cell, with an error that
names the parameter and the fix."""
import contextlib
import io
import json

import pytest

from helpers import repo_root
from helpers.book import runbook
from helpers.chapters import baselines_tuning as ch
from helpers.core import params


def _defaults() -> dict:
    nb = json.loads((repo_root() / "notebooks" / "03_baselines_tuning.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    values: dict = {}
    exec("".join(cell["source"]), {}, values)   # literals only (the house style's parameters cell)
    return values


BAD = [("slo", "ttft=500", ("'slo'", "does not parse", "METRIC:VALUE")),
       ("slo", "latency:500", ("'slo'", "'latency' is unknown", "use one of")),
       ("slo", "ttft:fast", ("'slo'", "not a number")),
       ("slo", "ttft:-5", ("'slo'", "ttft_ms", "positive")),
       ("burstiness", 0, ("'burstiness'", "gamma", "positive")),
       ("slo", "", ("'slo'", "capacity search needs an SLO"))]   # with load_modes "on"


@pytest.mark.parametrize("name, value, says", BAD)
def test_the_chapters_validation_cell_refuses_each_bad_load_input(name, value, says):
    v = {**_defaults(), "load_modes": "on", name: value}
    with pytest.raises(params.ParameterError) as e:
        params.validate(v, ch.PARAMS)
    for s in says:
        assert s in str(e.value)


def test_the_defaults_validate_and_the_study_is_off_by_default():
    v = params.validate(_defaults(), ch.PARAMS)
    assert v["load_modes"] == "off" and v["slo_share"] == 0.9


@pytest.mark.parametrize("name, value, says", BAD)
def test_the_runbook_refuses_each_bad_load_input_before_running(name, value, says, tmp_path, monkeypatch):
    reached = []
    monkeypatch.setattr(runbook, "_execute_and_build", lambda *a, **k: reached.append(a) or 0)
    argv = ["--no-build", "--target", "cpu-demo", "--runs-dir", str(tmp_path / "runs"),
            "--chapters", "03_baselines_tuning", "-p", f"03_baselines_tuning.{name}={json.dumps(value)}"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = runbook.main(argv)
    assert rc != 0 and not reached and not (tmp_path / "runs").exists()
    for s in says:
        assert s in err.getvalue()
