"""The sglang command builder: the investigation's configuration under both flag sets, and clear errors."""
import pytest

from helpers.core import recorded
from helpers.serving import sglang as sg


@pytest.fixture(scope="module")
def recorded_config():
    df = recorded.load("recorded/launch_config.csv")
    cfg, env, port = sg.from_launch_table(df, "/models/GLM-5-NVFP4")
    return df, cfg, env, port


def _flag_value(argv, flag):
    i = argv.index(flag)
    return argv[i + 1]


@pytest.mark.parametrize("flag_set,prefix", [("early-2026", "--nsa"), ("0.5.23", "--dsa")])
def test_investigation_config_under_both_flag_sets(recorded_config, flag_set, prefix):
    df, cfg, env, port = recorded_config
    argv = sg.build_argv(cfg, flag_set, port=port, python="python3")
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    flags = {r.name: r.value for r in df.itertuples() if r.kind == "flag"}
    # every recorded flag appears with its recorded value, the sparse-attention ones spelled for the flag set
    for name, value in flags.items():
        spelled = name.replace("--nsa", prefix)
        assert spelled in argv, (spelled, argv)
        if isinstance(value, str) and value:
            assert _flag_value(argv, spelled) == value or float(_flag_value(argv, spelled)) == float(value)
    other = "--dsa" if prefix == "--nsa" else "--nsa"
    assert not any(a.startswith(other) for a in argv)
    setting = df[df.kind == "setting"].set_index("name")["value"]
    assert _flag_value(argv, "--cuda-graph-max-bs") == str(setting["cuda_graph_max_batch"])
    assert "--enable-ep-moe" not in argv and "--disable-cuda-graph" not in argv
    assert env == {r.name: r.value for r in df.itertuples() if r.kind == "env"}


def test_expected_argv_early_2026(recorded_config):
    _, cfg, _, port = recorded_config
    argv = sg.build_argv(cfg, "early-2026", port=port, python="py")
    assert argv[argv.index("--nsa-prefill-backend"):argv.index("--nsa-decode-backend") + 2] == [
        "--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "trtllm"]
    assert argv[-1] == "--disable-custom-all-reduce"


def test_cuda_graph_off_is_spelled_per_release(recorded_config):
    _, cfg, _, _ = recorded_config
    from dataclasses import replace

    off = replace(cfg, cuda_graph=False)
    early = sg.build_argv(off, "early-2026")
    new = sg.build_argv(off, "0.5.23")
    assert "--disable-cuda-graph" in early and "--cuda-graph-backend-decode" not in early
    assert "--disable-cuda-graph" not in new
    assert _flag_value(new, "--cuda-graph-backend-decode") == "disabled"
    assert _flag_value(new, "--cuda-graph-backend-prefill") == "disabled"
    assert "--cuda-graph-max-bs" not in new


def test_removed_enable_ep_moe():
    cfg = sg.SGLangConfig("m", enable_ep_moe=True, ep_size=8, tp_size=8)
    assert "--enable-ep-moe" in sg.build_argv(cfg, "early-2026")
    with pytest.raises(sg.UnsupportedOption, match="--enable-ep-moe was removed.*ep_size"):
        sg.build_argv(cfg, "0.5.23")
    ok = sg.build_argv(sg.SGLangConfig("m", ep_size=8, tp_size=8), "0.5.23")
    assert _flag_value(ok, "--ep-size") == "8"


def test_unknown_backend_name_is_a_clear_error():
    with pytest.raises(sg.UnsupportedOption, match=r"decode_backend = 'flashmla_typo'.*expected one of .*trtllm"):
        sg.build_argv(sg.SGLangConfig("m", decode_backend="flashmla_typo"), "0.5.23")
    with pytest.raises(sg.UnsupportedOption, match="moe_runner = 'nope'"):
        sg.build_argv(sg.SGLangConfig("m", moe_runner="nope"), "early-2026")
    # a choice only the newer release has
    with pytest.raises(sg.UnsupportedOption, match="flashinfer_sparse_mla"):
        sg.build_argv(sg.SGLangConfig("m", decode_backend="flashinfer_sparse_mla"), "early-2026")
    assert "flashinfer_sparse_mla" in sg.build_argv(sg.SGLangConfig("m", decode_backend="flashinfer_sparse_mla"), "0.5.23")
    with pytest.raises(sg.UnsupportedOption, match="flag_set"):
        sg.build_argv(sg.SGLangConfig("m"), "0.4")


def test_flags_of_the_installed_release_are_checked(recorded_config):
    _, cfg, _, _ = recorded_config
    help_early = "  --model-path MODEL_PATH\n  --nsa-prefill-backend {trtllm}\n  --nsa-decode-backend\n"
    avail = sg.flags_from_help(help_early)
    assert "--nsa-decode-backend" in avail and "--model-path" in avail
    with pytest.raises(sg.UnsupportedOption, match="does not accept .*--dsa-prefill-backend"):
        sg.build_argv(sg.SGLangConfig("m", prefill_backend="trtllm"), "0.5.23", available=avail)
    argv = sg.build_argv(sg.SGLangConfig("m", prefill_backend="trtllm"), "early-2026",
                         available=avail | {"--host", "--port", "--tp-size"})
    assert "--nsa-prefill-backend" in argv


def test_flag_set_for_version():
    assert sg.flag_set_for("0.5.23") == "0.5.23"
    assert sg.flag_set_for("0.6.0rc1") == "0.5.23"
    assert sg.flag_set_for("0.5.8.dev20260201") == "early-2026"
    with pytest.raises(sg.UnsupportedOption, match="not MAJOR.MINOR.PATCH"):
        sg.flag_set_for("nightly")


def test_bad_numbers():
    with pytest.raises(sg.UnsupportedOption, match="mem_fraction_static"):
        sg.build_argv(sg.SGLangConfig("m", mem_fraction_static=1.5), "0.5.23")
    with pytest.raises(sg.UnsupportedOption, match="tp_size"):
        sg.build_argv(sg.SGLangConfig("m", tp_size=0), "0.5.23")


def test_backend_lines_and_unknown_recorded_flag():
    log = "loading\n[TP0] Using NSA backend: prefill=trtllm decode=trtllm\nAttention backend: flashinfer\nready\n"
    assert len(sg.backend_lines(log)) == 2
    import pandas as pd

    df = pd.DataFrame([{"kind": "flag", "name": "--made-up", "value": "1"}])
    with pytest.raises(sg.UnsupportedOption, match="--made-up"):
        sg.from_launch_table(df, "m")


def test_spec_binds_localhost(recorded_config):
    _, cfg, env, _ = recorded_config
    s = sg.spec(cfg, "0.5.23", env=env)
    assert s.host == "127.0.0.1" and s.health_url.endswith("/health")
    assert _flag_value(list(s.argv), "--host") == "127.0.0.1"
    assert s.env == env


def test_memory_fraction_and_graph_variants(recorded_config):
    from helpers.serving import live

    _, cfg, env, _ = recorded_config
    recorded_fraction = _flag_value(sg.build_argv(cfg, "0.5.23"), "--mem-fraction-static")
    argv = live.sglang_spec(cfg, env, "0.5.23", "no-cuda-graph+mem-fraction-0.8").argv
    assert _flag_value(argv, "--mem-fraction-static") == "0.8"
    assert _flag_value(argv, "--cuda-graph-backend-decode") == "disabled"
    argv = live.sglang_spec(cfg, env, "early-2026", "mem-fraction-default").argv
    assert "--mem-fraction-static" not in argv and "--disable-cuda-graph" not in argv
    argv = live.sglang_spec(cfg, env, "early-2026", "cuda-graph").argv
    assert _flag_value(argv, "--mem-fraction-static") == recorded_fraction  # the recorded configuration
    for bad in ("mem-fraction-2", "mem-fraction-x", "turbo"):
        with pytest.raises(ValueError, match="variant"):
            live.sglang_spec(cfg, env, "0.5.23", bad)
    live.check_names("variants", ["cuda-graph", "mem-fraction-default"], live.VARIANTS["sglang"], "sglang")
    from helpers.core.params import ParameterError

    with pytest.raises(ParameterError, match="turbo"):
        live.check_names("variants", ["turbo"], live.VARIANTS["sglang"], "sglang")


def test_commands_per_flag_set_and_the_refusal():
    cfg = sg.SGLangConfig("/m", decode_backend="trtllm", tp_size=8)
    t = sg.commands(cfg)
    assert list(t["flag set"]) == list(sg.FLAG_SETS)
    cmd = dict(zip(t["flag set"], t.iloc[:, 1]))
    assert "--nsa-decode-backend trtllm" in cmd["early-2026"] and "--dsa-decode-backend trtllm" in cmd["0.5.23"]
    msg = sg.refusal(sg.SGLangConfig("m", ep_size=8, enable_ep_moe=True), "0.5.23")
    assert "--enable-ep-moe" in msg and "ep_size" in msg
    with pytest.raises(ValueError, match="expected a refusal"):
        sg.refusal(cfg, "0.5.23")

