"""Collective sweeps past one node (helpers.interconnect.nodes): the rendezvous, the join command and the
chapter's parameters; then real processes: two torchrun agents on 127.0.0.1 with gloo (the book's node through
suite.run_suite, the other through the join command), a node that never joins, a node that starts another
number of processes, and a join command with nothing to join."""
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from helpers.core import layout, params
from helpers.book import precheck
from helpers.interconnect import collectives, launchlog, nodes as multinode, suite as ic, worker
from helpers.interconnect.method import Method
from helpers.interconnect.nodes import Nodes, NodesError
from helpers.serving.server import free_port   # below the kernel's own port range: no client takes it first
from proctags import tagged

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "06_vm_p2p.ipynb"


# ---------------------------------------------------------------- the rendezvous and its command lines
def test_one_node_is_torchruns_standalone_and_two_are_its_c10d_rendezvous():
    assert Nodes().torchrun_args(2) == ["--standalone", "--nproc-per-node=2"]
    n = Nodes(2, "10.0.0.1:29500", join_timeout_s=42.5)
    args = n.torchrun_args(4)
    assert args == ["--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29500",
                    f"--rdzv-id={multinode.RDZV_ID}", "--rdzv-conf=join_timeout=43,is_host=1", "--max-restarts=0"]
    assert "--rdzv-conf=join_timeout=43,is_host=0" in n.torchrun_args(4, host=False)
    assert "--node-rank" not in " ".join(args)         # read by torchrun's static rendezvous only
    assert n.join_command(4) == ("python -m helpers.interconnect.nodes --rdzv-endpoint 10.0.0.1:29500 --nnodes 2 "
                                 "--nproc-per-node 4")
    assert multinode.join_argv(n, 4)[-3:] == ["-m", "helpers.interconnect.worker", "--join"]


def test_more_than_one_node_without_an_endpoint_is_refused_naming_it_and_how_to_set_it():
    with pytest.raises(NodesError) as e:
        Nodes(2)
    assert "nnodes = 2 needs rdzv_endpoint" in str(e.value)
    assert "-p 06_vm_p2p.rdzv_endpoint=HOST:PORT" in str(e.value) and "PARAMS=" in str(e.value)


@pytest.mark.parametrize("kw,says", [
    ({"count": 2, "endpoint": "node0"}, "rdzv_endpoint = 'node0' is not HOST:PORT"),
    ({"count": 2, "endpoint": "node0:0"}, "is not HOST:PORT"),
    ({"count": 2, "endpoint": "node0:70000"}, "is not HOST:PORT"),
    ({"count": 0}, "nnodes = 0 must be an integer from 1"),
    ({"count": True}, "nnodes = True"),
    ({"count": 2, "endpoint": "a:1", "join_timeout_s": 0}, "rdzv_timeout_s = 0 must be"),
    ({"count": 2, "endpoint": "a:1", "rdzv_id": "a b"}, "rdzv_id = 'a b'"),
])
def test_a_rendezvous_that_cannot_be_is_refused(kw, says):
    with pytest.raises(NodesError, match=says):
        Nodes(**kw)


def test_endpoints_parse_with_ipv6_hosts_too():
    assert multinode.parse_endpoint("node0.example:29500") == ("node0.example", 29500)
    assert multinode.parse_endpoint("[::1]:29500") == ("::1", 29500)


def test_the_chapters_checks_refuse_a_missing_endpoint_and_an_uneven_split_before_the_run():
    base = dict(precheck.chapter_checks(CHAPTER).defaults)
    said = precheck.problems("06_vm_p2p", CHAPTER, {"nnodes": 2}, {"nnodes": "the command line (-p 06_vm_p2p.nnodes=2)"})
    assert len(said) == 1 and said[0].startswith("the command line (-p 06_vm_p2p.nnodes=2): chapter 06_vm_p2p: "
                                                 "parameter 'rdzv_endpoint' = '' is not allowed with nnodes = 2")
    assert "-p 06_vm_p2p.rdzv_endpoint=HOST:PORT" in said[0]
    ok = precheck.problems("06_vm_p2p", CHAPTER, {"nnodes": 2, "rdzv_endpoint": "node0:29500"}, {})
    assert ok == []
    uneven = precheck.problems("06_vm_p2p", CHAPTER, {"nnodes": 2, "rdzv_endpoint": "node0:29500", "world_size": 3}, {})
    assert len(uneven) == 1 and "world_size' = 3 is not allowed with nnodes = 2" in uneven[0]
    assert base["nnodes"] == 1 and base["rdzv_endpoint"] == ""
    # the chapter's own validate() call says the same when it runs
    checks = precheck.chapter_checks(CHAPTER)
    with pytest.raises(params.ParameterError, match="parameter 'rdzv_endpoint' = '' is not allowed with nnodes = 2"):
        params.validate({**base, "nnodes": 2}, checks.specs)


def test_a_rule_between_parameters_is_checked_only_where_both_are_valid_themselves():
    spec = {"n": params.number(1, 8, integer=True),
            "who": params.depends(params.string(), "n", lambda who, n: "name one" if n > 1 and not who else None)}
    assert params.validate({"n": 1, "who": ""}, spec) == {"n": 1, "who": ""}
    with pytest.raises(params.ParameterError, match=r"parameter 'who' = '' is not allowed with n = 2: name one"):
        params.validate({"n": 2, "who": ""}, spec)
    with pytest.raises(params.ParameterError) as e:
        params.validate({"n": 0, "who": ""}, spec)
    assert "parameter 'n' = 0" in str(e.value) and "'who'" not in str(e.value)


def test_the_runs_sentence_says_where_the_sweeps_ran():
    assert multinode.run_text(False, Nodes(), 1).startswith("Recorded mode launches nothing")
    assert "this node alone" in multinode.run_text(True, Nodes(), 2)
    two = multinode.run_text(True, Nodes(2, "node0:29500", 60), 1)
    assert "spanned 2 nodes, 1 process(es) on each" in two and "--rdzv-endpoint node0:29500 --nnodes 2" in two
    assert multinode.share(0, 2, 8) == 8 and multinode.share(0, 2, 0) == 1 and multinode.share(6, 2, 8) == 3


def test_the_plan_across_nodes_splits_the_ranks_and_starts_the_variant_method_at_a_barrier():
    cpu = ic.plan_collectives(ic.Machine(0, "", 8, 0), 0, "all", nodes=2)
    assert cpu.runs == [("gloo", 2, "default", "CPU processes, 1 per node on 2 nodes", ic.eager_method(2))]
    assert any("span 2 nodes" in s for s in cpu.statements)
    gpu = ic.plan_collectives(ic.Machine(4, "GPU", 32, 12), 0, "ALGO=Ring", nodes=2)
    assert [(r[0], r[1], r[2]) for r in gpu.runs] == [("nccl", 8, "default"), ("nccl", 8, "default"),
                                                      ("nccl", 8, "ALGO=Ring"), ("nccl", 8, ic.REPEAT_VARIANT)]
    vm = ic.variant_method(2)
    assert gpu.runs[0][4] == ic.eager_method(2) and all(r[4] == vm for r in gpu.runs[1:])
    assert vm.start == "barrier" and vm.nodes == 2 and vm.harness == "graph" and vm.api == "nccl"
    assert ic.variant_method(1) == ic.VARIANT_METHOD and ic.eager_method(1) == ic.EAGER_METHOD
    with pytest.raises(collectives.CollectiveConfigError, match="world_size = 3 is not a multiple of nnodes = 2"):
        ic.plan_collectives(ic.Machine(4, "GPU", 32, 12), 3, "none", nodes=2)
    with pytest.raises(collectives.CollectiveConfigError, match="puts 5 ranks on each node, more than the 4 GPU"):
        ic.plan_collectives(ic.Machine(4, "GPU", 32, 12), 10, "none", nodes=2)


def test_the_variant_rows_of_a_run_across_nodes_are_found_by_its_method():
    vm = ic.variant_method(2)
    rows = [{"op": "all_reduce", "backend": "nccl", "variant": v, "world_size": 4, "size_bytes": 64, "time_us": t,
             "time_us_p10": t, "time_us_p90": t, **vm.as_row()} for v, t in (("default", 10.0), ("ALGO=Ring", 8.0))]
    rows.append({**rows[0], **ic.eager_method(2).as_row(), "time_us": 40.0})
    sweep = pd.DataFrame(rows)
    got = ic.variant_rows(sweep)
    assert set(got.method) == {vm.label} and len(got) == 2
    assert ic.best_variant(sweep, [64]).best_variant.iloc[0] == "ALGO=Ring"


def test_run_collectives_refuses_a_method_whose_node_count_is_not_the_launchs():
    with pytest.raises(collectives.CollectiveConfigError, match=r"says nodes = 1, but the launch spans 2"):
        collectives.run_collectives("gloo", 2, [64], nodes=Nodes(2, "127.0.0.1:1"))
    with pytest.raises(collectives.CollectiveConfigError, match="world_size = 3 is not a multiple of nnodes = 2"):
        collectives.run_collectives("gloo", 3, [64], nodes=Nodes(2, "127.0.0.1:1"), method=Method(nodes=2))


def test_the_worker_joins_with_nothing_but_join_and_needs_the_sweep_otherwise():
    a = worker.parse_args(["--join"])
    assert a.join and a.sizes is None and a.out is None
    with pytest.raises(SystemExit):
        worker.parse_args(["--sizes", "64", "--out", "x"])      # no --backend, no --join
    with pytest.raises(SystemExit):
        worker.parse_args(["--backend", "gloo", "--sizes", "64", "--out", "x", "--env", "NOEQUALS"])
    assert worker._without_out(["--sizes", "64", "--out", "p.jsonl", "--out=q", "--variant", "v"]) == \
        ["--sizes", "64", "--variant", "v"]


def test_the_join_command_tells_a_finished_rendezvous_from_a_failed_launch():
    assert multinode._outcome(0, "") == "ok"
    assert multinode._outcome(1, "raise RendezvousClosedError") == "closed"
    assert multinode._outcome(1, "RendezvousConnectionError: The connection to the C10d store has failed") == "gone"
    assert multinode._outcome(1, "[rank1]: RuntimeError: boom") == "failed"


# ---------------------------------------------------------------- real processes: two torchrun agents on 127.0.0.1
def _join(endpoint: str, tag: str, *extra: str, env: dict | None = None, cwd=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "helpers.interconnect.nodes", "--rdzv-endpoint", endpoint,
                             "--nnodes", "2", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "BOOK_TEST_TAG": tag, **(env or {})}, cwd=cwd)


def _nothing_left(tag: str, within_s: float = 10) -> dict:
    deadline = time.monotonic() + within_s
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    return tagged(tag)


@pytest.mark.timeout(240)
@pytest.mark.integration
def test_two_nodes_on_this_machine_measure_through_the_books_suite_and_the_join_command(tmp_path, monkeypatch):
    tag = f"two-nodes-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("BOOK_TEST_TAG", tag)        # every process the book's node starts carries it too
    ep = f"127.0.0.1:{free_port()}"
    joiner = _join(ep, tag, "--nproc-per-node", "1", "--first-wait-s", "120", "--idle-s", "5")
    t0 = time.monotonic()
    try:
        run = layout.Run(tmp_path, "06_vm_p2p")
        out = ic.run_suite("quick", run.path("collective_points"), do_copies=False,
                           nodes=Nodes(2, ep, join_timeout_s=60), timeout_s=120, save=run.save)
        said, _ = joiner.communicate(timeout=60)
    finally:
        if joiner.poll() is None:
            joiner.kill()
    runs, sweep = out.collective_runs, out.collective_sweep
    assert list(runs.status) == ["ok"], runs.to_dict("records")
    assert (runs.nodes == 2).all() and (runs.world_size == 2).all()
    m = ic.eager_method(2)
    labels = {m.for_op(op).label for op in collectives.OPS}      # all-to-all is out of place
    assert set(sweep.method) == labels and m.label == "eager+2_nodes"
    assert (sweep.world_size == 2).all() and (sweep.nodes == 2).all() and (sweep.start == "barrier").all()
    assert (sweep.hosts == 1).all()                  # two nodes, one host: the loopback test
    assert set(sweep.op) == set(collectives.OPS) and (sweep.time_us > 0).all()
    assert sweep.kind.str.startswith("measured: 2 nodes on 1 host").all()
    assert "2 nodes" in m.description and "no aligned start" in m.description
    saved = run.load("collective_sweep")
    assert set(saved.method) == labels and (saved.nodes == 2).all()
    assert joiner.returncode == 0, said
    assert "launch 1: ok" in said and "eager+2_nodes, 2 ranks on 2 nodes" in said and "1 ok, 0 failed" in said
    assert time.monotonic() - t0 < 120
    assert _nothing_left(tag) == {}


@pytest.mark.timeout(120)
@pytest.mark.integration
def test_a_node_that_never_joins_is_reported_within_the_limit_and_nothing_is_left(tmp_path):
    tag = f"never-joins-{uuid.uuid4().hex[:8]}"
    ep = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    r = collectives.run_collectives("gloo", 2, [64], warmup=1, iters=2, repeats=1, timeout_s=60, workdir=tmp_path,
                                    env={"BOOK_TEST_TAG": tag}, nodes=Nodes(2, ep, join_timeout_s=5),
                                    method=Method(nodes=2))
    wall = time.monotonic() - t0
    assert r.status == "timeout" and r.rows == [], r.log[-2000:]
    assert f"did not join the rendezvous at {ep} within 5 s" in r.message
    assert f"--rdzv-endpoint {ep} --nnodes 2 --nproc-per-node 1" in r.message
    assert wall < 5 + 20, wall                       # the join timeout, then torchrun's own exit
    assert _nothing_left(tag) == {}


@pytest.mark.timeout(180)
@pytest.mark.integration
def test_a_node_that_starts_another_number_of_processes_is_refused_on_both_sides(tmp_path):
    tag = f"uneven-{uuid.uuid4().hex[:8]}"
    ep = f"127.0.0.1:{free_port()}"
    joiner = _join(ep, tag, "--nproc-per-node", "2", "--first-wait-s", "60", "--idle-s", "3")
    try:
        r = collectives.run_collectives("gloo", 2, [64], warmup=1, iters=2, repeats=1, timeout_s=60,
                                        workdir=tmp_path, env={"BOOK_TEST_TAG": tag},
                                        nodes=Nodes(2, ep, join_timeout_s=60), method=Method(nodes=2))
        said, _ = joiner.communicate(timeout=90)
    finally:
        if joiner.poll() is None:
            joiner.kill()
    assert r.status == "failed" and r.wall_s < 45, (r.status, r.wall_s, r.log[-2000:])
    assert r.message.startswith("helpers.interconnect.worker: 3 ranks on 2 nodes") and "--nproc-per-node 1" in r.message
    assert joiner.returncode == 1 and "launch 1: failed" in said, said
    assert "2 process(es) on this node, 1 on the book's node: run the join command with --nproc-per-node 1" in said
    assert _nothing_left(tag) == {}


@pytest.mark.timeout(60)
@pytest.mark.integration
def test_the_join_command_with_nothing_to_join_says_so():
    ep = f"127.0.0.1:{free_port()}"
    p = subprocess.run([sys.executable, "-m", "helpers.interconnect.nodes", "--rdzv-endpoint", ep, "--nnodes", "2",
                        "--first-wait-s", "1"], capture_output=True, text=True, timeout=50)
    assert p.returncode == 2 and f"no rendezvous opened at {ep} within 1 s" in p.stdout
    bad = subprocess.run([sys.executable, "-m", "helpers.interconnect.nodes", "--rdzv-endpoint", "node0",
                          "--nnodes", "2"], capture_output=True, text=True, timeout=50)
    assert bad.returncode == 2 and "--rdzv-endpoint = 'node0' is not HOST:PORT" in bad.stderr
    one = subprocess.run([sys.executable, "-m", "helpers.interconnect.nodes", "--rdzv-endpoint", ep, "--nnodes", "1"],
                         capture_output=True, text=True, timeout=50)
    assert one.returncode == 2 and "--nnodes 1" in one.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_chapter_runs_across_two_nodes_and_says_so(tmp_path):
    """Chapter 06 executed by papermill on two 'nodes' (the book's and a join command), as a user would."""
    import papermill as pm

    ep = f"127.0.0.1:{free_port()}"
    tag = f"chapter-{uuid.uuid4().hex[:8]}"
    joiner = _join(ep, tag, "--nproc-per-node", "1", "--first-wait-s", "300", "--idle-s", "10")
    try:
        pm.execute_notebook(str(CHAPTER), str(tmp_path / "06.ipynb"), kernel_name="python3", progress_bar=False,
                            parameters={"run_dir": str(tmp_path / "run"), "nnodes": 2, "rdzv_endpoint": ep,
                                        "rdzv_timeout_s": 120, "nccl_variants": "none"}, cwd=str(ROOT))
        said, _ = joiner.communicate(timeout=120)
    finally:
        if joiner.poll() is None:
            joiner.kill()
    runs = pd.read_csv(tmp_path / "run" / "results" / "06_vm_p2p" / "collective_runs.csv")
    assert list(runs.status) == ["ok"] and (runs.nodes == 2).all() and (runs.method == "eager+2_nodes").all()
    nb = json.loads((tmp_path / "06.ipynb").read_text())
    glued = {o["metadata"]["scrapbook"]["name"]: o["data"] for c in nb["cells"] for o in c.get("outputs", [])
             if o.get("metadata", {}).get("scrapbook")}
    text = next(iter(glued["nodes_text"].values()))
    assert "spanned 2 nodes, 1 process(es) on each" in text and ep in text
    assert joiner.returncode == 0 and "1 ok, 0 failed" in said, said
    assert _nothing_left(tag) == {}


@pytest.mark.timeout(180)
@pytest.mark.integration
def test_a_joining_node_with_other_code_is_refused_and_the_book_says_why(tmp_path):
    import shutil

    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "helpers", copy / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    w = copy / "helpers" / "interconnect" / "worker.py"
    w.write_text(w.read_text() + "\n# another commit\n")
    tag = f"other-code-{uuid.uuid4().hex[:8]}"
    ep = f"127.0.0.1:{free_port()}"
    joiner = _join(ep, tag, "--nproc-per-node", "1", "--first-wait-s", "60", "--idle-s", "3",
                   env={"PYTHONPATH": str(copy)}, cwd=tmp_path)
    try:
        r = collectives.run_collectives("gloo", 2, [64], warmup=1, iters=2, repeats=1, timeout_s=60,
                                        workdir=tmp_path, env={"BOOK_TEST_TAG": tag},
                                        nodes=Nodes(2, ep, join_timeout_s=60), method=Method(nodes=2))
        said, _ = joiner.communicate(timeout=90)
    finally:
        if joiner.poll() is None:
            joiner.kill()
    assert r.status == "failed" and r.rows == [] and r.wall_s < 45, (r.status, r.wall_s, r.log[-2000:])
    assert "cannot run the sweep" in r.message and "differs from the book's node's" in r.message, r.message
    assert "check out the same commit on every node" in said
    assert _nothing_left(tag) == {}


def test_a_workers_refusal_is_the_launchs_message_not_torchruns_summary():
    out = ("helpers.interconnect.worker: rank 1 (on b) cannot run the sweep: helpers.interconnect.worker --join: this "
           "node's worker code (1) differs from the book's node's (2): check out the same commit on every node\n"
           "Traceback (most recent call last):\n  ...\nhelpers.interconnect.worker FAILED\n"
           f"{launchlog.JOINED_PREFIX} the 'default' sweep\n")
    assert launchlog.failure_message(out).startswith("helpers.interconnect.worker: rank 1 (on b) cannot run")
    assert "FAILED" not in launchlog.failure_message(out) and "joined" not in launchlog.failure_message(out)


def test_a_launch_whose_worker_refused_counts_as_failed_whatever_the_rendezvous_raised_after():
    """Under load the joining node's torchrun, shutting down after its worker refused, can raise
    RendezvousClosedError or RendezvousConnectionError (the book's node has already gone): the join command
    must report the refusal, not wait for another launch (seen once in a full CI run)."""
    refusal = ("helpers.interconnect.worker --join: this node's worker code (1) differs from the book's node's (2): "
               "check out the same commit on every node\n")
    for tail in ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n",
                 "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: the store went away\n"):
        assert multinode._outcome(1, refusal + tail) == "failed"
        assert multinode._outcome(1, tail) in ("closed", "gone")
    assert multinode._outcome(1, "helpers.interconnect.worker FAILED\nRendezvousClosedError\n") == "closed"
    assert multinode._outcome(0, refusal) == "ok"
