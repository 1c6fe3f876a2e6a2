import pytest

from helpers.core import params


def test_valid_values_are_normalised():
    out = params.validate(
        {"mode": "auto", "n": 3.0, "sizes": [1, 2], "flag": True, "path": ""},
        {"mode": params.choice(*params.MODES), "n": params.number(1, 10, integer=True),
         "sizes": params.number_list(lo=1, integer=True), "flag": params.boolean(), "path": params.string()},
    )
    assert out == {"mode": "auto", "n": 3, "sizes": [1, 2], "flag": True, "path": ""}


@pytest.mark.parametrize("name,value,spec,expect", [
    ("mode", "fast", params.choice("recorded", "auto"), "one of 'recorded', 'auto'"),
    ("n", 0, params.number(1, 10, integer=True), "an integer >= 1 and <= 10"),
    ("n", 2.5, params.number(1, 10, integer=True), "an integer"),
    ("n", True, params.number(), "a finite number"),
    ("sizes", "1,2", params.number_list(lo=1), "a list"),
    ("sizes", [1, -4], params.number_list(lo=1), "a list"),
    ("flag", "yes", params.boolean(), "True or False"),
    ("url", "", params.string(allow_empty=False), "not empty"),
])
def test_bad_value_names_parameter_value_and_allowed(name, value, spec, expect):
    with pytest.raises(params.ParameterError) as ei:
        params.validate({name: value}, {name: spec})
    msg = str(ei.value)
    assert f"parameter '{name}' = {value!r}" in msg
    assert expect in msg
    assert "targets/" in msg  # says how to fix it


def test_missing_and_unspecified_parameters():
    with pytest.raises(params.ParameterError, match="missing"):
        params.validate({}, {"mode": params.choice("auto")})
    with pytest.raises(params.ParameterError, match="no spec"):
        params.validate({"mode": "auto", "x": 1}, {"mode": params.choice("auto")})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("spec", [params.number(1, 3600), params.number(), params.number(0, 10, integer=True)])
def test_nan_and_infinity_are_refused_by_every_number_check(value, spec):
    with pytest.raises(params.ParameterError, match="is not allowed"):
        params.validate({"startup_timeout_s": value}, {"startup_timeout_s": spec})
    with pytest.raises(params.ParameterError, match="is not allowed"):
        params.validate({"sizes": [1, value]}, {"sizes": params.number_list()})


def test_every_bad_value_gets_its_own_line():
    with pytest.raises(params.ParameterError) as ei:
        params.validate({"a": float("nan"), "b": 0, "c": 5},
                        {"a": params.number(1, 10), "b": params.number(1, 10), "c": params.number(1, 10)})
    lines = str(ei.value).splitlines()
    assert len(lines) == 2 and lines[0].startswith("parameter 'a' = nan") and lines[1].startswith("parameter 'b' = 0")


def test_a_parameter_papermill_passed_that_the_notebook_lacks_is_an_error():
    ns = {"_ih": ["", 'mode = "auto"  # allowed', '# Parameters\nmode = "recorded"\nbogus = 1\n']}
    assert params.injected_names(ns) == {"mode", "bogus"}
    assert params.injected_names({"_ih": ["x = 1"]}) == set()
    code = "P = params.validate({'mode': mode}, {'mode': params.choice('recorded', 'auto')})"
    with pytest.raises(params.ParameterError, match=r"\['bogus'\] were passed to this notebook, which has no such"):
        exec(code, {**ns, "params": params, "mode": "recorded"})
    ns["_ih"][-1] = '# Parameters\nmode = "recorded"\n'
    exec(code, {**ns, "params": params, "mode": "recorded"})


@pytest.mark.integration
def test_papermill_run_with_an_unknown_parameter_fails(tmp_path):
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    p = nbformat.v4.new_code_cell('mode = "auto"  # allowed: "recorded", "auto"')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p, nbformat.v4.new_code_cell(
        "from helpers.core import params\nP = params.validate({'mode': mode}, {'mode': params.choice('recorded', 'auto')})")]
    nbformat.write(nb, tmp_path / "in.ipynb")
    with pytest.raises(PapermillExecutionError) as e:
        papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"mode": "auto", "bogus": 1}, progress_bar=False, kernel_name="python3")
    assert e.value.ename == "ParameterError" and "['bogus'] were passed" in e.value.evalue
    papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), parameters={"mode": "auto"},
                               progress_bar=False, kernel_name="python3")
