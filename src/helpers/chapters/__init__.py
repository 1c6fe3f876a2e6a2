"""One module per notebook: what each chapter presents.

A chapter module holds its notebook's parameter spec (`PARAMS`, a dict of helpers.core.params specs, which
the runbook reads before a run starts and the notebook's validation cell checks against; where a cell runs long,
also `PLAN_TIME(values)`, the least time the plan takes, which the runbook compares with the cell limit), its glued values
as dataclasses whose fields are the glue keys, its tables, its figures and its sentences. The domain
packages (`machine`, `interconnect`, `model`, `serving`) measure and compute; a chapter module presents
what they return. A chapter module imports from `helpers.core` and the domain packages, never from
`helpers.book` (the runbook and the site, above it).

    from helpers.chapters import environment as ch
    P = params.validate({"mode": mode, "run_dir": run_dir}, ch.PARAMS)   # a bad value refused, named
    glue_all(ch.recorded_facts(HW))     # every field of the dataclass (RecordedFacts), glued under its name

`MODULES` maps each notebook stem to its module's name; `module(stem)` imports it.
"""
from __future__ import annotations

import importlib
from types import ModuleType

#: notebook stem -> chapter module under helpers.chapters
MODULES: dict[str, str] = {
    "01_environment": "environment",
    "02_nan_crash": "nan_crash",
    "03_baselines_tuning": "baselines_tuning",
    "04_moe_runners": "moe_runners",
    "05_expert_parallelism": "expert_parallelism",
    "06_vm_p2p": "vm_p2p",
    "07_decode_step": "decode_step",
    "07_diagnosis": "diagnosis",
    "08_this_machine": "this_machine",
    "90_provenance": "provenance",
}


class ChapterError(LookupError):
    """A notebook stem with no chapter module."""


def module(stem: str) -> ModuleType:
    """The chapter module of notebook `stem` (e.g. "06_vm_p2p")."""
    try:
        name = MODULES[stem]
    except KeyError:
        raise ChapterError(f"no chapter module for notebook '{stem}': add it to helpers.chapters.MODULES "
                           f"(known: {', '.join(MODULES)})") from None
    return importlib.import_module(f"helpers.chapters.{name}")
