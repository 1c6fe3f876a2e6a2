"""Chapter 06 (notebooks/06_vm_p2p.ipynb), the VM without P2P: what the chapter presents.

`PARAMS` is the chapter's parameter spec (the runbook checks a run's values against it before the run
starts; the notebook validates with it). The sections' values, tables, sentences and figures live in one
module per group of sections and are all reachable from here:

- `link`: sections 1 and 2 (the recorded link, the P2P matrix, the copy sweeps, the harness floor);
- `sweeps`: section 3 (collectives, NCCL variants, fits);
- `fidelity`: section 4 (our timing against nccl-tests and p2pBandwidthLatencyTest);
- `hostpath`: section 5 (the host-path study);
- `figures`: the copy figure and the fidelity-ratio figure;
- `replay`: what `auto` saves beside the suite's tables, and mode `replay`, which loads them back.
- `sections`: the sections that gather several of these pieces (the page's opening values, section 4,
  section 5), one function each returning a helpers.chapters.parts.Part.

Glued values are frozen dataclasses whose fields are the glue keys (`glue_all(ch.recorded_link(...))`);
sentences that depend on the machine or the mode are whole variants chosen by a tested function, and
every pick of a row raises helpers.core.pick.PickError naming what it did not find. The chapter saves its
tables through helpers.core.layout.Run (declared in layout.RESULTS) and reads chapter 01's probe through
its declared need.

    from helpers.chapters import vm_p2p as ch
    P = params.validate({...}, ch.PARAMS)
    RUN = layout.Run(P["run_dir"], "06_vm_p2p")
"""
from __future__ import annotations

from helpers.core import params
from helpers.interconnect import nodes as multinode, suite as ic

from helpers.chapters.vm_p2p.fidelity import (  # noqa: F401 - the chapter's names, reached as ch.<name>
    COPY_VERDICTS, AnswerValues, FidelityValues, answer_values, allreduce_ratio_table, copy_table, fidelity_findings, gap_table, largest_setup,
    verdict_table, verdicts)
from helpers.chapters.vm_p2p.figures import copy_figure, fidelity_ratio_figure  # noqa: F401
from helpers.chapters.vm_p2p.hostpath import (  # noqa: F401
    HOSTPATH_NEEDS, HostpathExpectation, hostpath_decode_table, hostpath_findings, hostpath_summary, hostpath_text)
from helpers.chapters.vm_p2p.link import (  # noqa: F401
    HarnessFloor, LargestCopy, decode_sizes_text, P2PPanel, RecordedLink, decode_copy_table, diagnosis_fits_text, harness_floor, harness_rule, largest_copy,
    largest_copy_text, p2p_answer,
    p2p_panel, recorded_link, where_measured)
from helpers.chapters.vm_p2p.replay import SavedSuite, cuda_p2p, measure, saved_hostpath, saved_suite  # noqa: F401
from helpers.chapters.vm_p2p.words import md  # noqa: F401
from helpers.chapters.vm_p2p.sections import (  # noqa: F401
    HostpathTexts, OverviewTexts, fidelity_section, hostpath_section, overview_section)
from helpers.chapters.parts import Part, save  # noqa: F401
from helpers.chapters.vm_p2p.sweeps import (  # noqa: F401
    Variants, collective_text, decode_collectives, fit_text, fits_table, plan_text, variant_figure_rows, variants)

#: the glued keys whose text differs in mode replay (they say the page presents a run's saved results
#: again); every other key a replay glues is the `auto` execution's, value for value (tests/test_replay.py)
REPLAY_KEYS = ("where",)

#: the chapter's parameter specs: the notebook validates with them, the runbook checks a run's values against them
PARAMS = {"mode": params.choice("recorded", "auto", "replay"), "run_dir": params.string(),
          "sweep": params.choice(*ic.PRESETS),
          "world_size": params.depends(params.number(0, 1024, integer=True), "nnodes", multinode.world_size_rule),
          "nccl_variants": params.string(allow_empty=False), "worker_timeout_s": params.number(1, 3600),
          "hostpath_arms": params.string(allow_empty=False), "hostpath_world_sizes": params.number_list(1, 1024, integer=True),
          "hostpath_from": params.string(), "nnodes": params.number(1, 1024, integer=True),
          "rdzv_endpoint": params.depends(params.string(), "nnodes", multinode.endpoint_rule),
          "rdzv_timeout_s": params.number(1, 3600)}
