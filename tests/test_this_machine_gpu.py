"""Chapter 08's GPU paths (helpers.interconnect.pairs), run on a GPU host by the GPU tier (`pytest -m gpu`): the
decisive recipe's all-reduce through torch.cuda.nccl with NCCL's INFO log written to a file and read back, and the
pair check in its child process (every pair four ways on two GPUs or more; on one GPU it measures nothing, says
so in its meta, and leaves no all-reduce to price)."""
import os
import subprocess
import sys

import pytest

from helpers.interconnect import pairs as pc
from helpers.model import arith as ma
from helpers.model import thismachine as tm

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def _gpus():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU: no CUDA device")
    return torch.cuda.device_count()


def test_the_recipes_all_reduce_is_timed_as_the_recipe_and_ncclss_log_is_read(tmp_path):
    """One process over every GPU (one rank on a one-GPU host: the code path, not a link), eager, host timer, out
    of place, half precision, at the decode sizes; NCCL's INFO log goes to a file whose version line is read."""
    gpus = _gpus()
    sizes = tm.decode_sizes(ma.load_model("glm5"))
    code = ("import sys; from helpers.interconnect import pairs as pc; "
            f"pc.measure_allreduce({gpus}, {sizes}).to_csv(sys.argv[1], index=False)")
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_DEBUG_FILE": str(tmp_path / "nccl.log")}
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ar.csv")], env=env, capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    import pandas as pd

    t = pd.read_csv(tmp_path / "ar.csv")
    assert sorted(t["size_bytes"]) == sorted(sizes) and (t["time_us"] > 0).all()
    assert set(t["api"]) == {"direct"} and set(t["harness"]) == {"eager"} and set(t["timer"]) == {"host"}
    assert set(t["placement"]) == {"out-of-place"} and set(t["world_size"]) == {gpus}
    assert set(t["iters"]) == {pc.ITERS} and set(t["warmup"]) == {pc.WARMUP} and set(t["dtype"]) == {"float16"}
    log = (tmp_path / "nccl.log").read_text(errors="replace")
    assert pc.nccl_version(log), log[:2000]
    if gpus >= 2:   # every ring neighbour connected, by P2P or SHM
        assert (0, 1) in pc.transports(log), log[-3000:]


def test_the_pair_check_runs_in_its_child_process(tmp_path):
    gpus = _gpus()
    rep = pc.measure(tmp_path, tm.decode_sizes(ma.load_model("glm5")), timeout_s=240)
    assert rep["returncode"] == 0 and rep["reason"] == "exited", rep
    got = pc.load(tmp_path)
    assert got["meta"]["gpus"] == gpus
    if gpus < 2:
        assert got["copies"] is None and got["allreduce"] is None    # one GPU: no pair, no collective to price
        return
    n = gpus * (gpus - 1)
    assert len(got["copies"]) == n and len(got["writes"]) == n and (got["copies"]["peer_GBps"] > 0).all()
    assert set(got["allreduce"]["world_size"]) == {gpus}
    t = pc.pair_table(gpus, None, got["copies"], got["writes"], got["log"])
    assert len(t) == gpus * (gpus - 1) // 2
