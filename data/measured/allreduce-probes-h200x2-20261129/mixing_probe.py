"""What makes a captured all-reduce in our worker pay NCCL's graph-mixing cost that nccl-tests does not."""
import os, subprocess, sys, time
sys.path.insert(0, "src")
import numpy as np
from helpers import collectives, fidelity

OUT = os.environ["OUT"]
SIZES = [8, 1024, 16384]
B = "/tmp/fidelity-build/nccl-tests/all_reduce_perf_mpi"
cfgs = [  # name, api, control, env, rotate
    ("torch", "torch", "backend", {}, 2**20),
    ("libnccl", "nccl", "backend", {}, 2**20),
    ("libnccl gloo-control", "nccl", "gloo", {}, 2**20),
    ("libnccl GRAPH_REGISTER=0", "nccl", "backend", {"NCCL_GRAPH_REGISTER": "0"}, 2**20),
    ("libnccl one buffer", "nccl", "backend", {}, 0),
    ("libnccl gloo-control GRAPH_MIXING=0", "nccl", "gloo", {"NCCL_GRAPH_MIXING_SUPPORT": "0"}, 2**20),
]
for it in (20, 200):
    for name, api, control, env, rot in cfgs:
        t0 = time.perf_counter()
        r = collectives.run_collectives("nccl", 2, SIZES, ops=("all_reduce",), warmup=5, iters=it, repeats=5,
                                        timeout_s=90, harness="graph", timer="host", rotate_bytes=rot,
                                        start="aligned", api=api, control=control, env=env, workdir="/tmp/probe")
        t = collectives.tidy([r])
        print(f"iters={it:4d} {name:38s} {r.status:7s} " + " ".join(f"{s}B:{v:6.2f}" for s, v in
              zip(t.size_bytes, t.time_us)) + f"  ({time.perf_counter() - t0:.0f} s) {r.message[-400:]}", flush=True)
    for env in ({}, {"NCCL_GRAPH_MIXING_SUPPORT": "0"}):
        rc, text = fidelity.run_processes([B, "-b", "8", "-e", "16384", "-f", "128", "-g", "1", "-G", "1", "-n",
                                           str(it), "-w", "5"], 2, 120, {**os.environ, **fidelity.TOOL_ENV, **env})
        try:
            d = fidelity.parse_nccl_tests(text)
            print(f"iters={it:4d} {'nccl-tests -np 2 ' + str(env):38s} rc={rc} " +
                  " ".join(f"{s}B:{v:6.2f}" for s, v in zip(d.size_bytes, d.ip_time_us)), flush=True)
        except Exception as e:
            print("tool", e, text[-800:])
# NCCL's own account of the setup in both processes
info = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH,TUNING,REG,P2P"}
r = collectives.run_collectives("nccl", 2, [1024], ops=("all_reduce",), warmup=5, iters=20, repeats=2,
                                timeout_s=90, harness="graph", timer="host", rotate_bytes=2**20, start="aligned",
                                api="nccl", control="gloo", env=info, workdir="/tmp/probe")
open(f"{OUT}/ours_info.log", "w").write(r.log)
rc, text = fidelity.run_processes([B, "-b", "1024", "-e", "1024", "-g", "1", "-G", "1", "-n", "20"], 2, 120,
                                  {**os.environ, **fidelity.TOOL_ENV, **info})
open(f"{OUT}/tool_info.log", "w").write(text)
print("info logs written", len(r.log), len(text))
