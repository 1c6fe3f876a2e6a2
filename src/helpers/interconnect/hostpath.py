"""The host-path study: all-reduce across N ranks under named NCCL arms, the original VM's collective path.

The original VM's GPUs could not reach each other (P2P "not supported"), so every all-reduce there went
through host memory; no all-reduce was ever timed on it. A multi-GPU host reproduces that path with
`NCCL_P2P_DISABLE=1` (NCCL's shared-memory transport: each rank copies through a host buffer), and
reproduces what NCCL *believed* about the VM with an `NCCL_TOPO_FILE` written at run time from this
machine's bus ids (helpers.interconnect.topology: one flat host bridge, no NUMA affinity, the recorded
link). `ARMS` is that table, name -> setting (helpers.interconnect.settings, the one registry of NCCL
settings); every result row carries its arm's name and settings next to the Method that timed it
(suite.VARIANT_METHOD on GPUs: ncclAllReduce in CUDA graphs, every rank launched at one deadline; on CPU
processes, which have no CUDA graphs, `CPU_METHOD`). How the time grows with the ranks, and the figure at
eight ranks where fewer were measured, is helpers.interconnect.growth.

    cfg = StudyConfig(arms=arm_names("all"), world_sizes=(2, 4, 8))
    res = run_study(cfg, "runs/<id>/results/06_vm_p2p/hostpath", log=print)
    res.sweep      # one row per arm x world size x size (collectives.tidy columns + ARM_COLUMNS)
    res.runs       # one row per launch: ok, failed, timeout, skipped (with the reason) or not started
    growth.at_world_size(res.sweep, 8)   # measured at 8 ranks, or derived from 2 and 4 where 8 was not measured

One launch (torchrun) per arm and world size, with a time limit each; a launch that fails is reported
and the next one runs. Finished points are kept per launch in a folder named by the launch's settings
(arm, environment, topology file contents, backend, ranks, method, repetition counts), so a second call
measures only what is missing; `budget_s` stops starting launches that would not finish in time.
On a CPU machine the arms that set NCCL variables are skipped with that reason (gloo has no NCCL
transport to change) and the default arm runs between CPU processes.

    python -m helpers.interconnect.hostpath --out DIR [--arms all] [--world-sizes 2,4,8] [--plan]
    python -m helpers.interconnect.hostpath --write-topology FILE [--world-size N]
    env $(python -m helpers.interconnect.hostpath --env host --out DIR) <command>   # one arm's environment
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from helpers.interconnect import collectives, copies as copybench, suite, topology
from helpers.interconnect.growth import ranks_text
from helpers.interconnect.method import Method, MethodError
from helpers.interconnect.settings import ARMS, NcclSetting


class StudyError(ValueError):
    """A study that cannot run as asked (an unknown arm, a bad world size); the message names the fix."""


# ------------------------------------------------------------------------------------------ the arms
#: The study's arms are the NCCL settings of helpers.interconnect.settings that the host-path study runs
#: (settings.ARMS, in the order they run). The first four are the path itself; the rest are NCCL's tuning
#: knobs under the host path.
MAIN_ARMS = ("default", "host", "host+cuda_memcpy", "host+cuda_memcpy+vm_topology")
#: The arms launched at every world size, for the growth with N; the others run at the largest world size
#: the machine fits (eight where there are eight GPUs: the original VM's count).
GROWTH_ARMS = MAIN_ARMS
ARM_GROUPS = {"all": tuple(ARMS), "main": MAIN_ARMS, "tuning": tuple(a for a in ARMS if a not in MAIN_ARMS)}
#: The arm whose figure stands for "the original VM's path" where the text needs one, and the reference.
HOST_ARM, P2P_ARM, VM_ARM = "host", "default", "host+cuda_memcpy+vm_topology"


def arms_table(names: Sequence[str] = tuple(ARMS)) -> pd.DataFrame:
    """The arms for a reader: name, settings, largest size ('' = the study's) and what each is."""
    from helpers.core.plotting import bytes_label

    return pd.DataFrame([{"arm": a.name, "settings": a.settings,
                          "largest message": bytes_label(a.max_bytes) if a.max_bytes else "the study's",
                          "what": a.what} for a in (ARMS[n] for n in names)],
                        columns=["arm", "settings", "largest message", "what"])


def arm_names(spec: str | Sequence[str]) -> tuple[str, ...]:
    """'all', 'main', 'tuning', 'none' or comma-separated arm names (or a list of them) -> arm names."""
    if isinstance(spec, str):
        s = spec.strip()
        if s in ("none", ""):
            return ()
        if s in ARM_GROUPS:
            return ARM_GROUPS[s]
        spec = [x.strip() for x in s.split(",") if x.strip()]
    names = []
    for x in spec:
        names += list(ARM_GROUPS[x]) if x in ARM_GROUPS else [x]
    bad = [x for x in names if x not in ARMS]
    if bad:
        raise StudyError(f"unknown host-path arm(s) {bad}; choose 'all', 'main', 'tuning', 'none' or names "
                         f"from {list(ARMS)}")
    return tuple(dict.fromkeys(names))


def parse_world_sizes(spec) -> tuple[int, ...]:
    """'2,4,8' or [2, 4, 8] -> (2, 4, 8): ranks per launch, each an integer >= 1, in the order given."""
    items = [x.strip() for x in spec.split(",") if x.strip()] if isinstance(spec, str) else list(spec)
    out = []
    for x in items:
        try:
            n = int(x)
        except (TypeError, ValueError):
            n = None
        if n is None or isinstance(x, bool) or n < 1 or (isinstance(x, float) and x != n):
            raise StudyError(f"world size {x!r} must be an integer >= 1 (ranks, one per GPU), e.g. '2,4,8'")
        out.append(n)
    if not out:
        raise StudyError("no world size given; e.g. '2,4,8'")
    return tuple(dict.fromkeys(out))


# ------------------------------------------------------------------------------------------ configuration
#: The method the variant sweep uses, on GPUs; gloo cannot capture CUDA graphs or call libnccl, so CPU
#: processes are timed by the same clock and start without them (eager torch.distributed).
GPU_METHOD = suite.VARIANT_METHOD
CPU_METHOD = suite.VARIANT_METHOD.but(api="torch", harness="eager")


@dataclass(frozen=True)
class StudyConfig:
    """What one study measures: arms x world sizes x sizes (min_bytes to max_bytes, x factor, plus the
    decode sizes), the repetitions of every point, the time limit of one launch and, if set, the time
    budget of the whole call (no launch starts whose estimate would pass it)."""
    arms: tuple[str, ...] = tuple(ARMS)
    world_sizes: tuple[int, ...] = (8, 4, 2)
    min_bytes: int = 4
    max_bytes: int = 256 * 2**20
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    repeats: int = 5
    dtype: str = "float32"
    timeout_s: float = 240.0
    budget_s: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "arms", arm_names(list(self.arms)))
        object.__setattr__(self, "world_sizes", parse_world_sizes(list(self.world_sizes)))
        for k in ("iters", "repeats"):
            if getattr(self, k) < 1:
                raise StudyError(f"{k} = {getattr(self, k)!r} must be >= 1")
        if self.warmup < 0:
            raise StudyError(f"warmup = {self.warmup!r} must be >= 0")
        if not self.timeout_s > 0:
            raise StudyError(f"timeout_s = {self.timeout_s!r} must be a positive number of seconds (one launch)")
        if self.budget_s is not None and not self.budget_s > 0:
            raise StudyError(f"budget_s = {self.budget_s!r} must be a positive number of seconds, or None")

    def sizes(self, arm: NcclSetting) -> list[int]:
        """The arm's message sizes: the geometric sweep up to the arm's limit, plus the decode sizes."""
        top = min(self.max_bytes, arm.max_bytes or self.max_bytes)
        dec = copybench.decode_message_sizes()["size_bytes"].tolist()
        return copybench.sweep_sizes(self.min_bytes, max(top, self.min_bytes), self.factor, dec, multiple_of=4)


PRESETS = {
    "full": StudyConfig(),
    # CPU machines and tests: a few sizes, few repetitions
    "quick": StudyConfig(min_bytes=64, max_bytes=2**20, factor=16, iters=5, warmup=1, repeats=2, timeout_s=90),
}


# ------------------------------------------------------------------------------------------ the plan
@dataclass
class Launch:
    arm: NcclSetting
    world_size: int
    backend: str                 # nccl | gloo
    method: Method
    sizes: list[int]
    skip: str = ""               # why it does not run on this machine ("" = it runs)


@dataclass
class StudyPlan:
    launches: list[Launch] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)    # what this machine cannot run, and why


def plan_study(cfg: StudyConfig, gpus: int, cpus: int) -> StudyPlan:
    """The launches this machine can make: one per world size x arm (world sizes in the order given, then
    arms; the arms outside GROWTH_ARMS at the largest world size only), on NCCL with one GPU per rank where there are GPUs, else on gloo between CPU processes (where
    the NCCL-only arms are skipped with their reason). World sizes beyond the GPUs (or cores) here are
    left out with a statement saying what a derived figure will stand in for."""
    p = StudyPlan()
    backend = "nccl" if gpus else "gloo"
    cap = gpus if gpus else max(1, cpus)
    kept = [n for n in cfg.world_sizes if n <= cap]
    dropped = [n for n in cfg.world_sizes if n > cap]
    unit = "GPU" if gpus else "CPU core"
    if dropped:
        p.statements.append(
            f"{ranks_text(dropped)} need as many {unit}s and this machine has {cap}: "
            f"not measured here" + ("; where two world sizes of 2 or more were measured, the figure for "
                                    f"{ranks_text(dropped)} is extrapolated from them (derived, with its assumption stated)"
                                    if len([n for n in kept if n >= 2]) >= 2 else "") + ".")
    if not gpus:
        p.statements.append("This machine has no GPU: the study runs between CPU processes with gloo, so only the "
                            "default arm runs (the others set NCCL variables) and its figures are not GPU figures.")
    method = GPU_METHOD if gpus else CPU_METHOD
    largest = max(kept, default=0)
    for n in kept:
        for name in cfg.arms:
            arm = ARMS[name]
            if name not in GROWTH_ARMS and n != largest:
                continue          # tuning arms: at the largest world size only (the VM's count, where it fits)
            skip = ""
            if backend == "gloo" and arm.nccl_only:
                skip = (f"{arm.settings} is read by NCCL only: gloo between CPU processes has no NCCL transport "
                        "for it to change")
            p.launches.append(Launch(arm, n, backend, method, cfg.sizes(arm), skip))
    return p


# ------------------------------------------------------------------------------------------ time estimates
#: What a launch's time estimate assumes: torchrun and NCCL start-up, a fixed cost per size (allocation,
#: graph capture, barriers, the aligned start's lead), and per all-reduce alpha + bytes x 2(N-1)/N / busbw.
#: The host figures are assumed below what two H200s measured with P2P off (run h200x2-20261129f: 256 MiB
#: in about 10 ms, busbw about 27 GB/s), since eight ranks share one host's memory.
ESTIMATE = {"startup_s": 12.0, "per_size_s": 0.05,
            "p2p": {"alpha_us": 10.0, "busbw_GBps": 150.0}, "host": {"alpha_us": 30.0, "busbw_GBps": 10.0}}


def calls_per_size(method: Method, iters: int, warmup: int, repeats: int) -> int:
    """All-reduces of one size a worker makes: the correctness check, the warm-up, (graph: one before
    capture and the first replay of `iters`), then `repeats` timed blocks of `iters`."""
    return 1 + warmup + ((1 + iters) if method.harness == "graph" else 0) + repeats * iters


def estimate_launch_s(sizes: Sequence[int], world_size: int, calls: int, alpha_us: float, busbw_GBps: float,
                      startup_s: float = ESTIMATE["startup_s"], per_size_s: float = ESTIMATE["per_size_s"]) -> float:
    """Seconds one launch takes, estimated: startup_s + sum over sizes of (per_size_s + calls x (alpha +
    S x 2(N-1)/N / busbw)). Bytes / (GB/s x 1e3) is microseconds."""
    f = collectives.bus_factor("all_reduce", world_size) if world_size > 1 else 0.0
    per_call_us = [alpha_us + s * f / (busbw_GBps * 1e3) for s in sizes]
    return startup_s + sum(per_size_s + calls * t / 1e6 for t in per_call_us)


def launch_estimate_s(l: Launch, cfg: StudyConfig, sizes: Sequence[int] | None = None) -> float:
    path = ESTIMATE["host" if dict(l.arm.env).get("NCCL_P2P_DISABLE") == "1" else "p2p"]
    bw = path["busbw_GBps"] / (2 if dict(l.arm.env).get("NCCL_PROTO") == "LL" else 1)   # LL: half the bytes are flags
    return estimate_launch_s(l.sizes if sizes is None else sizes, l.world_size,
                             calls_per_size(l.method, cfg.iters, cfg.warmup, cfg.repeats), path["alpha_us"], bw)


def plan_table(plan: StudyPlan, cfg: StudyConfig) -> pd.DataFrame:
    """The plan for a reader: per launch, arm, ranks, sizes and the estimated seconds (skipped: 0)."""
    rows = [{"arm": l.arm.name, "world_size": l.world_size, "backend": l.backend, "sizes": len(l.sizes),
             "max_bytes": max(l.sizes), "estimate_s": 0.0 if l.skip else round(launch_estimate_s(l, cfg), 1),
             "skip": l.skip} for l in plan.launches]
    return pd.DataFrame(rows, columns=["arm", "world_size", "backend", "sizes", "max_bytes", "estimate_s", "skip"])


# ------------------------------------------------------------------------------------------ environment
def cuda_bus_ids() -> list[str]:
    """The PCI bus ids of the GPUs in CUDA's order (the order LOCAL_RANK picks them), through torch where it
    reports them, else NVML's order (PCI order, which CUDA follows for identical GPUs)."""
    try:
        import torch

        if torch.cuda.is_available():
            ids = []
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                if not all(hasattr(p, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
                    ids = []
                    break
                ids.append(f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0")
            if ids:
                return ids
    except Exception:   # noqa: BLE001 - fall back to NVML
        pass
    return topology.bus_ids_of_this_machine()


def _sm() -> int | None:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return 10 * major + minor
    except Exception:   # noqa: BLE001
        pass
    return None


TOPOLOGY_DIR = "topology"


def write_vm_topology(path: str | Path, world_size: int, bus_ids: Sequence[str] | None = None,
                      sm: int | None = None, link: topology.Link | None = None) -> str:
    """Write the VM topology XML for the GPUs `world_size` ranks use (the first N bus ids in CUDA's order:
    `bus_ids`, default this machine's) to `path`; returns its digest. StudyError with fewer GPUs than ranks."""
    ids = list(cuda_bus_ids() if bus_ids is None else bus_ids)
    if len(ids) < world_size:
        raise StudyError(f"a VM topology of {world_size} GPUs needs {world_size} GPU bus ids; found {len(ids)} "
                         "(torch device properties, then NVML): run it on a GPU host with nvidia-ml-py, or leave "
                         "the VM-topology arm out")
    xml = topology.vm_topology_xml(ids[:world_size], link or topology.recorded_vm_link(),
                                   sm=_sm() if sm is None else sm)
    topology.write(xml, path)
    return hashlib.sha1(xml.encode()).hexdigest()[:12]


def arm_env(arm: NcclSetting, world_size: int, out_dir: str | Path, bus_ids: Sequence[str] | None = None,
            sm: int | None = None, link: topology.Link | None = None) -> tuple[dict[str, str], str]:
    """The environment a launch of `arm` on `world_size` ranks runs with, and the VM topology's digest
    ('' without one). A VM-topology arm writes <out_dir>/topology/vm-topology-n<N>.xml (write_vm_topology)
    and names it, as an absolute path, in NCCL_TOPO_FILE."""
    env = arm.environment
    if not arm.vm_topology:
        return env, ""
    path = Path(out_dir) / TOPOLOGY_DIR / f"vm-topology-n{world_size}.xml"
    digest = write_vm_topology(path, world_size, bus_ids, sm, link)
    env["NCCL_TOPO_FILE"] = str(path.resolve())
    return env, digest


def shown_env(env: dict[str, str], out_dir: str | Path) -> str:
    """An arm's environment as rows carry it: NCCL_TOPO_FILE relative to the study folder."""
    parts = []
    for k, v in env.items():
        if k == "NCCL_TOPO_FILE":
            try:
                v = str(Path(v).resolve().relative_to(Path(out_dir).resolve()))
            except ValueError:
                pass
        parts.append(f"{k}={v}")
    return " ".join(parts) or "NCCL defaults"


# ------------------------------------------------------------------------------------------ resume
POINTS_DIR = "points"


def launch_key(l: Launch, cfg: StudyConfig, topo_digest: str = "") -> dict:
    """Everything that makes two launches' points the same measurement; their folder is named by it."""
    env = {k: v for k, v in l.arm.env}
    if l.arm.vm_topology:
        env["NCCL_TOPO_FILE"] = f"vm-topology:{topo_digest}"
    return {"arm": l.arm.name, "env": env, "backend": l.backend, "world_size": l.world_size,
            "method": l.method.label, "dtype": cfg.dtype, "iters": cfg.iters, "warmup": cfg.warmup,
            "repeats": cfg.repeats}


def key_folder(key: dict) -> str:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return f"{collectives.slug(key['arm'])}-n{key['world_size']}-{digest}"


def kept_points(folder: Path, method: Method) -> dict[int, dict]:
    """The finished all-reduce points in a launch's folder, by size (the last one of a size wins); points
    timed by another method are not this launch's and are refused."""
    from helpers.core.results import read_rows

    out: dict[int, dict] = {}
    for f in sorted(Path(folder).glob("points-*.jsonl"), key=lambda p: p.stat().st_mtime):
        for r in read_rows(f):
            if r.get("op") != "all_reduce":
                continue
            if Method.from_row(r) != method:
                raise StudyError(f"{f} holds a point timed by {r.get('method')!r}, not {method.label!r}: the "
                                 "folder is another launch's; remove it or use another study folder")
            out[int(r["size_bytes"])] = r
    return out


def copy_points(src: str | Path, dst: str | Path) -> int:
    """Bring a study's finished points (its points/ and topology/ folders) from `src` into `dst`, keeping
    what `dst` already has; returns the number of point files copied."""
    src, dst, n = Path(src), Path(dst), 0
    if not (src / POINTS_DIR).is_dir():
        raise StudyError(f"{src} has no {POINTS_DIR}/ folder: it is not a host-path study's folder "
                         "(python -m helpers.interconnect.hostpath --out writes one)")
    for sub in (POINTS_DIR, TOPOLOGY_DIR):
        for f in (src / sub).rglob("*") if (src / sub).is_dir() else []:
            target = dst / f.relative_to(src)
            if f.is_file() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)
                n += f.suffix == ".jsonl"
    return n


# ------------------------------------------------------------------------------------------ running
#: The study's rows: collectives.tidy's columns, then the arm's name, settings as run and topology digest.
ARM_COLUMNS = ["arm", "arm_settings", "arm_env", "vm_topology"]
SWEEP_COLUMNS = collectives.TIDY_COLUMNS + ARM_COLUMNS
RUN_COLUMNS = ["arm", "world_size", "backend", "method", "status", "points", "kept_points", "new_points",
               "planned_points", "wall_s", "estimate_s", "arm_env", "folder", "message"]
STATUSES = ("ok", "failed", "timeout", "skipped", "not started")


@dataclass(frozen=True)
class StudyResult:
    """A host-path study: its all-reduce points (one row per arm x world size x size), its launches (one
    row each, with status and reason), the plan's statements and the plan itself."""
    sweep: pd.DataFrame
    runs: pd.DataFrame
    statements: list
    plan: object


def run_study(cfg: StudyConfig, out_dir: str | Path, log: Callable[[str], None] | None = None,
              progress: bool = False, bus_ids: Sequence[str] | None = None, resume_from: str | Path | None = None,
              gpus: int | None = None, cpus: int | None = None) -> StudyResult:
    """Run (or resume) the study into `out_dir`: per launch its points under points/<settings>/, the
    run table (hostpath_runs.csv, rewritten after every launch) and the sweep (hostpath_sweep.csv).
    `resume_from`: another study folder whose finished points are copied in first. Returns a
    StudyResult. A launch that fails, hangs or cannot start is a row of the run table;
    the others still run."""
    from helpers.core.results import save_table

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if resume_from:
        copy_points(resume_from, out)
    if gpus is None or cpus is None:
        m = suite.machine()
        gpus, cpus = (m.gpus if gpus is None else gpus), (m.cpus if cpus is None else cpus)
    plan = plan_study(cfg, gpus, cpus)
    say = log or (lambda s: None)
    for s in plan.statements:
        say(f"hostpath: {s}")
    t0, results, runs = time.monotonic(), [], []
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(plan.launches), desc="host-path study")
    for i, l in enumerate(plan.launches, 1):
        if bar is not None:
            bar.set_postfix_str(f"{l.arm.name}, {l.world_size} ranks")
        row, rows, digest = run_launch(l, cfg, out, bus_ids, t0)
        if rows:
            results.append((collectives.RunResult(l.arm.name, l.backend, l.world_size, row["status"], None,
                                                  row["wall_s"], row["message"], rows, "", l.method), l.arm,
                            row["arm_env"], digest))
        runs.append(row)
        say(f"hostpath [{i}/{len(plan.launches)}] {l.arm.name}, {l.world_size} ranks: {row['status']}, "
            f"{row['points']} of {row['planned_points']} points ({row['kept_points']} kept, {row['new_points']} new) "
            f"in {row['wall_s']:.1f} s at {time.monotonic() - t0:.0f} s"
            + (f": {row['message'].splitlines()[0][:300]}" if row["message"] and row["status"] != "ok" else ""))
        save_table(out, "hostpath_runs", pd.DataFrame(runs, columns=RUN_COLUMNS))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    sweep = study_table(results)
    runs_df = pd.DataFrame(runs, columns=RUN_COLUMNS)
    save_table(out, "hostpath_sweep", sweep)
    save_table(out, "hostpath_runs", runs_df)
    return StudyResult(sweep, runs_df, plan.statements, plan)


def run_launch(l: Launch, cfg: StudyConfig, out: Path, bus_ids: Sequence[str] | None,
               t0: float) -> tuple[dict, list[dict], str]:
    """One launch of the study (or its skip, or its points kept from an earlier launch): its row of the run
    table, its points (every size it has, kept and new) and the VM topology's digest ('' without one).
    `t0`: when the study started (time.monotonic), for its time budget."""
    row = {"arm": l.arm.name, "world_size": l.world_size, "backend": l.backend, "method": l.method.label,
           "points": 0, "kept_points": 0, "new_points": 0, "planned_points": len(l.sizes), "wall_s": 0.0,
           "estimate_s": 0.0, "arm_env": "", "folder": "", "message": ""}
    rows: list[dict] = []
    digest = ""
    if l.skip:
        row.update(status="skipped", message=l.skip)
        return row, rows, digest
    try:
        env, digest = arm_env(l.arm, l.world_size, out, bus_ids)
        key = launch_key(l, cfg, digest)
        folder = out / POINTS_DIR / key_folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "settings.json").write_text(json.dumps(key, indent=1, sort_keys=True))
        kept = {s: r for s, r in kept_points(folder, l.method).items() if s in l.sizes}
        todo = [s for s in l.sizes if s not in kept]
        est = launch_estimate_s(l, cfg, todo) if todo else 0.0
        row.update(arm_env=shown_env(env, out), folder=str(folder.relative_to(out)),
                   kept_points=len(kept), estimate_s=round(est, 1))
        left = None if cfg.budget_s is None else cfg.budget_s - (time.monotonic() - t0)
        if not todo:
            row.update(status="ok", message="every point kept from an earlier launch")
        elif left is not None and est > left:
            row.update(status="not started",
                       message=f"time budget: this launch is estimated at {est:.0f} s and {max(left, 0):.0f} s "
                               "of the budget are left; run the study again to resume")
        else:
            r = collectives.run_collectives(
                l.backend, l.world_size, todo, ops=("all_reduce",), variant=l.arm.name, env=env,
                warmup=cfg.warmup, iters=cfg.iters, repeats=cfg.repeats, dtype=cfg.dtype,
                timeout_s=cfg.timeout_s, workdir=folder, method=l.method)
            new = {int(p["size_bytes"]): p for p in r.rows if p.get("op") == "all_reduce"}
            kept.update(new)
            row.update(status=r.status, wall_s=round(r.wall_s, 2), new_points=len(new), message=r.message)
        rows = [kept[s] for s in l.sizes if s in kept]
        row["points"] = len(rows)
        if row["status"] == "ok" and len(rows) < len(l.sizes):
            row.update(status="failed", message=(row["message"] + "; " if row["message"] else "")
                       + f"{len(l.sizes) - len(rows)} of {len(l.sizes)} sizes gave no point")
    except (StudyError, topology.TopologyError, collectives.CollectiveConfigError, MethodError) as e:
        row.update(status="failed", message=f"{type(e).__name__}: {e}")
    return row, rows, digest


def study_table(results) -> pd.DataFrame:
    """collectives.tidy of every launch's points, with each row's arm, its settings and the topology digest."""
    frames = []
    for r, arm, env, digest in results:
        t = collectives.tidy([r])
        frames.append(t.assign(arm=arm.name, arm_settings=arm.settings, arm_env=env, vm_topology=digest))
    if not frames:
        return pd.DataFrame(columns=SWEEP_COLUMNS)
    return pd.concat(frames, ignore_index=True)[SWEEP_COLUMNS]


# ------------------------------------------------------------------------------------------ command line
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.interconnect.hostpath", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the study folder (points/, hostpath_sweep.csv, hostpath_runs.csv)")
    ap.add_argument("--preset", default="full", choices=list(PRESETS))
    ap.add_argument("--arms", default="all", help=f"'all', 'main', 'tuning' or comma-separated names of {list(ARMS)}")
    ap.add_argument("--world-sizes", default="8,4,2", help="ranks per launch, in the order run, e.g. 8,4,2 (capped by the GPUs here)")
    ap.add_argument("--max-bytes", default=None, help="largest message (default: the preset's), e.g. 1MiB")
    ap.add_argument("--timeout-s", type=float, default=None, help="time limit of one launch (default: the preset's)")
    ap.add_argument("--budget-s", type=float, default=None, help="no launch starts whose estimate would pass this")
    ap.add_argument("--resume-from", default=None, help="copy another study folder's finished points in first")
    ap.add_argument("--plan", action="store_true", help="print the launches and their estimated time; run nothing")
    ap.add_argument("--gpus", type=int, default=None, help="with --plan: plan for this many GPUs instead of this machine's")
    ap.add_argument("--write-topology", metavar="FILE",
                    help="write the VM topology XML for this machine's GPUs to FILE and exit")
    ap.add_argument("--world-size", type=int, default=0, help="with --write-topology or --env: GPUs to include (0: all)")
    ap.add_argument("--env", metavar="ARM", help="print ARM's environment as NAME=VALUE words (a VM-topology arm "
                                                 "writes its file under --out first) and exit")
    a = ap.parse_args(argv)
    try:
        if a.env:
            arm = ARMS[arm_names(a.env)[0]]
            ids = cuda_bus_ids() if arm.vm_topology else []
            env, _ = arm_env(arm, a.world_size or len(ids), a.out or ".", ids if arm.vm_topology else None)
            print(" ".join(f"{k}={v}" for k, v in env.items()))
            return 0
        if a.write_topology:
            ids = cuda_bus_ids()
            n = a.world_size or len(ids)
            digest = write_vm_topology(a.write_topology, n, ids)
            print(f"wrote {a.write_topology} for {n} GPU(s), bus ids {ids[:n]} (CUDA order), digest {digest}")
            return 0
        cfg = replace(PRESETS[a.preset], arms=arm_names(a.arms), world_sizes=parse_world_sizes(a.world_sizes),
                      budget_s=a.budget_s)
        if a.max_bytes:
            cfg = replace(cfg, max_bytes=copybench.parse_size(a.max_bytes, "--max-bytes"))
        if a.timeout_s:
            cfg = replace(cfg, timeout_s=a.timeout_s)
        if a.plan:
            m = suite.machine() if a.gpus is None else suite.Machine(a.gpus, "", os.cpu_count() or 1, 0)
            plan = plan_study(cfg, m.gpus, m.cpus)
            t = plan_table(plan, cfg)
            pd.set_option("display.width", 200)
            print(t.to_string(index=False))
            for s in plan.statements:
                print(s)
            for n, g in t.groupby("world_size", sort=False):
                print(f"{n} ranks: {len(g[g.skip == ''])} launches, estimated {g.estimate_s.sum():.0f} s")
            print(f"total: estimated {t.estimate_s.sum():.0f} s (assumptions: helpers.interconnect.hostpath.ESTIMATE)")
            return 0
        if not a.out:
            ap.error("--out is required (or --plan, or --write-topology FILE)")
        res = run_study(cfg, a.out, log=lambda s: print(s, flush=True), resume_from=a.resume_from)
    except (StudyError, topology.TopologyError, copybench.SizeError) as e:
        print(f"hostpath: {e}", file=sys.stderr)
        return 2
    r = res.runs
    print(r.groupby("status").size().to_string())
    return 0 if not r.status.isin(["failed", "timeout"]).any() else 1


if __name__ == "__main__":
    raise SystemExit(main())
