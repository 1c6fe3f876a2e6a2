"""Collective sweeps past one node: torchrun's rendezvous, and the command every other node runs.

torchrun is the launcher; this module only builds its command line. One node (the one that runs the book)
launches each sweep with `Nodes(count, endpoint).torchrun_args(...)`: `--nnodes N --rdzv-backend c10d
--rdzv-endpoint HOST:PORT --rdzv-id ID --rdzv-conf join_timeout=S,is_host=1` instead of `--standalone`, so
its torchrun hosts the rendezvous at HOST:PORT and waits at most S seconds for the other nodes. Every other
node runs one command, for the whole chapter:

    python -m helpers.interconnect.nodes --rdzv-endpoint HOST:PORT --nnodes N [--nproc-per-node P]

which starts torchrun with the same rendezvous (`is_host=0`) and the worker in join mode
(helpers.interconnect.worker --join), once per launch of the book's node: it waits for the rendezvous to
open, joins it, and after each launch waits for the next, until no rendezvous opens within `--idle-s`.
A joining worker needs no copy of the sweep: the recording node's workers publish their own command line
(sizes, ops, method, variant environment) in torchrun's store and the joining workers run exactly that,
so the nodes cannot disagree about what they measure.

What torchrun decides, not this module: node ranks. With the c10d rendezvous torchrun orders the nodes by
host name and process id and ignores `--node-rank` (it is read by the static rendezvous only), so no node
rank is asked for here; the node that runs the book records the points whatever its rank.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.interconnect.launchlog import JOINED_PREFIX, WORKER_SAYS, failure_message
from helpers.interconnect.settings import BASE_ENV

#: torchrun's rendezvous id for the sweeps; both sides use it unless told otherwise
RDZV_ID = "helpers-collectives"
#: how long, by default, the book's node waits for the other nodes at each launch (torchrun's own default is 600 s)
JOIN_TIMEOUT_S = 300
#: the join command's defaults: how long it waits for the first rendezvous, and for each one after a launch
FIRST_WAIT_S = 3600
IDLE_S = 120
MAX_NODES = 1024


class NodesError(ValueError):
    """A multi-node launch that cannot run as asked; the message names the input and how to set it."""


def parse_endpoint(endpoint: str, name: str = "rdzv_endpoint") -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:29500) as (host, port); NodesError naming `name` otherwise."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^\s:\[\]]+):(\d+)", str(endpoint).strip())
    port = int(m.group(2) or m.group(4)) if m else -1
    if not m or not 1 <= port <= 65535:
        raise NodesError(f"{name} = {endpoint!r} is not HOST:PORT: give this node's address as the other nodes reach "
                         "it and a free TCP port (1 to 65535), e.g. 10.0.0.1:29500 or node0.example:29500")
    return (m.group(1) or m.group(3)), port


@dataclass(frozen=True)
class Nodes:
    """How many torchrun nodes a sweep spans and where they meet. count=1 is one node (`--standalone`);
    above one, `endpoint` (HOST:PORT of this node, reachable from the others) is required and
    `join_timeout_s` bounds how long each launch waits for the other nodes."""

    count: int = 1
    endpoint: str = ""
    join_timeout_s: float = JOIN_TIMEOUT_S
    rdzv_id: str = RDZV_ID

    def __post_init__(self):
        if isinstance(self.count, bool) or not isinstance(self.count, int) or not 1 <= self.count <= MAX_NODES:
            raise NodesError(f"nnodes = {self.count!r} must be an integer from 1 to {MAX_NODES} (the nodes the "
                             "collective sweeps span; 1 is this node alone)")
        if self.count > 1:
            if not str(self.endpoint).strip():
                raise NodesError(missing_endpoint(self.count))
            parse_endpoint(self.endpoint)
        if not (isinstance(self.join_timeout_s, (int, float)) and not isinstance(self.join_timeout_s, bool)
                and math.isfinite(self.join_timeout_s) and self.join_timeout_s >= 1):
            raise NodesError(f"rdzv_timeout_s = {self.join_timeout_s!r} must be a number of seconds >= 1 (how long "
                             "each launch waits for the other nodes to join)")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(self.rdzv_id)):
            raise NodesError(f"rdzv_id = {self.rdzv_id!r} must be letters, digits, '_', '.' or '-'")

    @property
    def multi(self) -> bool:
        return self.count > 1

    @property
    def join_timeout(self) -> int:
        """torchrun's join_timeout: whole seconds (it reads the option as an integer)."""
        return int(math.ceil(self.join_timeout_s))

    def torchrun_args(self, nproc_per_node: int, host: bool = True) -> list[str]:
        """torchrun's options for this node: `--standalone` on one node; else the c10d rendezvous, which
        this node hosts (`host`) or joins."""
        if not self.multi:
            return ["--standalone", f"--nproc-per-node={nproc_per_node}"]
        return [f"--nnodes={self.count}", f"--nproc-per-node={nproc_per_node}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={self.endpoint}", f"--rdzv-id={self.rdzv_id}",
                f"--rdzv-conf=join_timeout={self.join_timeout},is_host={1 if host else 0}", "--max-restarts=0"]

    def join_command(self, nproc_per_node: int | None = None) -> str:
        """The one command each other node runs for this chapter (python: that node's, from the same checkout)."""
        cmd = f"python -m helpers.interconnect.nodes --rdzv-endpoint {self.endpoint or 'HOST:PORT'} --nnodes {self.count}"
        if nproc_per_node is not None:
            cmd += f" --nproc-per-node {nproc_per_node}"
        if self.rdzv_id != RDZV_ID:
            cmd += f" --rdzv-id {self.rdzv_id}"
        return cmd

    def not_joined(self, nproc_per_node: int | None = None) -> str:
        """What a launch whose rendezvous timed out reports."""
        return (f"the other {self.count - 1} node(s) did not join the rendezvous at {self.endpoint} within "
                f"{self.join_timeout} s (rdzv_timeout_s): on each of them run `{self.join_command(nproc_per_node)}` "
                "before this launch, from the same checkout, and check that they reach this host's port; nothing "
                "was measured and torchrun has exited")


def missing_endpoint(count) -> str:
    return (f"nnodes = {count} needs rdzv_endpoint: HOST:PORT of this node (the one that runs the book and records "
            "the results), as the other nodes reach it, with a free port. Set it with "
            "`-p 06_vm_p2p.rdzv_endpoint=HOST:PORT` (make: PARAMS=06_vm_p2p.rdzv_endpoint=HOST:PORT) or in the "
            "target's chapter parameters, or set nnodes = 1")


def endpoint_rule(rdzv_endpoint, nnodes) -> str | None:
    """The chapter's check of rdzv_endpoint against nnodes (params.depends): why they cannot go together, or None."""
    count = int(nnodes)
    if count == 1:
        return None
    try:
        Nodes(count, str(rdzv_endpoint))
    except NodesError as e:
        return str(e)
    return None


def world_size_rule(world_size, nnodes) -> str | None:
    """The chapter's check of world_size against nnodes (params.depends): an equal share per node."""
    w, n = int(world_size), int(nnodes)
    if w and w % n:
        return (f"every node starts the same number of processes, so world_size must be a multiple of nnodes = {n} "
                f"(or 0: one per GPU on every node); set -p 06_vm_p2p.world_size=<a multiple of {n}>")
    return None


def share(world_size: int, count: int, gpus: int) -> int:
    """Processes per node: world_size over the nodes where given, else one per GPU (this node's count,
    every node assumed alike), or one CPU process per node without a GPU."""
    return int(world_size) // int(count) if world_size else (int(gpus) or 1)


def run_text(live: bool, nodes: Nodes, per_node: int) -> str:
    """The VM/P2P chapter's sentence on where this run's collective sweeps ran (nodes_text)."""
    if not live:
        return "Recorded mode launches nothing, on this node or any other."
    if not nodes.multi:
        return (f"This run measured on this node alone (nnodes = {nodes.count}): each sweep was one torchrun launch "
                "with --standalone.")
    return (f"This run's collective sweeps spanned {nodes.count} nodes, {per_node} process(es) on each, through the "
            f"rendezvous at {nodes.endpoint}, each launch waiting up to {nodes.join_timeout} s for the others; each "
            f"other node was to run `{nodes.join_command(per_node)}`. The runs table of section 3 says, launch by "
            "launch, whether they joined.")


def default_nproc() -> int:
    """One process per GPU on this node, or one process without a GPU (the book's node's default too)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 1
    except ImportError:
        return 1


# ------------------------------------------------------------------------------------ the join command
def _reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_rendezvous(host: str, port: int, seconds: float, poll_s: float = 0.25, open_: bool = True) -> bool:
    """Whether something accepts connections at host:port within `seconds` (the book's node's torchrun), or
    with open_=False whether it stops accepting them within `seconds` (that launch has ended)."""
    deadline = time.monotonic() + seconds
    while True:
        if _reachable(host, port) == open_:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def join_argv(nodes: Nodes, nproc_per_node: int) -> list[str]:
    """torchrun joining `nodes`' rendezvous with the worker in join mode (it takes its sweep from the store)."""
    return ([sys.executable, "-m", "torch.distributed.run"] + nodes.torchrun_args(nproc_per_node, host=False)
            + ["-m", "helpers.interconnect.worker", "--join"])


def _outcome(rc: int | None, text: str) -> str:
    """ok, closed (a rendezvous that had already finished: not a launch of ours), gone (the endpoint went
    away before torchrun reached it) or failed."""
    if rc == 0:
        return "ok"
    if any(s in text for s in WORKER_SAYS):   # a worker of this launch ran and said why it ended: whatever
        return "failed"                       # torchrun's rendezvous raised while it shut down after it
    if "RendezvousClosedError" in text or "RendezvousGracefulExitError" in text:
        return "closed"
    if "RendezvousConnectionError" in text and JOINED_PREFIX not in text:
        return "gone"
    return "failed"


def join(nodes: Nodes, nproc_per_node: int, first_wait_s: float = FIRST_WAIT_S, idle_s: float = IDLE_S,
         launch_timeout_s: float = 0, verbose: bool = False, log=print) -> int:
    """Join every launch of the book's node until no rendezvous opens within `idle_s` of the last (the first
    within `first_wait_s`). Returns the exit status: 0 when at least one launch joined and none failed,
    1 when one failed, 2 when no rendezvous opened at all."""
    from helpers.core import procs

    host, port = parse_endpoint(nodes.endpoint)
    env = {**os.environ, **BASE_ENV}
    pkg_root = str(Path(__file__).resolve().parents[1])   # the workers import helpers from this checkout
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    done = failed = 0
    log(f"joining the collective sweeps at {nodes.endpoint} ({nodes.count} nodes, {nproc_per_node} process(es) here); "
        f"waiting up to {first_wait_s:g} s for the first launch")
    while True:
        wait = first_wait_s if done + failed == 0 else idle_s
        if not wait_for_rendezvous(host, port, wait):
            break
        t0 = time.monotonic()
        proc = procs.popen(join_argv(nodes, nproc_per_node), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=env, timeout_s=launch_timeout_s or None)
        try:
            text, _ = proc.communicate()
        except BaseException:
            procs.stop(proc, grace_s=2)
            raise
        outcome = _outcome(proc.returncode, text or "")
        joined = [ln.strip() for ln in (text or "").splitlines() if ln.startswith(JOINED_PREFIX)]
        if outcome in ("closed", "gone"):   # a finished launch's rendezvous, still closing: wait for the next
            time.sleep(1)
            continue
        wall = time.monotonic() - t0
        if outcome == "ok":
            done += 1
            log(f"launch {done + failed}: ok in {wall:.1f} s" + (f" ({joined[0][len(JOINED_PREFIX):].strip()})"
                                                                 if joined else ""))
        else:
            failed += 1
            log(f"launch {done + failed}: failed (exit status {proc.returncode}, {wall:.1f} s); the book's node "
                f"reports it too:\n{failure_message(text)}")
        if verbose and text:
            log(text)
        # the book's node's torchrun hosts the rendezvous for as long as its launch lasts: join the next
        # launch, not this one again, by waiting for it to close first (it ends within the book's time limit)
        if not wait_for_rendezvous(host, port, first_wait_s, open_=False):
            log(f"the rendezvous at {nodes.endpoint} stayed open {first_wait_s:g} s after this node's launch ended; "
                "stopping")
            return 1
    if done + failed == 0:
        log(f"no rendezvous opened at {nodes.endpoint} within {first_wait_s:g} s: is the book running there with "
            f"nnodes = {nodes.count} and this rdzv_endpoint?")
        return 2
    log(f"no further launch within {idle_s:g} s: done ({done} ok, {failed} failed)")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m helpers.interconnect.nodes",
        description="Join the VM/P2P chapter's collective sweeps from another node: runs torchrun with the book's "
                    "rendezvous and the sweep worker, once per launch of the book's node, until it stops launching.")
    ap.add_argument("--rdzv-endpoint", required=True, help="HOST:PORT the book's node hosts (its rdzv_endpoint)")
    ap.add_argument("--nnodes", type=int, required=True, help="nodes in all, this one included (the book's nnodes)")
    ap.add_argument("--nproc-per-node", type=int, default=None,
                    help="processes on this node; must equal the book's node's (default: one per GPU here, else 1)")
    ap.add_argument("--rdzv-id", default=RDZV_ID, help=f"torchrun's rendezvous id (default {RDZV_ID})")
    ap.add_argument("--join-timeout-s", type=float, default=JOIN_TIMEOUT_S,
                    help="how long torchrun waits, once connected, for every node (default %(default)s)")
    ap.add_argument("--first-wait-s", type=float, default=FIRST_WAIT_S,
                    help="how long to wait for the first rendezvous to open (default %(default)s)")
    ap.add_argument("--idle-s", type=float, default=IDLE_S,
                    help="after a launch, how long to wait for the next before finishing (default %(default)s)")
    ap.add_argument("--launch-timeout-s", type=float, default=0,
                    help="end a launch that runs longer than this (0: no limit; the book's node has its own)")
    ap.add_argument("--verbose", action="store_true", help="print torchrun's and the workers' whole output")
    a = ap.parse_args(argv)
    if not 2 <= a.nnodes <= MAX_NODES:
        ap.error(f"--nnodes {a.nnodes}: give the book's nnodes, 2 to {MAX_NODES} (one node has no other to join)")
    nproc = default_nproc() if a.nproc_per_node is None else a.nproc_per_node
    if nproc < 1:
        ap.error(f"--nproc-per-node {nproc} must be 1 or more (the book's node's processes per node)")
    try:
        parse_endpoint(a.rdzv_endpoint, "--rdzv-endpoint")
        nodes = Nodes(a.nnodes, a.rdzv_endpoint, a.join_timeout_s, a.rdzv_id)
    except NodesError as e:
        ap.error(str(e))
    try:
        return join(nodes, nproc, a.first_wait_s, a.idle_s, a.launch_timeout_s, a.verbose,
                    log=lambda s: print(s, flush=True))
    except KeyboardInterrupt:   # the running torchrun and its workers were ended with it (procs.stop)
        print("interrupted: this node's torchrun and its workers were stopped", flush=True)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
