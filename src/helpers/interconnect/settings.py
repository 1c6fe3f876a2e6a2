"""The NCCL settings the book measures: one registry, read by every sweep that sets NCCL's environment.

A setting is a name, the environment variables it adds, and what a reader must know about it. The name is
the label every result row carries (the `variant` of chapter 06's variant sweep, the `arm` of the host-path
study, the `nccl_setting` of benchmarks/allreduce_gap.py, the variants of benchmarks/fidelity.py), so a
name, once in a committed result (runs/, data/measured/), never changes. `studies` says which sweeps run
it: `VARIANT_SWEEP` (chapter 06's `nccl_variants`; the benchmarks take their names from it too) and
`HOSTPATH` (the host-path study's arms, helpers.interconnect.hostpath). A host-path arm may also add the
VM topology file (`vm_topology`: NCCL_TOPO_FILE, written at run time) and stop its sweep early
(`max_bytes`).

    setting("PROTO=LL").environment       # {'NCCL_PROTO': 'LL'}
    env("host", HOSTPATH)                 # {'NCCL_P2P_DISABLE': '1'}
    list(VARIANTS), list(ARMS)            # each sweep's names, in the order it runs them

Adding a setting is one entry of `_SETTINGS` below. `BASE_ENV` is in every torchrun worker's environment
and `TOOL_ENV` in every reference tool's (nccl-tests, cuda-samples), whatever the setting.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Always in the workers' environment: no NVLink SHARP multicast, no symmetric-memory multicast.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
BASE_ENV = {**MULTICAST_OFF, "OMP_NUM_THREADS": "1"}
#: Every reference-tool run's environment: no NVLink SHARP multicast (BASE_ENV's settings, and NVSHMEM's own
#: switch).
TOOL_ENV = {**MULTICAST_OFF, "NVSHMEM_DISABLE_NVLS": "1"}

#: The sweeps that read this registry (a setting's `studies`).
VARIANT_SWEEP, HOSTPATH = "variants", "hostpath"
STUDIES = (VARIANT_SWEEP, HOSTPATH)


class SettingError(ValueError):
    """A setting name the registry does not hold (for the study asked); the message names the known ones."""


@dataclass(frozen=True)
class NcclSetting:
    """One NCCL setting: its name (a label in results), its environment, which sweeps run it, whether it
    adds the VM topology file, how far a host-path sweep of it goes (None: the study's largest size), what
    it is for a reader (`what`) and, for a setting outside the investigation's list, what a reader must know
    before using it (`note`)."""
    name: str
    env: tuple[tuple[str, str], ...] = ()
    studies: tuple[str, ...] = (HOSTPATH,)
    vm_topology: bool = False
    max_bytes: int | None = None
    what: str = ""
    note: str = ""

    @property
    def environment(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def nccl_only(self) -> bool:
        """Whether only NCCL reads this setting (so gloo between CPU processes cannot run it)."""
        return any(k.startswith("NCCL_") for k, _ in self.env) or self.vm_topology

    @property
    def settings(self) -> str:
        """The settings as a reader sees them, e.g. 'NCCL_P2P_DISABLE=1 NCCL_TOPO_FILE=<VM topology>'."""
        parts = [f"{k}={v}" for k, v in self.env] + (["NCCL_TOPO_FILE=<VM topology>"] if self.vm_topology else [])
        return " ".join(parts) or "NCCL defaults"


def _env(**kw) -> tuple[tuple[str, str], ...]:
    return tuple((f"NCCL_{k}", str(v)) for k, v in kw.items())


#: The host-path study's tuning arms stop here: 32 MiB covers decode (768 KiB at 64 tokens) and a long
#: prefill's messages, and a forced protocol or algorithm at 256 MiB through host memory costs minutes of
#: device time.
TUNING_MAX_BYTES = 32 * 2**20
_HOST = _env(P2P_DISABLE=1)
_MEMCPY = _HOST + _env(SHM_USE_CUDA_MEMCPY=1)
_VARIANT = (VARIANT_SWEEP,)


def _variant(name: str, note: str = "", **kw) -> NcclSetting:
    """A variant of the variant sweep named as its one NCCL variable reads, e.g. 'ALGO=Ring'."""
    return NcclSetting(name, _env(**kw), _VARIANT, note=note)


def _tuning(name: str, what: str, **kw) -> NcclSetting:
    """A tuning arm of the host-path study: the host path plus one NCCL knob, up to TUNING_MAX_BYTES."""
    return NcclSetting(name, _HOST + _env(**kw), max_bytes=TUNING_MAX_BYTES, what=what)


_SETTINGS = (
    NcclSetting("default", (), (VARIANT_SWEEP, HOSTPATH),
                what="the GPU-to-GPU path with NCCL's defaults, on a machine with two GPUs or more (NVLink on a "
                     "two-H200 host); for the host-path study no eight-rank run is committed, only "
                     "two-rank sweeps with P2P off (the committed run h200x2-20261129f)"),
    # the NCCL variants the investigation listed as next steps and never ran (chapter 06's variant sweep)
    _variant("P2P_DISABLE=1", P2P_DISABLE=1),
    _variant("P2P_LEVEL=LOC", P2P_LEVEL="LOC"),
    _variant("P2P_LEVEL=PIX", P2P_LEVEL="PIX"),
    _variant("P2P_LEVEL=PHB", P2P_LEVEL="PHB"),
    _variant("P2P_LEVEL=SYS", P2P_LEVEL="SYS"),
    _variant("SHM_USE_CUDA_MEMCPY=1", SHM_USE_CUDA_MEMCPY=1),
    _variant("ALGO=Ring", ALGO="Ring"),
    _variant("ALGO=Tree", ALGO="Tree"),
    _variant("PROTO=LL", PROTO="LL"),
    _variant("PROTO=LL128", PROTO="LL128"),
    _variant("PROTO=Simple", PROTO="Simple"),
    _variant("GRAPH_MIXING_SUPPORT=0", GRAPH_MIXING_SUPPORT=0, note=(
        "not in the investigation's list: this project added it after measuring it on two H200s. NCCL then "
        "stops serializing every CUDA-graph-captured collective against the communicator's other work "
        "(the variant sweep shows what that costs here). It is only safe where a graph launch and a "
        "non-captured NCCL call on the same communicator are never in flight together (NCCL "
        "documentation), so a server that mixes eager and graph collectives must check that first")),
    # the host-path study's arms, in the order they run: the first four (with 'default') are the path itself,
    # the rest NCCL's tuning knobs under the host path
    NcclSetting("host", _HOST, what="peer-to-peer off: NCCL's shared-memory transport through host memory, the "
                                    "original VM's path"),
    NcclSetting("host+cuda_memcpy", _MEMCPY, what="the host path with the proxy thread moving data by copy-engine "
                                                  "memcpy (NCCL_SHM_USE_CUDA_MEMCPY)"),
    NcclSetting("host+cuda_memcpy+vm_topology", _MEMCPY, vm_topology=True,
                what="that, with NCCL told the original VM's topology (one flat host bridge, no NUMA affinity, "
                     "the recorded link) through a generated NCCL_TOPO_FILE"),
    _tuning("host+PROTO=LL", "the host path with NCCL's low-latency protocol forced", PROTO="LL"),
    _tuning("host+PROTO=LL128", "the host path with the LL128 protocol forced", PROTO="LL128"),
    _tuning("host+PROTO=Simple", "the host path with the Simple protocol forced", PROTO="Simple"),
    _tuning("host+ALGO=Ring", "the host path with the ring algorithm forced", ALGO="Ring"),
    _tuning("host+ALGO=Tree", "the host path with the tree algorithm forced", ALGO="Tree"),
    _tuning("host+MIN_NCHANNELS=4", "the host path with at least 4 channels", MIN_NCHANNELS=4),
    _tuning("host+MIN_NCHANNELS=16", "the host path with at least 16 channels", MIN_NCHANNELS=16),
)

#: The registry: name -> setting, every setting once.
SETTINGS: dict[str, NcclSetting] = {}
for _s in _SETTINGS:
    if _s.name in SETTINGS or set(_s.studies) - set(STUDIES):
        raise ValueError(f"NCCL setting {_s.name!r}: a name is registered once, in studies from {STUDIES}")
    SETTINGS[_s.name] = _s
del _s


def of_study(study: str) -> dict[str, NcclSetting]:
    """The settings one sweep runs, by name, in the order it runs them."""
    if study not in STUDIES:
        raise SettingError(f"no sweep {study!r} reads the NCCL settings; known: {list(STUDIES)}")
    return {n: s for n, s in SETTINGS.items() if study in s.studies}


#: The variant sweep's settings and the host-path study's arms (name -> setting; views of SETTINGS).
VARIANTS = of_study(VARIANT_SWEEP)
ARMS = of_study(HOSTPATH)
#: The variants outside the investigation's list, and what a reader must know before using them.
VARIANT_NOTES = {n: s.note for n, s in VARIANTS.items() if s.note}


def setting(name: str, study: str | None = None) -> NcclSetting:
    """The setting called `name` (one `study` runs, where given); SettingError naming the known ones."""
    known = SETTINGS if study is None else of_study(study)
    if name not in known:
        which = "NCCL setting" if study is None else f"NCCL setting of the {study} sweep"
        raise SettingError(f"unknown {which} {name!r}; known: {list(known)} (helpers.interconnect.settings)")
    return known[name]


def env(name: str, study: str | None = None) -> dict[str, str]:
    """The environment the setting called `name` adds (SettingError for an unknown name)."""
    return setting(name, study).environment
