"""benchmarks/bench_parity.py's report, split and second rule (issue 46), and the closed loop's counted first wave
(helpers.serving.points, LoadPlan.count_ramp) that the second rule runs the book with.

- --report CSV prints the tables from a CSV alone: on a small CSV here, and on the committed 2026-12-06 run, whose
  ratio table it must print as that run printed it.
- --points, --resume and --report refuse bad input with the input named and the fix.
- The spread rule: a tool's first wave more than 10x and 50 ms wider than the book's.
- count_ramp against a real stand-in: every request counted, none sent in addition, the first wave started on its
  schedule (the stand-in's own record, on the client's clock: the server runs in this process).
- --resume against a real stand-in process: kept rows are not run again, new ones are appended.
"""
import csv
import importlib.util
import json
import math
import time
import urllib.request

import pytest

from helpers import repo_root
from helpers.serving.client import BenchmarkError, Workload
from helpers.serving.loadspec import SLO
from helpers.serving.points import Load, LoadPlan, measure
from helpers.serving.standin import StandIn

COMMITTED = repo_root() / "benchmarks" / "results" / "parity-20261206"


def _parity():
    spec = importlib.util.spec_from_file_location("bench_parity", repo_root() / "benchmarks" / "bench_parity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(point, rep, tool, metric, ratio, rule=None, compared="from send", book_burst=1.0, tool_burst=1.0,
         spread=""):
    r = {"point": point, "repeat": rep, "tool": tool, "metric": metric, "compared": compared,
         "book_ms": 20.0 * ratio, "tool_ms": 20.0, "ratio": ratio, "book_server_ttft_ms": 20.0,
         "tool_server_ttft_ms": 20.0, "book_server_read_ms": 0.3, "tool_server_read_ms": 0.3,
         "book_burst_ms": book_burst, "tool_burst_ms": tool_burst}
    if rule is not None:
        r.update(rule=rule, book_start_spread_ms=spread)
    return r


def _write(path, rows):
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, restval="")
        w.writeheader()
        w.writerows(rows)
    return str(path)


def test_report_from_a_small_csv_prints_both_rules_side_by_side(tmp_path, capsys):
    bp = _parity()
    own, like = bp.RULE_OWN, bp.RULE_TOOL
    rows = []
    for rep, (x, y) in enumerate(((1.20, 1.01), (1.10, 1.03), (1.16, 0.99)), 1):
        rows += [_row("c=16", rep, "slowstart", "ttft", x, own, book_burst=5.0, tool_burst=500.0),
                 _row("c=16", rep, "slowstart", "ttft", y, like, book_burst=480.0, tool_burst=500.0, spread=500.0),
                 _row("c=16", rep, "slowstart", "tpot", 1.0, own, compared="as defined"),
                 _row("c=1", rep, "slowstart", "ttft", 1.0 + rep / 100, own, book_burst=float("nan"),
                      tool_burst=float("nan"))]
    assert bp.main(["--report", _write(tmp_path / "p.csv", rows)]) == 0
    out = capsys.readouterr().out.splitlines()
    ttft = [x for x in out if x.startswith("c=16") and " ttft " in x]
    # the first rule's row first, as it always was; the second after it, marked, never instead of it
    assert ttft[0] == "c=16     slowstart       ttft  from send  1.160 [1.100 - 1.200]  OUTSIDE 10 %"
    assert ttft[1].startswith("c=16     slowstart       ttft  from send  1.010 [0.990 - 1.030]  within 10 %  <- "
                              "book with the tool's start pattern (500 ms, 3 repeats)")
    # the points in order c=1 before c=16 (the CSV has them the other way round)
    assert [x[:5] for x in out if x.startswith("c=")][:2] == ["c=1  ", "c=16 "]
    assert "book's own start: 2 of 3 within 10 %; outside: ttft at c=16 against slowstart 1.160" in out
    assert "book with the tool's start pattern: 1 of 1 within 10 % (where the spread rule applied)" in out
    assert any(x.startswith("c=16     slowstart          500     480.00     500.00") for x in out)


def test_report_of_a_csv_from_before_the_rule(tmp_path, capsys):
    """No `rule` column: every row is the first rule's; where the spread rule would apply, the report says the CSV
    holds no run of the book with the tool's pattern."""
    bp = _parity()
    rows = [_row("c=4", 1, "t", "ttft", 1.0, book_burst=0.8, tool_burst=115.0),
            _row("c=4", 1, "u", "ttft", 1.0, book_burst=0.8, tool_burst=1.5)]
    bp.main(["--report", _write(tmp_path / "old.csv", rows)])
    out = capsys.readouterr().out
    assert "c=4      t               the spread rule applies (repeats 1" in out
    assert "c=4      u               the spread rule" not in out
    assert "book with the tool's start pattern: no point where the spread rule applied was run" in out


def test_report_reproduces_the_committed_run_table(capsys):
    """The 2026-12-06 run's ratio table, line for line, from its parity.csv alone."""
    bp = _parity()
    bp.main(["--report", str(COMMITTED / "parity.csv")])
    got = [x for x in capsys.readouterr().out.splitlines() if x[:2] in ("c=", "r=")
           and (x.endswith("10 %") or " n/a (" in x)]
    want = [x for x in (COMMITTED / "parity.log").read_text().splitlines() if x[:2] in ("c=", "r=")
            and (x.endswith("10 %") or " n/a (" in x)]
    assert len(want) == 75 and got == want


def test_the_spread_rule():
    rule = _parity().spread_rule
    assert rule(5.25, 499.77) and rule(5.25, 338.68) and rule(0.79, 114.5)      # the 2026-12-06 run's three
    assert not rule(0.79, 1.53) and not rule(5.25, 4.99)                        # guidellm at c=4, aiperf at c=16
    assert not rule(10.0, 59.0)              # 50 ms wider but not 10x
    assert not rule(1.0, 40.0)               # 40x but not 50 ms wider
    assert not rule(float("nan"), 500.0) and not rule(1.0, float("nan"))       # no burst at c=1 or a rate


@pytest.mark.parametrize("args, says", [
    (["--report", "no/such.csv"], "--report no/such.csv: no such file"),
    (["--points", "c3"], "'c3' is not a point of this configuration (c1,c4,c16,r8,r24"),
    (["--points", "q8"], "name points as c<concurrency> or r<rate>"),
    (["--book-spread-ms", "0"], "--book-spread-ms 0: expected a spread in ms above 0"),
    (["--aiperf", "x"], "--tokenizer: the tools need a local Hugging Face tokenizer folder"),
])
def test_bad_options_name_the_input_and_the_fix(args, says):
    with pytest.raises(SystemExit) as e:
        _parity().main(args)
    assert says in str(e.value)


def test_report_and_resume_refuse_a_csv_that_is_not_theirs(tmp_path):
    bp = _parity()
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match=r"--report .*other.csv: not a parity CSV .* \(no column point, repeat"):
        bp.main(["--report", str(other)])
    old = _write(tmp_path / "old.csv", [_row("c=4", 1, "t", "ttft", 1.0)])   # no configuration columns
    with pytest.raises(SystemExit, match="its rows carry no configuration"):
        bp.main(["--resume", old])
    row = {**_row("c=4", 1, "t", "ttft", 1.0, bp.RULE_OWN),
           **{f"cfg_{k}": v for k, v in (("requests", 8), ("input_tokens", 16), ("output_tokens", 32),
                                         ("ttft_s", 0.02), ("interval_s", 0.01))}}
    new = _write(tmp_path / "new.csv", [row])
    with pytest.raises(SystemExit, match=r"line 2: written with \{'cfg_requests': 8.0\}, this run has "
                                         r"\{'cfg_requests': 32\}; resume a CSV of the same configuration"):
        bp.main(["--resume", new])
    bad = tmp_path / "bad.csv"
    bad.write_text(open(new).read().replace("\nc=4,1,", "\nc=4,one,"))
    with pytest.raises(SystemExit, match="bad.csv, line 2: .*not a number where one is expected"):
        bp.main(["--report", str(bad)])


def test_count_ramp_is_for_a_closed_loop_only():
    plan = LoadPlan(Workload(4, 2), SLO(), 4, count_ramp=True)
    with pytest.raises(BenchmarkError, match="count_ramp with the open load r=2: .*leave count_ramp False"):
        measure("http://127.0.0.1:9", "m", Load.open(2.0), plan)


def _log(url, since=0):
    with urllib.request.urlopen(f"{url}/standin/log?since={since}", timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_counted_first_wave_starts_on_its_schedule_against_a_real_standin():
    """c=3 slots over ramp_s: with count_ramp the point sends `requests` in all and counts every one; without, c
    more, excluded. The stand-in runs in this process, so its record is on the client's clock: slot i cannot be
    accepted before i ramp_s / c after the point began, and no slot's second request before the server's own TTFT
    (ttft_s >= ramp_s), so at most i acceptances come before i ramp_s / c - whatever the machine's load."""
    c, n, ramp_s = 3, 6, 0.3
    with StandIn(ttft_s=0.4, interval_s=0.001) as srv:
        plan = LoadPlan(Workload(4, 3), SLO(), n, ramp_s=ramp_s, count_ramp=True)
        t0 = time.perf_counter()
        row = measure(srv.url, "standin", Load.closed(c), plan)
        log = _log(srv.url)
        assert log["count"] == n and row["requests_measured"] == n and row["ramp_requests"] == 0
        assert row["completed"] == n and not any(r["ramp"] for r in row["records"])
        accepted = sorted(r["accepted"] for r in log["requests"])
        assert all(a >= t0 for a in accepted)
        for i in range(c):
            assert sum(a < t0 + i * ramp_s / c for a in accepted) <= i, (i, [a - t0 for a in accepted])
        # the client's own record: the first wave's starts no earlier than their slots' offsets
        starts = sorted(r["start_s"] for r in row["records"])
        assert all(starts[i] >= i * ramp_s / c - 1e-6 for i in range(c)), starts
        # the same point as the load study runs it: c more requests, the first wave excluded (marked ramp)
        row2 = measure(srv.url, "standin", Load.closed(c), LoadPlan(Workload(4, 3), SLO(), n, ramp_s=ramp_s))
        assert _log(srv.url)["count"] == n + n + c
        assert row2["requests_measured"] == n and row2["ramp_requests"] == c
        assert sum(r["ramp"] for r in row2["records"]) == c


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_resume_runs_only_the_rows_it_lacks_against_a_real_standin(tmp_path, capsys):
    """The book alone (no tool), 4 requests: a first call at c=2, then a resumed call at c=2 and r=8 keeps the first
    call's rows as they were, runs only r=8, and its report covers both."""
    bp = _parity()
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    base = ["--requests", "4", "--repeats", "1", "--concurrencies", "2", "--rates", "8", "--ttft-s", "0.01",
            "--interval-s", "0.002"]
    assert bp.main(base + ["--points", "c2", "--out", str(one)]) == 0
    first = bp.read_rows(str(one))
    assert {r["point"] for r in first} == {"c=2"} and {r["tool"] for r in first} == {bp.BOOK_ONLY}
    capsys.readouterr()
    assert bp.main(base + ["--resume", str(one), "--out", str(two)]) == 0
    out = capsys.readouterr().out
    assert f"repeat 1 c=2: in {one}, not run again" in out and "repeat 1 r=8.0: " in out
    both = bp.read_rows(str(two))
    assert len(both) == 2 * len(first) and [r["point"] for r in both[:len(first)]] == ["c=2"] * len(first)
    kept = both[:len(first)]
    assert all(math.isclose(a["book_ms"], b["book_ms"]) for a, b in zip(first, kept))
    assert {r["point"] for r in both[len(first):]} == {"r=8.0"}
