"""A GPU tier's evidence as `helpers.book.gputier.run` leaves it, made in a test: a JUnit report in pytest's form
(its suite named for the commit) and the record of it, with the report's SHA-256."""
import hashlib
from pathlib import Path
from xml.sax.saxutils import quoteattr

from helpers.book import gputier

STARTED = "2026-12-04T12:00:00+00:00"
SUITE = "gpu-tier@"          # the suite name gputier.run asks pytest for, then the commit


def _case(node: str, inner: str = "") -> str:
    """A <testcase> whose classname and name gputier reads back as `node` (tests/test_x.py::test_y, t.py::a)."""
    path, _, name = node.rpartition("::")
    classname = path[:-3].replace("/", ".") if path.endswith(".py") else path
    return f"<testcase classname={quoteattr(classname)} name={quoteattr(name)} time=\"0.1\">{inner}</testcase>"


def write_report(run_dir: Path, passed=(), failed=(), skipped=(), commit="abc1234") -> Path:
    """`run_dir`/gpu-tier.xml holding these tests (skipped: (name, reason) pairs)."""
    cases = ([_case(n) for n in passed] + [_case(n, '<failure message="boom">boom</failure>') for n in failed]
             + [_case(n, f"<skipped type=\"pytest.skip\" message={quoteattr(r)}>{r}</skipped>") for n, r in skipped])
    n = len(cases)
    xml = (f'<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite '
           f'name="{SUITE}{commit}" errors="0" failures="{len(failed)}" skipped="{len(skipped)}" '
           f'tests="{n}" time="1.0" timestamp="2026-12-04T12:00:00.5+00:00" hostname="vm">{"".join(cases)}'
           f"</testsuite></testsuites>")
    path = Path(run_dir) / gputier.JUNIT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(xml)
    return path


def tier_record(run_dir: Path, passed=("t.py::a",), failed=(), skipped=(), code=0, commit="abc1234") -> dict:
    """The record gputier.run would make of a tier with these tests, its report written in `run_dir`."""
    report = write_report(run_dir, passed, failed, skipped, commit)
    rec = gputier.record(gputier.parse_junit(report), commit, code, STARTED, 1.0)
    return {**rec, "report_sha256": hashlib.sha256(report.read_bytes()).hexdigest()}
