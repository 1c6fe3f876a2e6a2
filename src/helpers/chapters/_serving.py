"""What the three serving chapters (02 the NaN crash, 03 baselines, 04 MoE runners) share: the parts of
their parameter specs (a chapter's `PARAMS` is put together from them) and the recorded serving table.

The rules between parameters (a tiny model that would not fit in this machine's memory, a sweep that
would send too many requests) are checked before a run starts (helpers.book.precheck) and again in the
notebook's validation cell; the estimates they use are computed in helpers.serving.experiments.
"""
from __future__ import annotations

import pandas as pd

from helpers.core import params, recorded
from helpers.serving import client as cl, experiments as ex, live, sglang as sg
from helpers.serving.config import ServerChoice, TinyModel


def _tiny_memory_rule(hidden, layers, experts, moe_intermediate):
    need, have = ex.tiny_memory_bytes(hidden, layers, experts, moe_intermediate), ex.machine_memory_bytes()
    if need > have // 2:
        return (f"the tiny model these sizes describe needs about {need / 2**30:.1f} GiB to build and serve "
                f"(estimated: float32 parameters x 3), more than half of this machine's {have / 2**30:.1f} GiB; "
                f"make tiny_hidden, tiny_layers, tiny_experts or tiny_moe_intermediate smaller")
    return None


def _tiny_heads_rule(heads, hidden):
    if hidden % heads or (hidden // heads) % 2:
        return (f"tiny_hidden ({hidden}) must be tiny_heads x an even head size; set tiny_heads to a divisor of "
                f"tiny_hidden that leaves an even quotient (e.g. {max(1, hidden // 16)})")
    return None


def _sweep_size_rule(concurrencies, per):
    total = sum(cl.requests_for(int(c), int(per)) for c in concurrencies)
    if total > ex.MAX_SWEEP_REQUESTS:
        return (f"one sweep of one workload would send {total} requests (requests_per_concurrency x each "
                f"concurrency), more than {ex.MAX_SWEEP_REQUESTS}; use fewer or smaller concurrencies or fewer "
                f"requests per concurrency")
    return None


#: assumed, not measured: the least time one decode step of a live serving sweep takes (s) per engine, a lower
#: bound (the 2-core development machine's transformers steps of the tiny model took tens of ms; an sglang step
#: on a GPU takes milliseconds); a sweep's estimate built on it is the least time the sweep can take
STEP_S_FLOOR = {"transformers": 0.005, "sglang": 0.002}


def sweep_estimate(sweeps: list[list], concurrencies: list, per: int, engine: str, names: tuple[str, ...],
                   fix: str) -> "params.Estimate":
    """The least time of live sweeps run in one cell (derived from an assumed step time): each point sends
    requests_per_concurrency x concurrency requests, `concurrency` at a time, plus one warm-up request, so at
    least (requests_per_concurrency + 1) waves of output_len decode steps each; `sweeps` lists each server's
    workloads (helpers.serving.client.Workload)."""
    step_s = STEP_S_FLOOR[engine]
    steps = sum(len(concurrencies) * (per + 1) * wl.output_len for wls in sweeps for wl in wls)
    points = sum(len(concurrencies) * len(wls) for wls in sweeps)
    how = (f"{points} points, {steps:,} decode steps (each point (requests_per_concurrency + 1) waves of output_len "
           f"steps) x an assumed least {step_s * 1e3:g} ms per step of {engine}, a lower bound")
    return params.Estimate(steps * step_s, names, how, fix)


def baseline_time(v: dict) -> "params.Estimate | None":
    """PLAN_TIME of chapter 03: its live sweep (every variant, the first with every workload), or None where
    it does not run live (recorded, or auto with transformers and no server given)."""
    engine = "sglang" if v["server_url"] else v["engine"]
    if v["mode"] == "recorded" or (v["mode"] == "auto" and engine != "sglang"):
        return None
    wls = v["workloads"]
    sweeps = [wls] if v["server_url"] else [wls if i == 0 or v["variant_workloads"] == "all" else wls[:1]
                                            for i in range(len(v["variants"]))]
    return sweep_estimate(sweeps, v["concurrencies"], v["requests_per_concurrency"], engine,
                          ("concurrencies", "requests_per_concurrency", "workloads", "variants", "variant_workloads"),
                          "use fewer concurrencies, workloads or variants, fewer requests_per_concurrency or "
                          "shorter outputs")


def runner_time(v: dict) -> "params.Estimate | None":
    """PLAN_TIME of chapter 04: every runner's `repeats` sweeps of its workload, or None where it does not run
    live (recorded, or auto with transformers)."""
    if v["mode"] == "recorded" or (v["mode"] == "auto" and v["engine"] != "sglang"):
        return None
    sweeps = [[v["workload"]]] * (len(v["runners"]) * v["repeats"])
    return sweep_estimate(sweeps, v["concurrencies"], v["requests_per_concurrency"], v["engine"],
                          ("runners", "repeats", "concurrencies", "requests_per_concurrency", "workload"),
                          "use fewer runners, repeats or concurrencies, fewer requests_per_concurrency or a shorter "
                          "output")


MODE = {"mode": params.choice("recorded", "auto", "live"), "run_dir": params.string()}
SGLANG = {"model_path": params.string(), "flag_set": params.choice("auto", *sg.FLAG_SETS),
          "tp_size": params.number(1, 64, integer=True)}
TINY = {"tiny_hidden": params.depends(params.number(8, 8192, integer=True),
                                      ("tiny_layers", "tiny_experts", "tiny_moe_intermediate"), _tiny_memory_rule),
        "tiny_layers": params.number(1, 64, integer=True),
        "tiny_experts": params.number(1, 256, integer=True),
        "tiny_moe_intermediate": params.number(8, 16384, integer=True),
        "tiny_heads": params.depends(params.number(1, 128, integer=True), "tiny_hidden", _tiny_heads_rule)}
SWEEP = {"concurrencies": params.depends(params.number_list(1, 4096, integer=True), "requests_per_concurrency",
                                         _sweep_size_rule),
         "requests_per_concurrency": params.number(1, 1000, integer=True),
         "startup_timeout_s": params.number(1, 3600), "request_timeout_s": params.number(1, 3600),
         "health_timeout_s": params.number(0.5, 600)}
ENGINE = {"engine": params.choice(*live.ENGINES), "device": params.choice("cpu", "cuda")}


def short_why(why: str) -> str:
    """Why a live run did not happen, in its first clause (the details are the rerun appendix's)."""
    return str(why).split(" (", 1)[0].strip()


def recorded_serving() -> pd.DataFrame:
    """The recorded serving figures (data/recorded/serving.csv), which chapters 03 and 04 cite."""
    return recorded.load("recorded/serving.csv")


def server_choice(P: dict) -> ServerChoice:
    """The server a serving chapter measures, typed once from its validated parameters (the chapter boundary:
    nothing below helpers.chapters reads the parameter dict)."""
    tiny = TinyModel(*(int(P[k]) for k in ("tiny_hidden", "tiny_layers", "tiny_experts", "tiny_moe_intermediate",
                                           "tiny_heads"))) if "tiny_hidden" in P else TinyModel()
    return ServerChoice(mode=P["mode"], engine=P["engine"], device=P["device"], url=P.get("server_url", ""),
                        served_model=P.get("served_model", ""), served_engine=P.get("served_engine", ""),
                        served_hardware=P.get("served_hardware", ""), model_path=P.get("model_path", ""),
                        flag_set=P.get("flag_set", "auto"), tp_size=int(P.get("tp_size", 8)), tiny=tiny,
                        startup_timeout_s=float(P["startup_timeout_s"]),
                        health_timeout_s=float(P["health_timeout_s"]) if "health_timeout_s" in P else None,
                        request_timeout_s=float(P["request_timeout_s"]))
