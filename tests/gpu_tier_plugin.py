"""The GPU tier's rule, as a pytest plugin (tests/conftest.py loads it): a test marked `gpu` may skip only for
missing hardware, its reason starting with one of helpers.book.gputier.HARDWARE_SKIPS ("no GPU", "one GPU",
"no FP8", "no P2P"); any other skip of a `gpu` test is reported as a failure that names the reason and the rule."""
import pytest

from helpers.book.gputier import HARDWARE_SKIPS, hardware_skip


def _skip_reason(report) -> str:
    lr = report.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("gpu") and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if not hardware_skip(reason):
            report.outcome = "failed"
            report.longrepr = (f"a `gpu` test skipped for {reason!r}: a GPU test may skip only for missing "
                               f"hardware, its reason starting with one of {HARDWARE_SKIPS}")
