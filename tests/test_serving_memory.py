"""The cpu-demo's batched server (real `transformers serve`, the tiny model) runs within its stated memory cap:
its cache has a stated size instead of one sized from the machine's free memory, the cap is enforced by its
keeper, and the peak is reported with every row."""
import pytest

from helpers.serving import client as cl, live, transformers_serve as ts
from helpers.serving.server import Server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_the_batched_cpu_server_stays_within_its_cap_and_says_so(tmp_path):
    model_dir = live.build_tiny(live.tiny_spec(64, 2, 4, 64, 4, "cpu"))
    spec = live.transformers_spec(model_dir, "batched", "cpu")
    assert spec.memory_mb == ts.CPU_MEMORY_MB == 2048
    assert "--cb-num-blocks" in spec.argv and "--cb-max-batch-tokens" in spec.argv
    df = live.sweep_server(spec, str(model_dir), tmp_path / "sweep.jsonl", tmp_path, [cl.Workload(32, 32)], [8],
                           {"variant": "batched"}, 1, startup_timeout_s=180, request_timeout_s=120)
    assert df.completed.iloc[0] == 8, df.errors.iloc[0]
    peak = float(df.server_peak_rss_mib.iloc[0])
    assert 100 < peak < 2048 and df.server_memory_cap_mib.iloc[0] == 2048
    log = (tmp_path / "batched.log.proc.json").read_text()
    assert '"memory_cap_mib": 2048' in log and '"reason": "stopped"' in log
    # the GPU server keeps transformers' own sizing and no cap
    gpu = live.transformers_spec(model_dir, "batched", "cuda")
    assert gpu.memory_mb is None and "--cb-num-blocks" not in gpu.argv
