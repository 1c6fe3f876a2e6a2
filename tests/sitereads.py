"""What the site-reading guards (tests/test_site_read5.py, test_site_read6.py) read: a repository file's text, a
notebook's markdown cells, and the original VM's verdict at GLM-5's registered inputs, built as chapter 07 builds it."""
import json
from pathlib import Path

from helpers import repo_root

ROOT = Path(repo_root())


def source(path: str) -> str:
    """The text of `path`, relative to the repository root."""
    return (ROOT / path).read_text()


def markdown(nb: str) -> str:
    """The markdown cells of notebook `nb` (a path relative to the root), joined by newlines."""
    cells = json.loads(source(nb))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def verdict():
    """The verdict on the original VM from the committed step measurement and precision study (context 384)."""
    from helpers.model import measured as mb
    from helpers.model import verdict as vd

    meas = mb.step_measurement(None)
    return vd.Verdict.build("glm5", 384, meas.floor_us(), mb.precision_study(None))


def observations():
    """The observations the verdict scores (helpers.model.verdict.ranges.observations)."""
    from helpers.model.verdict.ranges import observations as obs

    return obs()
