"""Extract the constants of NCCL's own cost model (its tuner) into data/reference/nccl_tuning.csv.

NCCL picks an algorithm and protocol for every collective by estimating its time as
`latency + bytes / bandwidth` from constants in its source (src/graph/tuning.cc) and from the ring graph
its topology search builds (src/graph/search.cc, from link bandwidths set in src/graph/topo.cc).
`helpers.interconnect.ncclmodel` recomputes that estimate for an 8-rank all-reduce through shared memory;
this script records every constant it uses, with the file and line it was read from, for each NCCL
version given.

It reads a clone of https://github.com/NVIDIA/nccl (any git directory that has the release tags) and
does not touch the network:

    git clone --bare https://github.com/NVIDIA/nccl /tmp/nccl.git
    python benchmarks/extract_nccl_tuning.py --nccl-git /tmp/nccl.git --out data/reference/nccl_tuning.csv

Each constant is found by a pattern on its own source line, not by a line number, so the same script
reads every release; a constant it cannot find stops the script, naming the tag, file and pattern.
It imports nothing from this repository.
"""
from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from pathlib import Path

SOURCE = "nccl-source"
# tag -> version written into the table
TAGS = {"v2.28.9-1": "2.28.9", "v2.29.7-1": "2.29.7", "v2.30.7-1": "2.30.7"}
COLUMNS = ["constant", "algo", "proto", "link", "key", "value", "unit", "nccl_version", "file", "line",
           "source", "note"]
ALGOS_PROTOS = [("tree", "LL"), ("tree", "LL128"), ("tree", "Simple"),
                ("ring", "LL"), ("ring", "LL128"), ("ring", "Simple")]
PROTOS = ["LL", "LL128", "Simple"]


class Source:
    def __init__(self, git_dir: Path, tag: str):
        self.git_dir, self.tag = git_dir, tag
        self._cache: dict[str, list[str]] = {}

    def lines(self, path: str) -> list[str]:
        if path not in self._cache:
            out = subprocess.run(["git", "--git-dir", str(self.git_dir), "show", f"{self.tag}:{path}"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{self.tag}: cannot read {path}: {out.stderr.strip()}")
            self._cache[path] = out.stdout.splitlines()
        return self._cache[path]

    def find(self, path: str, pattern: str, after: str | None = None) -> tuple[int, str]:
        """(1-based line number, text) of the first line matching `pattern`, after the first line
        matching `after` when given."""
        lines = self.lines(path)
        start = 0
        if after is not None:
            start = next((i for i, t in enumerate(lines) if re.search(after, t)), None)
            if start is None:
                sys.exit(f"{self.tag}: {path}: no line matches {after!r}")
        for i in range(start, len(lines)):
            if re.search(pattern, lines[i]):
                return i + 1, lines[i]
        sys.exit(f"{self.tag}: {path}: no line matches {pattern!r}" + (f" after {after!r}" if after else ""))


def _numbers(text: str) -> list[float]:
    """The numbers of a C initializer line, in order: comments dropped, `2*141.0` evaluated."""
    text = re.sub(r"/\*.*?\*/", "", text).split("//")[0]
    values = []
    for item in re.findall(r"[-0-9.][0-9.]*(?:\s*[*/]\s*[0-9.]+)*", text):
        item = item.strip()
        if not re.fullmatch(r"[0-9.]+(?:\s*[*/]\s*[0-9.]+)*", item):
            continue
        values.append(float(eval(item, {"__builtins__": {}})))  # digits, dots, * and / only (checked above)
    return values


def rows_for(src: Source, version: str) -> list[dict]:
    rows: list[dict] = []

    def add(constant, value, unit, path, line, note, algo="", proto="", link="", key=""):
        rows.append({"constant": constant, "algo": algo, "proto": proto, "link": link, "key": key,
                     "value": value, "unit": unit, "nccl_version": version, "file": path, "line": line,
                     "source": SOURCE, "note": note})

    tuning = "src/graph/tuning.cc"
    # Base latency of one collective call, per algorithm and protocol.
    n, text = src.find(tuning, r"//\s*Tree, Ring", after=r"baseLatencies")
    for (a, p), v in zip(ALGOS_PROTOS, _numbers(text)[:6]):
        add("base_latency", v, "us", tuning, n, "baseLatencies: added once per call", a, p)
    # Per-hop latency per link type.
    for link, anchor in (("nvlink", r"/\*\s*NVLINK\s*\*/"), ("pci", r"/\*\s*PCI\s*\*/"), ("net", r"/\*\s*NET\s*\*/")):
        n, text = src.find(tuning, r"Tree \(LL/LL128/Simple\), Ring", after=anchor)
        for (a, p), v in zip(ALGOS_PROTOS, _numbers(text)[:6]):
            add("hw_latency", v, "us", tuning, n,
                "hwLatencies: per step; a single-node ring all-reduce pays it 2*(nranks-1) times, a tree "
                "2*(nranks-1) times", a, p, link)
    # LL bandwidth cap and tree per-channel caps (single node is the first column, N1).
    for gpu, label in (("hopper", "Hopper-N1"), ("blackwell", "Blackwell-N1")):
        n, text = src.find(tuning, label, after=r"llMaxBws")
        for nodes, v in zip(("1", "2", "4+"), _numbers(text)[:3]):
            add("ll_max_bw", v, "GB/s", tuning, n,
                "llMaxBws: cap on the ring LL bus bandwidth; single node indexes it by GPU generation",
                "", "LL", "", f"gpu={gpu};nodes={nodes}")
    for gpu, label in (("hopper", r"Hopper \(N1/N2/N4\)"), ("blackwell", r"Blackwell \(N1/N2/N4\)")):
        n, text = src.find(tuning, label, after=r"perChMaxTreeBws")
        for nodes, v in zip(("1", "2", "4+"), _numbers(text)[:3]):
            add("per_channel_max_tree_bw", v, "GB/s", tuning, n,
                "perChMaxTreeBws: cap on the tree all-reduce bus bandwidth per channel", "tree", "", "",
                f"gpu={gpu};nodes={nodes}")
    # Model refinements of ncclTopoTuneModel.
    n, _ = src.find(tuning, r"NCCL_ALGO_RING && p == NCCL_PROTO_LL\)\s*\{?\s*busBw = std::min\(llMaxBw, busBw \* \.5\)")
    add("ring_ll_bw_factor", 0.5, "fraction", tuning, n,
        "ring LL bus bandwidth = min(llMaxBw, 0.5 x nChannels x bwIntra): LL carries 8-byte lines of 4 data bytes",
        "ring", "LL")
    n, _ = src.find(tuning, r"busBw\s*\*\s*\.92\s*,\s*graphs\[a\]->nChannels\s*\*\s*perChMaxTreeBw")
    add("tree_allreduce_bw_factor", 0.92, "fraction", tuning, n,
        "tree all-reduce bus bandwidth = min(0.92 x nChannels x bwIntra, nChannels x perChMaxTreeBw)", "tree")
    n, _ = src.find(tuning, r"NCCL_ALGO_TREE && p == NCCL_PROTO_LL\)\s*busBw = std::min\(busBw\s*\*\s*1\.0\s*/\s*3\.8")
    add("tree_ll_bw_divisor", 3.8, "ratio", tuning, n, "tree LL bus bandwidth = min(busBw / 3.8, llMaxBw)",
        "tree", "LL")
    n, _ = src.find(tuning, r"ratio \*= \.5;")
    add("tree_algo_bw_ratio", 0.5, "ratio", tuning, n,
        "bus to algorithm bandwidth: ring multiplies by nranks/nsteps, tree by 0.5", "tree")
    n, _ = src.find(tuning, r"ncclFuncAllReduce\s*\?\s*2\s*\*\s*\(nRanks\s*-\s*1\)")
    add("ring_allreduce_steps_per_rank", 2, "steps", tuning, n,
        "nsteps = 2 x (nranks - 1) for all-reduce; ring latency = base + nsteps x hw latency (single node); "
        "ring algorithm bandwidth = bus bandwidth x nranks / nsteps", "ring")
    n, _ = src.find(tuning, r"\*time = lat \* latCount \+ nBytes / \(1000 \* bw\);")
    add("time_bytes_per_us_per_GBps", 1000, "B/us per GB/s", tuning, n,
        "ncclTopoGetAlgoTime: time_us = latency x numPipeOps (ring) + bytes / (1000 x bandwidth)")
    n, _ = src.find(tuning, r"pEnable &= \(graphs\[a\]->typeIntra <= PATH_NVB\);")
    add("ll128_max_path_intra", 2, "path type", tuning, n,
        "LL128 is enabled by default only when the ring's intra-node path is PATH_NVB (2) or closer; "
        "a path through the CPU (PATH_PHB 8, PATH_SYS 9) disables it", "", "LL128")
    for proto, offset in zip(PROTOS, range(3)):
        n0, _ = src.find(tuning, r"static float treeCorrectionFactor\[NCCL_NUM_PROTOCOLS\]")
        lines = src.lines(tuning)
        text = lines[n0 + offset]  # the three rows follow the declaration, LL, LL128, Simple
        for i, v in enumerate(_numbers(text)):
            add("tree_correction_factor", v, "fraction", tuning, n0 + offset + 1,
                "tree all-reduce bandwidth multiplier by size bucket log2(bytes / 64)", "tree", proto, "",
                f"log2_bytes_over_64={i}")
    # Link bandwidth NCCL assigns to a PCI link (topo.cc) and its fallbacks.
    topo_h = "src/graph/topo.h"
    n, text = src.find(topo_h, r"#define PCI_BW ")
    add("pci_bw_default", _numbers(text)[0], "GB/s", topo_h, n, "PCI_BW: 'PCI Gen3 x16' reference figure", "", "", "pci")
    n, text = src.find(topo_h, r"#define INTEL_P2P_OVERHEAD\(bw\) \(bw\s*\*\s*6\s*/\s*5\)")
    add("intel_p2p_overhead", 6 / 5, "ratio", topo_h, n,
        "a ring step through an Intel CPU root complex (PATH_PHB) consumes 6/5 of its bandwidth on PCI links",
        "", "", "pci")
    topo = "src/graph/topo.cc"
    n, text = src.find(topo, r"\{\s*NULL,\s*60 /\* Default fallback \*/")
    add("pci_speed_fallback", 60, "100 Mbit/s per lane", topo, n,
        "kvDictPciGen: a link_speed string NCCL does not know (e.g. empty or 'Unknown') counts as 8 GT/s",
        "", "", "pci")
    for gts, pat in (("8", r'"8\.0 GT/s PCIe"\s*,\s*([0-9]+)'), ("16", r'"16\.0 GT/s PCIe"\s*,\s*([0-9]+)'),
                     ("32", r'"32\.0 GT/s PCIe"\s*,\s*([0-9]+)')):
        n, text = src.find(topo, pat, after=r"kvDictPciGen")
        add("pci_speed", float(re.search(pat, text).group(1)), "100 Mbit/s per lane", topo, n,
            "kvDictPciGen entry", "", "", "pci", f"link_speed={gts}.0 GT/s PCIe")
    n, text = src.find(topo, r"if \(width == 0\) width = 16;")
    add("pci_width_fallback", 16, "lanes", topo, n, "a link width of 0 (not reported) counts as x16", "", "", "pci")
    n, text = src.find(topo, r"width\s*\*\s*speed\s*/\s*80\.0")
    add("pci_bw_divisor", 80, "ratio", topo, n,
        "PCI link bandwidth (GB/s) = width x speed / 80, speed in 100 Mbit/s per lane (x16 at 8 GT/s: 12 GB/s)",
        "", "", "pci")
    if version >= "2.30.7":
        xml = "src/graph/xml.cc"
        n, _ = src.find(xml, r'xmlSetAttr\(pciNode, "link_speed", "16\.0 GT/s"\)', after=r"ncclNvmlDeviceGetCurrPcieLinkGeneration")
        add("nvml_link_speed_fallback", 16, "GT/s", xml, n,
            "2.30.7 reads a GPU's link generation from NVML (current generation); if NVML gives none it writes "
            "'16.0 GT/s', which kvDictPciGen does not list, so the 8 GT/s fallback applies (12 GB/s at x16)",
            "", "", "pci")
    # Ring search (search.cc).
    search = "src/graph/search.cc"
    for cc, name in (("sm90", "sm90SpeedArrayIntra"), ("sm100", "sm100SpeedArrayIntra")):
        n, text = src.find(search, rf"float {name}\[\]\s*=")
        for i, v in enumerate(_numbers(text.split("=", 1)[1])):
            add("search_speed_intra", v, "GB/s", search, n,
                "ring bandwidths per channel the intra-node search tries, highest first; sm100 is used for "
                "compute capability 10.0 and above (RTX PRO 6000 Blackwell is 12.0)", "ring", "", "",
                f"arch={cc};index={i}")
    n, text = src.find(search, r"graph->bwIntra = (?:graph->bwInter = )?0\.1;")
    add("search_failure_bw_intra", 0.1, "GB/s", search, n,
        "'Could not find a path for pattern, falling back to simple order': one channel at this placeholder "
        "bandwidth when no ring fits the links", "ring")
    n, _ = src.find(search, r"if \(graph->bwIntra < 25\.0\) return ncclSuccess;")
    add("dup_channels_min_bw", 25, "GB/s", search, n,
        "ncclTopoDupChannels: a ring graph at or above this per-channel bandwidth is doubled (2x channels at "
        "half the bandwidth each; the product is unchanged)", "ring")
    n, _ = src.find(search, r"speedArray\[speedIndex\s*\+\s*1\]\s*/\s*graph->bwInter > \.49")
    add("search_step_down_ratio", 0.49, "ratio", search, n,
        "the search keeps trying lower speeds while the next one is above 0.49 of the best found", "ring")
    # Where P2P is not used, the GPU-to-GPU path goes through the CPU (paths.cc).
    paths = "src/graph/paths.cc"
    n, _ = src.find(paths, r"int p2pLevel = PATH_PXB;")
    add("p2p_level_default", 5, "path type", paths, n,
        "P2P is used only up to PATH_PXB (5) unless NCCL_P2P_LEVEL says otherwise, and only where NVML reports "
        "P2P read and write OK; otherwise the path is diverted through the CPU (addInterStep, path type PHB "
        "or SYS, bandwidth the lower of the two PCI legs) and the SHM transport carries it")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nccl-git", type=Path, required=True, help="a git directory of NVIDIA/nccl with its tags")
    ap.add_argument("--out", type=Path, required=True, help="the CSV to write")
    ap.add_argument("--tags", nargs="*", default=list(TAGS), help=f"release tags (default: {' '.join(TAGS)})")
    args = ap.parse_args(argv)
    rows = []
    for tag in args.tags:
        if tag not in TAGS:
            sys.exit(f"--tags: {tag!r} is not one this script knows ({', '.join(TAGS)}); add it to TAGS")
        rows += rows_for(Source(args.nccl_git, tag), TAGS[tag])
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
