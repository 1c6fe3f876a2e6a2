"""What one section of a chapter returns to its notebook (`Part`), for the chapters whose sections return
their glued values as dataclasses (decode_step, vm_p2p; the diagnosis's own Part carries a dict of values):
the notebook saves the part's tables (`save`), glue_alls its values, draws its figures and shows its tables
(helpers.core.tables.show_all), so the notebook keeps the calls, the glue and the display, and the section's
logic lives in the chapter module."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Part:
    """`values`: dataclass instances whose fields are glue keys (helpers.core.glue.glue_all(*part.values));
    `tables`: result name -> DataFrame the run keeps (declared in helpers.core.layout for the chapter: `save`);
    `shown`: (DataFrame, helpers.core.tables.show keywords) pairs in page order; `figure`: figure name -> the
    data it is drawn from; `data`: what a later section of the page reads."""
    values: tuple = ()
    tables: dict = field(default_factory=dict)
    shown: tuple = ()
    figure: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)


def save(run, part: Part, *more: Part) -> None:
    """Write the parts' tables into the run (`run`: the chapter's helpers.core.layout.Run, which refuses a
    name helpers.core.layout does not declare for the chapter)."""
    for p in (part, *more):
        for name, table in p.tables.items():
            run.save(name, table)
