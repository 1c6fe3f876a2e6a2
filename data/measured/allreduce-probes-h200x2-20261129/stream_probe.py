"""Does launching on the legacy default stream make our captured all-reduce pay NCCL's graph-mixing cost?"""
import os, sys, time
sys.path.insert(0, "src")
from helpers import collectives, fidelity

SIZES = [8, 1024, 16384]
B = "/tmp/fidelity-build/nccl-tests/all_reduce_perf_mpi"
cfgs = [  # name, api, stream, env
    ("torch default-stream", "torch", "default", {}),
    ("torch side-stream", "torch", "side", {}),
    ("libnccl default-stream", "nccl", "default", {}),
    ("libnccl side-stream", "nccl", "side", {}),
    ("libnccl side-stream MIXING=0", "nccl", "side", {"NCCL_GRAPH_MIXING_SUPPORT": "0"}),
    ("torch side-stream MIXING=0", "torch", "side", {"NCCL_GRAPH_MIXING_SUPPORT": "0"}),
]
for harness in ("graph", "eager"):
    for it in ((20, 200) if harness == "graph" else (20,)):
        for name, api, stream, env in cfgs:
            t0 = time.perf_counter()
            r = collectives.run_collectives("nccl", 2, SIZES, ops=("all_reduce",), warmup=5, iters=it, repeats=5,
                                            timeout_s=90, harness=harness, timer="host", rotate_bytes=2**20,
                                            start="aligned", api=api, stream=stream, env=env, workdir="/tmp/probe")
            t = collectives.tidy([r])
            print(f"{harness} iters={it:4d} {name:32s} {r.status:7s} " + " ".join(f"{s}B:{v:6.2f}" for s, v in
                  zip(t.size_bytes, t.time_us)) + f"  ({time.perf_counter() - t0:.0f} s) {r.message[-400:]}", flush=True)
        for env in ({}, {"NCCL_GRAPH_MIXING_SUPPORT": "0"}):
            rc, text = fidelity.run_processes([B, "-b", "8", "-e", "16384", "-f", "128", "-g", "1", "-G",
                                               "1" if harness == "graph" else "0", "-n", str(it), "-w", "5"], 2, 120,
                                              {**os.environ, **fidelity.TOOL_ENV, **env})
            d = fidelity.parse_nccl_tests(text)
            print(f"{harness} iters={it:4d} {'nccl-tests -np 2 ' + str(env)[1:-1]:32s} rc={rc} " +
                  " ".join(f"{s}B:{v:6.2f}" for s, v in zip(d.size_bytes, d.ip_time_us)), flush=True)
