"""What a sweep's launch prints, read back: the worker's own lines (its join line, its refusals) and the part
of a failed launch's output that says why.

helpers.interconnect.collectives reports a failed launch with `failure_message`, and the join command of
helpers.interconnect.nodes reports a failed join with it and tells a worker's own lines from torchrun's by
`WORKER_SAYS`; the worker (helpers.interconnect.worker) prints `JOINED_PREFIX` when it has its plan.
"""
from __future__ import annotations

import re

#: the line a joining worker prints when it has the plan (the join command shows it)
JOINED_PREFIX = "helpers.interconnect.worker: joined"
#: how a worker's own lines begin (its join line, its refusals): torchrun's summary names the module without
#: a colon ("helpers.interconnect.worker FAILED")
WORKER_SAYS = ("helpers.interconnect.worker: ", "helpers.interconnect.worker --join: ")


def failure_message(text: str | None, n: int = 1500) -> str:
    """The part of a failed launch's output that says why: a worker's refusal (a line of its own), else the
    first failing rank's own lines (torch prefixes a worker's uncaught error with '[rankN]:'), else the end
    of the output. torchrun's own
    summary, which follows and names no cause, is left out where a rank's lines exist."""
    text = (text or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip() and not set(ln.strip()) <= {"*"}]
    # a worker that refused the sweep (its own SystemExit, e.g. across nodes) says why in one line
    refused = [ln.strip() for ln in lines if ln.startswith(("helpers.interconnect.worker:",
                                                             "helpers.interconnect.worker --join:"))
               and not ln.startswith(JOINED_PREFIX)]
    if refused:
        return "\n".join(dict.fromkeys(refused))[:n]
    ranked = [ln for ln in lines if re.match(r"\[rank\d+\]:", ln)]
    if ranked:
        first = ranked[0].split(":", 1)[0]
        mine = [ln for ln in ranked if ln.startswith(first + ":")]
        # the exception and what follows it (NCCL's own "Last error") first: a table cell shows the start
        exc = [i for i, ln in enumerate(mine) if re.match(r"\[rank\d+\]:\s*[\w.]+(Error|Exception)\b", ln)]
        if exc:
            mine = mine[exc[-1]:] + ["traceback:"] + mine[:exc[-1]]
        return "\n".join(mine)[:n]
    return "\n".join(lines)[-n:]
