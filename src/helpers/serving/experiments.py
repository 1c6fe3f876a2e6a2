"""What the serving chapters run live, one call each: the NaN matrix (chapter 02), the baseline sweep
(chapter 03) and the MoE-runner comparison (chapter 04).

Each takes the typed settings the chapter builds once from its parameters (helpers.serving.config), never
the parameter dict. `*_plan(server, ...)` decides whether the live part runs on this machine and says why (a
`mode = "live"` that cannot run is refused with a ParameterError). Every run writes its finished points at once to a
JSON-lines file in the chapter's results folder (its `layout.Run`) and resumes from it. The chapters'
parameter specs are their modules' `PARAMS` (helpers.chapters.nan_crash, baselines_tuning, moe_runners);
the estimates their rules use (`tiny_memory_bytes`, `MAX_SWEEP_REQUESTS`) are here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from helpers.core import layout, params, recorded
from helpers.machine import gpumon
from helpers.serving import classify, client as cl, demo, live, sglang as sg, sweep, tiny_model
from helpers.serving.config import NanConfig, RunnerConfig, ServerChoice, SweepConfig
from helpers.serving.server import Server

#: the most requests one sweep of one workload may send (sum over its concurrencies of requests per point)
MAX_SWEEP_REQUESTS = 20_000


def machine_memory_bytes() -> int:
    """This machine's physical memory (bytes)."""
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def tiny_memory_bytes(hidden: int, layers: int, experts: int, moe_intermediate: int, vocab: int = 512) -> int:
    """Estimated peak memory of building and serving the tiny model (derived, not measured): its parameters
    (embeddings and head, per layer attention, router, routed experts and a shared expert as
    helpers.serving.tiny_model configures them) in float32, times 3 (the built model, its saved copy read
    back by the server, and the server's working copy)."""
    per_layer = 4 * hidden * hidden + hidden * experts + (experts + 2) * 3 * hidden * moe_intermediate
    n = 2 * vocab * hidden + layers * per_layer
    return 3 * 4 * n


@dataclass(frozen=True)
class Plan:
    """Whether a chapter's live part runs on this machine, and why (or why not)."""
    live: bool
    why: str


def _plan(s: ServerChoice, ready: bool, why: str, auto_runs: bool) -> Plan:
    if s.mode == "live" and not ready:
        raise params.ParameterError(f"mode='live' with engine={s.engine!r} cannot run here: {why}. Use "
                                    "mode='auto' (recorded where it cannot run) or engine='transformers'")
    if s.mode == "recorded":   # chosen, whatever could run here (site-read4 L12: not "sglang is not installed")
        return Plan(False, RECORDED_WHY)
    return Plan(s.mode == "live" or (s.mode == "auto" and ready and auto_runs), why)


#: why nothing ran live where the run chose mode "recorded" (a target's choice, or the reader's)
RECORDED_WHY = ('mode = "recorded" was chosen for this run (recorded figures only; the `cpu-demo` target runs '
                "the live demo)")


def nan_plan(s: ServerChoice) -> Plan:
    """The NaN matrix runs live in mode "live", and in mode "auto" wherever its engine can run."""
    if s.engine == "sglang":
        return _plan(s, *live.sglang_ready(s.model_path), auto_runs=True)
    return _plan(s, True, "transformers serve with tiny random-weight models built here", auto_runs=True)


def baseline_plan(s: ServerChoice, variants: tuple[str, ...]) -> Plan:
    """The sweep runs live in mode "live", and in mode "auto" against a given server or with sglang."""
    if s.url:
        return _plan(s, True, f"benchmarking the running server at {s.url}", auto_runs=True)
    if s.mode != "recorded":
        live.check_names("variants", list(variants), live.VARIANTS[s.engine], s.engine)
    if s.engine == "sglang":
        return _plan(s, *live.sglang_ready(s.model_path), auto_runs=True)
    return _plan(s, True, f"transformers serve on {s.device} with a tiny random-weight MoE model built here",
                 auto_runs=False)


def runner_plan(s: ServerChoice, runners: tuple[str, ...]) -> Plan:
    """The comparison runs live in mode "live", and in mode "auto" with sglang."""
    if s.mode != "recorded":
        live.check_names("runners", list(runners), live.RUNNERS[s.engine], s.engine)
    if s.engine == "sglang":
        return _plan(s, *live.sglang_ready(s.model_path), auto_runs=True)
    return _plan(s, True, f"transformers serve on {s.device}: experts implementations of a tiny random-weight "
                 "MoE", auto_runs=False)


def sglang_base(s: ServerChoice) -> tuple[sg.SGLangConfig, dict, str, dict]:
    """The recorded launch configuration at this run's TP size, its environment, the flag set and the versions."""
    vers = sg.installed_versions()
    fs = sg.flag_set_for(vers["sglang"]) if s.flag_set == "auto" else s.flag_set
    base, env, _ = sg.from_launch_table(recorded.load("recorded/launch_config.csv"), s.model_path)
    return sg.SGLangConfig(**{**base.as_dict(), "tp_size": s.tp_size}), env, fs, vers


def served_tiny_model(s: ServerChoice) -> tuple[Path, int]:
    t = s.tiny
    spec = live.tiny_spec(t.hidden, t.layers, t.experts, t.moe_intermediate, t.heads, s.device)
    return live.build_tiny(spec, device=s.device), tiny_model.param_count(spec)


def with_health(s: ServerChoice, spec):
    """`spec` with the chapter's `health_timeout_s` (the time one /health probe may take to count as healthy;
    a target sets it like any parameter), where the chapter has one."""
    return replace(spec, health_timeout_s=s.health_timeout_s) if s.health_timeout_s is not None else spec


# ---------------------------------------------------------------------------- chapter 02

def nan_matrix(s: ServerChoice, n: NanConfig, run: layout.Run, matrix: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Launch, smoke-test, decode, classify and stop every configuration (the demo's stand-ins under
    transformers serve, or the recorded decode backends under sglang); saves live_matrix.csv."""
    attempts, logs = run.path("attempts"), run.path("logs")
    common = {"decode_concurrency": n.decode_concurrency, "decode_tokens": n.decode_tokens,
              "request_timeout_s": s.request_timeout_s, "backend_line_parser": sg.backend_lines}
    if s.engine == "transformers":
        models = demo.models(live.model_cache() / "demo")

        def run_one(name):
            spec, model = demo.server_spec(name, models, device=s.device)
            spec = with_health(s, spec)
            limit = n.never_healthy_timeout_s if name == "never-healthy" else s.startup_timeout_s
            a = classify.attempt(name, spec, model, logs, startup_timeout_s=limit, **common)
            return {**a.as_row(), "stands_for": demo.DEMO_CONFIGS[name].stands_for}

        # on a GPU host the tiny servers start side by side (each start is seconds of imports on cores the
        # host has plenty of: the lent H200's six took 82 s one after another); on a CPU one at a time
        df = sweep.run_matrix(attempts, list(demo.DEMO_CONFIGS), run_one,
                              workers=len(demo.DEMO_CONFIGS) if str(s.device).startswith("cuda") else 1)
        where = f"measured: this machine, transformers serve on {s.device}, tiny random-weight models"
    else:
        base, env, fs, vers = sglang_base(s)
        tried = {f"decode={b}": b for b in matrix[matrix.component == "nsa_decode"].backend}

        def run_one(name):
            spec = with_health(s, live.sglang_spec(base, env, fs, "cuda-graph", name=name.replace("=", "-"),
                                                   decode_backend=tried[name]))
            a = classify.attempt(name.replace("=", "-"), spec, base.served_model_name or base.model_path, logs,
                                 startup_timeout_s=s.startup_timeout_s, **common)
            return {**a.as_row(), "stands_for": name, "flag_set": fs, **{f"{k}_version": v for k, v in vers.items()}}

        df = sweep.run_matrix(attempts, list(tried), run_one)
        where = f"measured: this machine, sglang {vers['sglang']} (flag set {fs})"
    run.save("live_matrix", df.drop(columns=["log_excerpt"], errors="ignore"))
    return df, where


# ---------------------------------------------------------------------------- chapter 03

def baseline_sweep(s: ServerChoice, sw: SweepConfig, run: layout.Run) -> tuple[pd.DataFrame, str, dict]:
    """Sweep concurrency for every workload and server variant (a given server, or one launched per
    variant); saves sweep.csv. Returns the rows, where they were measured, and facts to glue."""
    rows, logs, wls, facts = run.path("sweep_rows"), run.path("logs"), list(sw.workloads), {}
    sweep.start_cell_clock()   # this cell's long work starts here: each point keeps within its limit
    point = {"per_concurrency": sw.requests_per_concurrency, "timeout_s": s.request_timeout_s}
    if s.url:
        model = s.served_model or cl.served_model(s.url)
        df = sweep.sweep(rows, s.url, model, wls, list(sw.concurrencies), labels={"variant": "external"},
                         tokenizer=live.tokenizer_for(s.model_path or None), **point)
        df = df.assign(**{c: df.get(c) for c in ("server_peak_rss_mib", "server_memory_cap_mib")})  # not ours: unknown
        run.save("sweep", df)
        return df, f"the server at {s.url}", facts
    if s.engine == "transformers":
        model_dir, n_params = served_tiny_model(s)
        facts["tiny_params_m"] = n_params / 1e6
        model, tok = str(model_dir), live.tokenizer_for(model_dir)
        where = f"this machine, transformers serve on {s.device}, a random-weight MoE of {n_params / 1e6:.1f} M parameters"
        spec_for = lambda var: live.transformers_spec(model_dir, var, s.device)  # noqa: E731
    else:
        base, env, fs, vers = sglang_base(s)
        model, tok = base.served_model_name or s.model_path, live.tokenizer_for(s.model_path)
        where = f"this machine, sglang {vers['sglang']} TP{s.tp_size}"
        spec_for = lambda var: live.sglang_spec(base, env, fs, var)  # noqa: E731
    frames = [live.sweep_server(with_health(s, spec_for(var)), model, rows, logs, sw.workloads_for(i),
                                list(sw.concurrencies), {"variant": var}, sw.requests_per_concurrency, tok,
                                s.startup_timeout_s, s.request_timeout_s) for i, var in enumerate(sw.variants)]
    df = pd.concat(frames, ignore_index=True)
    run.save("sweep", df)
    return df, where, facts


#: the sweep table's columns and the GPU profile's (declared in helpers.core.layout.RESULTS)
SWEEP_COLUMNS = list(layout.result("03_baselines_tuning", "sweep").columns)
PROFILE_COLUMNS = list(layout.result("03_baselines_tuning", "gpu_profile").columns)


def gpu_profile(mon: gpumon.Sampler, sweep_df: pd.DataFrame | None, run: layout.Run) -> tuple[pd.DataFrame | None, str]:
    """Medians of the GPU samples per sweep point (saves gpu_profile.csv and gpu_samples.csv), or None
    and why there is none."""
    if not mon.available:
        return None, mon.reason
    if sweep_df is None or mon.frame().empty:
        return None, "no live sweep ran"
    prof = gpumon.by_window(mon.frame(), gpumon.point_windows(sweep_df))[PROFILE_COLUMNS]
    run.save("gpu_profile", prof)
    run.save("gpu_samples", mon.frame())
    return prof, ""


# ---------------------------------------------------------------------------- chapter 04

def runner_comparison(s: ServerChoice, rc: RunnerConfig, run: layout.Run
                      ) -> tuple[pd.DataFrame | None, pd.DataFrame, str]:
    """Launch each MoE runner once to classify it, then sweep the runners that serve `repeats` times on
    one server each; saves runner_status.csv and sweep.csv. Returns (sweep rows or None, status, where)."""
    rows, logs = run.path("sweep_rows"), run.path("logs")
    sweep.start_cell_clock()
    if s.engine == "transformers":
        base_dir, n_params = served_tiny_model(s)
        tok = live.tokenizer_for(base_dir)
        where = f"this machine, transformers serve on {s.device}, random-weight MoE of {n_params / 1e6:.1f} M parameters"
    else:
        base, env, fs, vers = sglang_base(s)
        tok = live.tokenizer_for(s.model_path)
        where = f"this machine, sglang {vers['sglang']} TP{s.tp_size}"
    status, frames = [], []
    for rn in rc.runners:
        if s.engine == "transformers":
            mdir = live.runner_model(base_dir, rn)
            mk_spec = lambda: live.transformers_spec(mdir, "batched", s.device, name=f"runner-{rn}")  # noqa: E731
            model = str(mdir)
        else:
            mk_spec = lambda: live.sglang_spec(base, env, fs, "cuda-graph", name=f"runner-{rn}", moe_runner=rn)  # noqa: E731
            model = base.served_model_name or s.model_path
        att = sweep.run_matrix(run.path("attempts"), [rn], lambda name: live.attempt_runner(
            f"attempt-{name}", with_health(s, mk_spec()), model, logs, s.startup_timeout_s)).iloc[0]
        status.append({"runner": rn, "outcome": att.outcome, "detail": str(att.detail)[:120],
                       "memory": att.get("memory", "")})
        if att.outcome in ("ok", "wrong-answer"):
            frames.append(_repeat_sweeps(s, rc, rn, with_health(s, mk_spec()), model, tok, rows, logs))
    status_df = pd.DataFrame(status)
    run.save("runner_status", status_df)
    df = pd.concat(frames, ignore_index=True) if frames else None
    if df is not None and len(df):
        run.save("sweep", df)
    return df, status_df, where


def _repeat_sweeps(s: ServerChoice, rc: RunnerConfig, runner, spec, model, tok, rows, logs) -> pd.DataFrame:
    """`repeats` sweeps of one runner on one server (skipping the launch when every point is done under
    these settings, the server's command line among them)."""
    server = live.server_settings(spec)
    st = sweep.point_settings(model, rc.requests_per_concurrency, 1, tok, server)
    wl, concs = rc.workload, list(rc.concurrencies)
    if any(sweep.pending(rows, {"runner": runner, "repeat": r}, [wl], concs, st) for r in range(rc.repeats)):
        with Server(spec, logs / f"{spec.name}.log", startup_timeout_s=s.startup_timeout_s) as srv:
            for r in range(rc.repeats):
                sweep.sweep(rows, spec.base_url, model, [wl], concs, labels={"runner": runner, "repeat": r},
                            per_concurrency=rc.requests_per_concurrency, tokenizer=tok,
                            timeout_s=s.request_timeout_s, settings=server,
                            extra_columns=lambda: {"server_peak_rss_mib": srv.peak_rss_mib(),
                                                   "server_memory_cap_mib": spec.memory_mb})
    return sweep.rows_frame(rows, {"runner": runner}, settings_id=sweep.settings_id(st))
