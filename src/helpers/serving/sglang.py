"""Version-aware command builder for the SGLang server (`python -m sglang.launch_server`).

SGLang renames and removes flags between releases, so the builder knows two flag sets:
- "early-2026": the nightly the investigation used: `--nsa-prefill-backend` / `--nsa-decode-backend`,
  `--enable-ep-moe`, `--disable-cuda-graph`.
- "0.5.23": `--dsa-prefill-backend` / `--dsa-decode-backend` (the `--nsa-*` names are gone), no
  `--enable-ep-moe` (use `--ep-size`), `--disable-cuda-graph` deprecated in favour of
  `--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled`.
`flag_set_for(version)` picks one from an installed version string; where sglang is installed, the
flags of its own `--help` can be passed to `build_argv(..., available=...)` so that a flag the
installed release lacks fails before launch. Unknown choices and removed options raise
`UnsupportedOption` naming the option, the value, the flag set and the fix.
"""
from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass

from helpers.serving.server import ServerSpec, free_port

FLAG_SETS = ("early-2026", "0.5.23")

_SPARSE_EARLY = ("flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter", "trtllm")
_SPARSE_0523 = _SPARSE_EARLY + ("flashmla_sparse_q8", "flashinfer_sparse_mla", "triton", "intel_xpu")
MOE_RUNNERS = ("auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_trtllm_routed",
               "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass")
#: attention backends the builder knows (not every one sglang has: add more through `extra_args`)
ATTENTION_BACKENDS = ("flashinfer", "fa3", "fa4", "triton", "torch_native", "flashmla", "cutlass_mla",
                      "trtllm_mla", "trtllm_mha", "aiter", "nsa")
KV_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16")

CHOICES = {
    "early-2026": {"prefill_backend": _SPARSE_EARLY, "decode_backend": _SPARSE_EARLY,
                   "attention_backend": ATTENTION_BACKENDS, "moe_runner": MOE_RUNNERS, "kv_cache_dtype": KV_DTYPES},
    "0.5.23": {"prefill_backend": _SPARSE_0523 + ("triton_sparse_mla",), "decode_backend": _SPARSE_0523,
               "attention_backend": ATTENTION_BACKENDS + ("dsa",), "moe_runner": MOE_RUNNERS,
               "kv_cache_dtype": KV_DTYPES},
}


class UnsupportedOption(ValueError):
    """An option the chosen sglang flag set does not have, or a value it does not accept."""


@dataclass(frozen=True)
class SGLangConfig:
    """One server configuration, independent of the flag spelling of any release."""

    model_path: str
    attention_backend: str | None = None
    prefill_backend: str | None = None      # sparse-attention (NSA/DSA) prefill backend
    decode_backend: str | None = None       # sparse-attention (NSA/DSA) decode backend
    moe_runner: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    fp8_gemm_backend: str | None = None
    tp_size: int = 1
    ep_size: int | None = None
    enable_ep_moe: bool = False             # removed in 0.5.23: use ep_size
    mem_fraction_static: float | None = None
    cuda_graph: bool = True
    cuda_graph_max_bs: int | None = None
    custom_all_reduce: bool = True
    served_model_name: str | None = None
    extra_args: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return asdict(self)


def flag_set_for(version: str) -> str:
    """The flag set of an sglang version string: 0.5.23 and later use the renamed flags.

    Assumed: every older release uses the early-2026 spellings (the exact release of the rename is not
    recorded here); pass the flag set explicitly where that matters."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", str(version))
    if not m:
        raise UnsupportedOption(f"sglang version {version!r} is not MAJOR.MINOR.PATCH; pass flag_set= one of {FLAG_SETS}")
    return "0.5.23" if tuple(map(int, m.groups())) >= (0, 5, 23) else "early-2026"


def _check(flag_set: str, option: str, value) -> None:
    if value is None:
        return
    allowed = CHOICES[flag_set].get(option)
    if allowed is not None and value not in allowed:
        raise UnsupportedOption(
            f"{option} = {value!r} is not a known choice for sglang flag set {flag_set!r}; "
            f"expected one of {', '.join(allowed)}. Fix the configuration (or pass the flag in extra_args "
            f"if your sglang release has a newer choice)")


def build_argv(cfg: SGLangConfig, flag_set: str, host: str = "127.0.0.1", port: int = 30000,
               python: str | None = None, available: set[str] | None = None) -> list[str]:
    """The argument list that launches `cfg` under `flag_set` ("early-2026" or "0.5.23").

    `available`: the flags of the installed release (from `flags_from_help`); any emitted flag not
    among them raises UnsupportedOption before anything is launched."""
    if flag_set not in FLAG_SETS:
        raise UnsupportedOption(f"flag_set = {flag_set!r}: expected one of {FLAG_SETS}")
    for opt in ("attention_backend", "prefill_backend", "decode_backend", "moe_runner", "kv_cache_dtype"):
        _check(flag_set, opt, getattr(cfg, opt))
    for opt in ("tp_size", "ep_size", "cuda_graph_max_bs"):
        v = getattr(cfg, opt)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise UnsupportedOption(f"{opt} = {v!r}: expected a positive integer")
    if cfg.mem_fraction_static is not None and not (0 < cfg.mem_fraction_static < 1):
        raise UnsupportedOption(f"mem_fraction_static = {cfg.mem_fraction_static!r}: expected a fraction in (0, 1)")
    sparse = "--nsa" if flag_set == "early-2026" else "--dsa"
    a = [python or sys.executable, "-m", "sglang.launch_server", "--model-path", cfg.model_path,
         "--host", host, "--port", str(port)]
    if cfg.served_model_name:
        a += ["--served-model-name", cfg.served_model_name]
    a += ["--tp-size", str(cfg.tp_size)]
    if cfg.enable_ep_moe:
        if flag_set == "0.5.23":
            raise UnsupportedOption(
                "enable_ep_moe=True: --enable-ep-moe was removed in sglang 0.5.23; set ep_size=N instead")
        a += ["--enable-ep-moe"]
    if cfg.ep_size is not None:
        a += ["--ep-size", str(cfg.ep_size)]
    if cfg.quantization:
        a += ["--quantization", cfg.quantization]
    if cfg.attention_backend:
        a += ["--attention-backend", cfg.attention_backend]
    if cfg.prefill_backend:
        a += [f"{sparse}-prefill-backend", cfg.prefill_backend]
    if cfg.decode_backend:
        a += [f"{sparse}-decode-backend", cfg.decode_backend]
    if cfg.moe_runner:
        a += ["--moe-runner-backend", cfg.moe_runner]
    if cfg.fp8_gemm_backend:
        a += ["--fp8-gemm-backend", cfg.fp8_gemm_backend]
    if cfg.kv_cache_dtype:
        a += ["--kv-cache-dtype", cfg.kv_cache_dtype]
    if cfg.mem_fraction_static is not None:
        a += ["--mem-fraction-static", f"{cfg.mem_fraction_static:g}"]
    if not cfg.cuda_graph:
        a += (["--disable-cuda-graph"] if flag_set == "early-2026" else
              ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"])
    elif cfg.cuda_graph_max_bs is not None:
        a += ["--cuda-graph-max-bs", str(cfg.cuda_graph_max_bs)]
    if not cfg.custom_all_reduce:
        a += ["--disable-custom-all-reduce"]
    a += list(cfg.extra_args)
    if available is not None:
        missing = [f for f in a if f.startswith("--") and f.split("=")[0] not in available]
        if missing:
            raise UnsupportedOption(
                f"the installed sglang does not accept {', '.join(missing)} (flag set {flag_set!r}); "
                "check `python -m sglang.launch_server --help` and choose the matching flag set or option")
    return a


def commands(cfg: SGLangConfig, port: int = 30000):
    """`cfg`'s launch command under every flag set, one row each (derived from the configuration)."""
    import pandas as pd

    return pd.DataFrame([{"flag set": fs, "command (derived from the recorded configuration)":
                          " ".join(build_argv(cfg, fs, port=port, python="python3")[1:])} for fs in FLAG_SETS])


def refusal(cfg: SGLangConfig, flag_set: str) -> str:
    """The message with which `build_argv` refuses `cfg` under `flag_set`; ValueError if it accepts it."""
    try:
        build_argv(cfg, flag_set)
    except UnsupportedOption as e:
        return str(e)
    raise ValueError(f"flag set {flag_set!r} accepts {cfg}; expected a refusal")


def flags_from_help(help_text: str) -> set[str]:
    """The long options listed by `python -m sglang.launch_server --help`."""
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", help_text))


_RECORDED_FLAGS = {
    "--nsa-prefill-backend": "prefill_backend", "--nsa-decode-backend": "decode_backend",
    "--dsa-prefill-backend": "prefill_backend", "--dsa-decode-backend": "decode_backend",
    "--attention-backend": "attention_backend", "--moe-runner-backend": "moe_runner",
    "--quantization": "quantization", "--fp8-gemm-backend": "fp8_gemm_backend",
    "--mem-fraction-static": "mem_fraction_static", "--tp-size": "tp_size", "--ep-size": "ep_size",
    "--kv-cache-dtype": "kv_cache_dtype", "--served-model-name": "served_model_name",
}


def from_launch_table(df, model_path: str) -> tuple[SGLangConfig, dict[str, str], int | None]:
    """(config, environment, port) from a table shaped like data/recorded/launch_config.csv
    (columns kind, name, value)."""
    kw: dict = {"model_path": model_path}
    env: dict[str, str] = {}
    port = None
    for r in df.itertuples():
        value = None if r.value is None or str(r.value) in ("", "<NA>", "nan") else str(r.value)
        if r.kind == "env":
            env[r.name] = value or ""
        elif r.kind == "setting" and r.name == "cuda_graph_max_batch":
            kw["cuda_graph_max_bs"] = int(value)
        elif r.kind == "flag":
            if r.name == "--disable-custom-all-reduce":
                kw["custom_all_reduce"] = False
            elif r.name == "--disable-cuda-graph":
                kw["cuda_graph"] = False
            elif r.name == "--port":
                port = int(value)
            elif r.name in _RECORDED_FLAGS:
                f = _RECORDED_FLAGS[r.name]
                kw[f] = int(value) if f in ("tp_size", "ep_size") else (
                    float(value) if f == "mem_fraction_static" else value)
            else:
                raise UnsupportedOption(f"recorded flag {r.name!r} has no field in SGLangConfig; add a mapping")
    return SGLangConfig(**kw), env, port


def spec(cfg: SGLangConfig, flag_set: str, env: dict | None = None, host: str = "127.0.0.1",
         port: int | None = None, name: str = "sglang", available: set[str] | None = None) -> ServerSpec:
    port = port or free_port(host)
    return ServerSpec(argv=tuple(build_argv(cfg, flag_set, host, port, available=available)), port=port,
                      host=host, env=dict(env or {}), health_path="/health", name=name)


def installed_versions() -> dict[str, str | None]:
    """Versions of sglang and flashinfer (None where not installed)."""
    from importlib import metadata

    out = {}
    for key, dists in (("sglang", ("sglang",)), ("flashinfer", ("flashinfer-python", "flashinfer"))):
        out[key] = None
        for d in dists:
            try:
                out[key] = metadata.version(d)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


_BACKEND_LINE = re.compile(r"(attention|nsa|dsa|moe[ _-]runner)[^\n]{0,60}backend", re.I)


def backend_lines(log_text: str) -> list[str]:
    """Lines of a server log that name the attention / sparse-attention / MoE backends it chose."""
    return [ln.strip() for ln in log_text.splitlines() if _BACKEND_LINE.search(ln)]

