"""The typed settings the serving chapters hand to this package: built once from a chapter's validated
parameters at the chapter boundary (helpers.chapters.*.config), never read from a parameter dict below it.

    ServerChoice   which server a chapter measures: a given one (`url`), or one it launches (engine, model, device)
    TinyModel      the random-weight MoE built for transformers serve
    SweepConfig    chapter 03's concurrency sweep (workloads, concurrencies, server variants)
    RunnerConfig   chapter 04's MoE-runner comparison
    NanConfig      chapter 02's NaN matrix (its decode wave)
    StudyConfig    chapter 03's load study (SLO, share, arrivals, requests per point, time bound, trace)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .client import Workload
from .loadspec import SLO


@dataclass(frozen=True)
class TinyModel:
    hidden: int = 64
    layers: int = 2
    experts: int = 4
    moe_intermediate: int = 64
    heads: int = 4


@dataclass(frozen=True)
class ServerChoice:
    """A given server (`url`, `served_model`, and what the reader says it is), or the one a chapter launches."""
    mode: str = "auto"                  # recorded, auto or live (the chapter's mode)
    engine: str = "transformers"        # transformers or sglang (a launched server)
    device: str = "cpu"
    url: str = ""                       # a running server to measure; empty: launch one
    served_model: str = ""              # the model name to request; empty: the first the server lists
    served_engine: str = ""             # what the reader says the given server runs (engine and version)
    served_hardware: str = ""           # and on what hardware
    model_path: str = ""                # sglang's checkpoint (and the tokenizer of a given server's prompts)
    flag_set: str = "auto"
    tp_size: int = 8
    tiny: TinyModel = field(default_factory=TinyModel)
    startup_timeout_s: float = 900.0
    health_timeout_s: float | None = None
    request_timeout_s: float = 600.0

    @property
    def given(self) -> bool:
        return bool(self.url)

    @property
    def real_engine(self) -> bool:
        """Whether what this choice measures is a real serving engine: a given server or sglang (not the tiny
        random-weight model under transformers serve)."""
        return self.given or self.engine == "sglang"


@dataclass(frozen=True)
class SweepConfig:
    workloads: tuple[Workload, ...]
    concurrencies: tuple[int, ...]
    variants: tuple[str, ...]
    variant_workloads: str = "first"
    requests_per_concurrency: int = 5

    def workloads_for(self, i: int) -> list[Workload]:
        """The workloads variant number `i` sweeps: all for the first (or with variant_workloads 'all')."""
        return list(self.workloads) if i == 0 or self.variant_workloads == "all" else list(self.workloads[:1])


@dataclass(frozen=True)
class RunnerConfig:
    runners: tuple[str, ...]
    repeats: int
    workload: Workload
    concurrencies: tuple[int, ...]
    requests_per_concurrency: int = 5


@dataclass(frozen=True)
class NanConfig:
    decode_concurrency: int = 4
    decode_tokens: int = 32
    never_healthy_timeout_s: float = 6.0


#: what load_modes asks for: "on" runs the full study where a real engine or a given server is measured and the
#: harness check elsewhere; "check" and "full" force one
STUDY_KINDS = ("off", "on", "check", "full")


@dataclass(frozen=True)
class StudyConfig:
    kind: str                           # one of STUDY_KINDS
    slo: SLO
    slo_text: str                       # the SLO as given (shown on the page)
    slo_share: float = 0.9
    burstiness: float = 1.0
    rate_points: int = 4
    load_requests: int = 8
    load_time_s: float = 120.0
    workload: Workload = Workload(64, 64)
    concurrencies: tuple[int, ...] = (1, 4, 16)
    ramp_s: float = 1.0
    trace: str = ""                     # a JSONL trace to replay ("" none, "synthetic" the committed one)

    def resolved(self, server: ServerChoice) -> str:
        """'off', 'check' (the harness check against the stand-in) or 'full' (the study against the server)."""
        if self.kind == "on":
            return "full" if server.real_engine else "check"
        return self.kind
