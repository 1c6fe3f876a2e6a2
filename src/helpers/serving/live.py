"""What the serving chapters run live: which engine this machine can use, the model to serve, the
server variants, and the sweeps (each server started, swept, and stopped before the next).

Engines: "transformers" (`transformers serve`, CPU or one GPU, tiny random-weight models built at run
time) and "sglang" (the investigation's server; needs sglang, GPUs and a real checkpoint).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pandas as pd

from helpers.serving import classify, client as cl, demo, sglang as sg, sweep, tiny_model, transformers_serve as ts
from helpers.serving.server import Server, ServerSpec

ENGINES = ("transformers", "sglang")
#: server variants per engine: the tuning knobs each engine has (first = the baseline)
VARIANTS = {
    "transformers": ("batched", "unbatched"),     # continuous batching on / off
    # the recorded configuration / CUDA graphs off; plus "mem-fraction-F" (F in (0, 1)) for
    # --mem-fraction-static F and "mem-fraction-default" for sglang's own default, combinable with "+"
    # (e.g. "no-cuda-graph+mem-fraction-default")
    "sglang": ("cuda-graph", "no-cuda-graph"),
}


def sglang_variant(variant: str) -> dict:
    """The SGLangConfig changes a variant name stands for; ValueError naming it if unknown."""
    changes: dict = {}
    for part in variant.split("+"):
        if part in ("cuda-graph", "no-cuda-graph"):
            changes["cuda_graph"] = part == "cuda-graph"
        elif part == "mem-fraction-default":
            changes["mem_fraction_static"] = None   # sglang's own default
        elif part.startswith("mem-fraction-"):
            try:
                f = float(part[len("mem-fraction-"):])
            except ValueError:
                f = -1.0
            if not 0 < f < 1:
                raise ValueError(f"variant {variant!r}: {part!r} needs a fraction in (0, 1), e.g. mem-fraction-0.85")
            changes["mem_fraction_static"] = f
        else:
            raise ValueError(f"variant {variant!r} is not an sglang variant; expected "
                             f"{VARIANTS['sglang']} or 'mem-fraction-F', joined with '+'")
    changes.setdefault("cuda_graph", True)
    return changes
#: MoE runners per engine (transformers: experts implementations; sglang: --moe-runner-backend)
RUNNERS = {
    "transformers": ("eager", "grouped_mm", "batched_mm", "deepgemm", "sonicmoe"),
    "sglang": sg.MOE_RUNNERS,
}


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def sglang_ready(model_path: str) -> tuple[bool, str]:
    """Whether a live sglang run can happen here, and why not."""
    v = sg.installed_versions()
    if v["sglang"] is None:
        return False, "sglang is not installed (it needs a CUDA build of torch; see the appendix on re-running)"
    if gpu_count() == 0:
        return False, "no NVIDIA GPU is visible"
    if not model_path or not Path(model_path).exists():
        return False, f"the model path {model_path!r} does not exist (set `model_path`)"
    return True, f"sglang {v['sglang']}, flashinfer {v['flashinfer']}, {gpu_count()} GPU(s)"


def model_cache() -> Path:
    """Where built models live: $BOOK_MODEL_CACHE or a folder in the temporary directory (never the
    run directory: a run is committed, models are rebuilt)."""
    p = Path(os.environ.get("BOOK_MODEL_CACHE") or Path(tempfile.gettempdir()) / "glm5-book-models")
    p.mkdir(parents=True, exist_ok=True)
    return p


def tiny_spec(hidden: int, layers: int, experts: int, moe_intermediate: int, heads: int, device: str,
              vocab: int = 512) -> tiny_model.TinyModelSpec:
    return tiny_model.TinyModelSpec(hidden_size=hidden, num_layers=layers, num_experts=experts,
                                    moe_intermediate_size=moe_intermediate, num_heads=heads, vocab_size=vocab,
                                    experts_per_token=min(2 if experts < 8 else 4, experts),
                                    dtype="float32" if device == "cpu" else "bfloat16")


def build_tiny(spec: tiny_model.TinyModelSpec, device: str = "cpu") -> Path:
    import hashlib
    import json

    key = hashlib.sha1(json.dumps(spec.as_dict(), sort_keys=True).encode()).hexdigest()[:10]
    return tiny_model.build(model_cache() / f"tiny-{key}", spec, device=device)


def transformers_spec(model_dir: str | Path, variant: str, device: str, name: str | None = None) -> ServerSpec:
    if variant not in VARIANTS["transformers"]:
        raise ValueError(f"variant {variant!r} is not a transformers-serve variant; expected one of "
                         f"{VARIANTS['transformers']}")
    cfg = ts.TransformersServeConfig(model=str(model_dir), device=device, continuous_batching=variant == "batched")
    return ts.spec(cfg, name=name or variant)


def sglang_spec(base: sg.SGLangConfig, env: dict, flag_set: str, variant: str = "cuda-graph",
                name: str | None = None, **changes) -> ServerSpec:
    cfg = replace(base, **{**sglang_variant(variant), **changes})
    return sg.spec(cfg, flag_set, env=env, name=name or variant)


def server_settings(spec: ServerSpec) -> dict:
    """What of a server's launch its measurements depend on: its command line without the host and port
    (a fresh free port each launch), its extra environment and its memory cap."""
    argv, skip = [], False
    for a in spec.argv:
        if skip:
            skip = False
            continue
        if a in ("--port", "--host"):
            skip = True
            continue
        argv.append(a)
    return {"server_argv": argv, "server_env": dict(spec.env), "server_memory_mb": spec.memory_mb}


def sweep_server(spec: ServerSpec, model: str, rows_path: Path, log_dir: Path, workloads: Sequence[cl.Workload],
                 concurrencies: Sequence[int], labels: dict, per_concurrency: int, tokenizer=None,
                 startup_timeout_s: float = 300, request_timeout_s: float = 600) -> pd.DataFrame:
    """Start `spec`, sweep it (resuming from `rows_path`: only points not yet done under these settings,
    the server's command line among them), stop it. Skips the launch when every point is already there.
    Each row carries the server's peak memory so far and its cap."""
    extra = server_settings(spec)
    st = sweep.point_settings(model, per_concurrency, 1, tokenizer, extra)
    todo = sweep.pending(rows_path, labels, workloads, concurrencies, st)
    if not todo:
        return sweep.rows_frame(rows_path, labels, settings_id=sweep.settings_id(st))
    left = sweep.time_left()
    if left is not None and left <= 0:   # the cell's budget is spent: do not launch a server for nothing
        from helpers.core import results

        if not sweep._CLOCK.get("measured"):   # and nothing measured in this cell: a resume would do the same
            raise sweep.SweepCannotProgress(sweep.cannot_progress(
                f"{todo[0][0].name} x {todo[0][1]}", None, f"the cell's time was spent before server {spec.name!r} "
                "was launched"))
        results.mark_partial(Path(rows_path).parent, f"server {spec.name!r} was not launched: the cell's time was "
                             f"spent; {len(todo)} point(s) left")
        print(f"partial: server {spec.name!r} not launched, the cell's time was spent; {len(todo)} point(s) left")
        return sweep.rows_frame(rows_path, labels, settings_id=sweep.settings_id(st))
    with Server(spec, Path(log_dir) / f"{spec.name}.log", startup_timeout_s=startup_timeout_s) as srv:
        return sweep.sweep(rows_path, spec.base_url, model, workloads, concurrencies, labels=labels,
                           per_concurrency=per_concurrency, tokenizer=tokenizer, timeout_s=request_timeout_s,
                           settings=extra, extra_columns=lambda: {"server_peak_rss_mib": srv.peak_rss_mib(),
                                                                  "server_memory_cap_mib": spec.memory_mb})


def tokenizer_for(model_dir: str | Path | None):
    if not model_dir or not Path(model_dir).is_dir():
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_dir))
    except Exception:  # noqa: BLE001 - prompts fall back to words; usage still counts tokens
        return None


def runner_model(model_dir: Path, runner: str) -> Path:
    """A variant folder of `model_dir` that selects experts implementation `runner`."""
    return demo.variant(model_dir, model_cache() / f"{Path(model_dir).name}-experts-{runner}",
                        experts_implementation=runner)


def attempt_runner(name: str, spec: ServerSpec, model: str, log_dir: Path, startup_timeout_s: float) -> dict:
    """Launch once to classify a runner (ok / unsupported / crash / ...) before sweeping it."""
    a = classify.attempt(name, spec, model, log_dir, startup_timeout_s=startup_timeout_s, decode_concurrency=2,
                         decode_tokens=8, test=classify.SmokeTest(max_tokens=8))
    return a.as_row()


#: the most workloads, variants or runners one chapter sweeps (each is a whole sweep)
MAX_NAMES = 16


def _workloads(v):
    if not isinstance(v, list) or not 1 <= len(v) <= MAX_NAMES:
        raise ValueError
    try:
        return [cl.Workload.parse(x) for x in v]
    except cl.BenchmarkError:
        raise ValueError from None


def _names(v):
    if not isinstance(v, list) or not 1 <= len(v) <= MAX_NAMES or not all(isinstance(x, str) and 0 < len(x) <= 200
                                                                          for x in v):
        raise ValueError
    return list(v)


def workloads_param():
    """params.Spec for a list of 'INPUT/OUTPUT' workload strings."""
    from helpers.core import params

    return params.Spec(f"a list of 1 to {MAX_NAMES} 'INPUT/OUTPUT' token counts, each side 1 to {cl.MAX_TOKENS}, "
                       "e.g. ['256/256', '128/512']", _workloads)


def workload_param():
    """params.Spec for one 'INPUT/OUTPUT' workload string (a Workload once validated)."""
    from helpers.core import params

    return params.Spec(f"'INPUT/OUTPUT' token counts, each side 1 to {cl.MAX_TOKENS}, e.g. '256/256'",
                       lambda v: _workloads([v])[0])


def names_param(what: str):
    from helpers.core import params

    return params.Spec(f"a list of 1 to {MAX_NAMES} {what} names (strings)", _names)


def names_rule(param: str, allowed_by_engine: dict, server_url: bool = False):
    """A params.depends rule for a list of `param` names (variants, runners) that checks them against the
    engine's names where the chapter runs live (mode other than "recorded", and, with `server_url`, no server
    given), so the runbook refuses an unknown name before the run, not when the chapter reaches it."""
    def rule(given, engine, mode, url=""):
        if mode == "recorded" or (server_url and url) or engine not in allowed_by_engine:
            return None
        try:
            check_names(param, given, allowed_by_engine[engine], engine)
        except ValueError as e:
            return str(e).split(": ", 1)[-1].split(". Fix:")[0]
        return None

    return rule


def check_names(param: str, given: list[str], allowed: Sequence[str], engine: str) -> None:
    from helpers.core import params

    def known(v):
        if v in allowed:
            return True
        if engine == "sglang" and param == "variants":
            try:
                sglang_variant(v)
                return True
            except ValueError:
                return False
        return False

    bad = [v for v in given if not known(v)]
    if bad:
        raise params.ParameterError(
            f"parameter '{param}' = {given!r}: {bad} not known for engine {engine!r}; expected names from "
            f"{list(allowed)}. Fix: set `{param}` in the target's parameters file or pass -p {param} ...")
