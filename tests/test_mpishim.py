"""benchmarks/fidelity/mpishim: the MPI calls nccl-tests makes, for one process per GPU on one host
without MPI, and helpers.interconnect.fidelity.run_processes, which starts the processes (real processes,
compiled here with g++)."""
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

from helpers.interconnect.fidelity import run_processes

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "benchmarks" / "fidelity" / "mpishim"


@pytest.fixture(scope="module")
def shimcheck(tmp_path_factory):
    if not shutil.which("g++"):
        pytest.skip("needs g++ to build the shim's check program")
    exe = tmp_path_factory.mktemp("shim") / "shimcheck"
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{SHIM}", str(SHIM / "shimcheck.cc"), str(SHIM / "mpishim.cc"),
                    "-o", str(exe)], check=True)
    return exe


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_every_call_across_processes(shimcheck, n):
    rc, text = run_processes([str(shimcheck)], n, 60, {})
    assert rc == 0, text
    want = (f"rank 0 size {n} sum {n * (n + 1) / 2:g} min {100 - (n - 1)} max {n - 1} hash_last {1000 + n - 1} "
            f"id unique-id split {n}")
    assert text.startswith(want), text                       # rank 0's output only
    assert text.split()[-n:] == [f"line-{r}" for r in range(n)]


def test_a_rank_that_hangs_is_killed_and_every_rank_reported(tmp_path):
    hang_s = 60                                              # rank 1's own end, were it not killed
    hang = f"import os, time; time.sleep({hang_s} if os.environ['NCCLTESTS_SHIM_RANK'] == '1' else 0); print('done')"
    t0 = time.monotonic()
    rc, text = run_processes([sys.executable, "-c", hang], 2, 3, {})
    assert rc == 124 and time.monotonic() - t0 < hang_s     # killed at its 3-s limit, not waited for
    assert "[rank 0, exit 0]" in text and "[rank 1, exit 124]" in text and "timeout after 3" in text


def test_without_the_launcher_the_shim_says_how_to_start_it(shimcheck):
    p = subprocess.run([str(shimcheck)], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "NCCLTESTS_SHIM_RANK" in p.stderr
