"""The one registry of NCCL settings (helpers.interconnect.settings): every sweep that sets NCCL's environment
reads it, no second table of settings remains, an unknown name is refused naming the known ones, and every
name a committed result carries still resolves."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from helpers.interconnect import hostpath, settings, suite

ROOT = Path(__file__).resolve().parents[1]
#: Variables a tool sets for its own diagnostics or writes at run time: not settings under study.
NOT_SETTINGS = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_TOPO_FILE"}   # logging and topology, not settings
ENV_PREFIXES = ("NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_")


def _sources() -> list[Path]:
    return sorted(ROOT.glob("src/helpers/**/*.py")) + sorted(ROOT.glob("benchmarks/*.py"))


def test_every_setting_is_registered_once_with_its_environment():
    assert list(settings.SETTINGS) == [s.name for s in settings.SETTINGS.values()]
    assert settings.env("host", settings.HOSTPATH) == {"NCCL_P2P_DISABLE": "1"}
    assert settings.env("PROTO=LL", settings.VARIANT_SWEEP) == {"NCCL_PROTO": "LL"}
    assert settings.setting("default").studies == (settings.VARIANT_SWEEP, settings.HOSTPATH)
    # the views are the registry's own objects, in the registry's order
    for study, view in ((settings.VARIANT_SWEEP, settings.VARIANTS), (settings.HOSTPATH, settings.ARMS)):
        assert all(view[n] is settings.SETTINGS[n] for n in view)
        assert list(view) == [n for n, s in settings.SETTINGS.items() if study in s.studies]
    assert set(settings.VARIANT_NOTES) == {"GRAPH_MIXING_SUPPORT=0"}


def test_an_unknown_name_is_refused_naming_the_known_ones():
    with pytest.raises(settings.SettingError, match=r"unknown NCCL setting 'P2P_DISABLE=2'; known: \['default', "):
        settings.setting("P2P_DISABLE=2")
    with pytest.raises(settings.SettingError, match=r"of the hostpath sweep 'PROTO=LL'; known: \['default', 'host'"):
        settings.env("PROTO=LL", settings.HOSTPATH)      # a variant, not an arm
    with pytest.raises(settings.SettingError, match=r"known: \['variants', 'hostpath'\]"):
        settings.of_study("arms")


def test_every_sweep_reads_the_one_registry():
    # the host-path study's arms are the registry's, not a copy
    assert hostpath.ARMS is settings.ARMS
    assert hostpath.ARM_GROUPS["all"] == tuple(settings.ARMS)
    # the variant sweep plans every registered variant, in order, and the environment it launches with is theirs
    eight = suite.plan_collectives(suite.Machine(8, "GPU", 64, 56))
    assert [r[2] for r in eight.runs[1:-1]] == list(settings.VARIANTS)
    # the workers' base environment is the registry's, wherever a launch is made
    from helpers.interconnect import collectives, nodes
    assert collectives.BASE_ENV is settings.BASE_ENV and nodes.BASE_ENV is settings.BASE_ENV
    for module in ("collectives", "fidelity", "nodes", "suite", "hostpath"):
        mod = __import__(f"helpers.interconnect.{module}", fromlist=["x"])
        for name in ("NCCL_VARIANTS", "VARIANT_NOTES", "TOOL_ENV", "Arm"):
            assert not hasattr(mod, name), f"helpers.interconnect.{module}.{name}: a second table of NCCL settings"
    # the benchmarks name their settings from the registry
    text = (ROOT / "benchmarks" / "allreduce_gap.py").read_text()
    tree = ast.parse(text)
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "SETTINGS" for t in n.targets)]
    assert names and all(settings.setting(v, settings.VARIANT_SWEEP) for v in ast.literal_eval(names[0].value))
    for script in ("allreduce_gap.py", "fidelity.py"):
        assert "settings.env(" in (ROOT / "benchmarks" / script).read_text()


def test_no_second_table_of_nccl_environments_remains():
    """No dict literal outside settings.py sets an NCCL (or multicast) variable under study: each lives once."""
    found = []
    for path in _sources():
        if path.name == "settings.py" and path.parent.name == "interconnect":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                bad = [k for k in keys if k.startswith(ENV_PREFIXES) and k not in NOT_SETTINGS]
                if bad:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} sets {bad}")
    assert not found, "NCCL settings outside helpers.interconnect.settings:\n" + "\n".join(found)


def _committed_csvs() -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "runs/*.csv", "data/*.csv"],
                         capture_output=True, text=True, check=True).stdout
    files = [ROOT / f for f in out.split("\0") if f]
    assert files, "git lists no committed CSV under runs/ or data/: run the tests from a git checkout"
    return files


@pytest.mark.integration
def test_every_setting_name_in_committed_results_still_resolves():
    """The names are labels in committed results: a collective row's variant, a host-path row's arm, an
    allreduce_gap row's nccl_setting. Renaming a setting would orphan them; this fails first."""
    seen, missing = set(), []
    for path in _committed_csvs():
        cols = set(pd.read_csv(path, nrows=0).columns)
        checks = []
        if {"variant", "backend"} <= cols:      # collective sweeps, runs and fits (a copy fit's backend is cuda/cpu)
            checks.append(("variant", settings.VARIANTS, lambda df: df[df.backend.isin(["nccl", "gloo", "nccl-direct"])]))
        if "arm" in cols:
            checks.append(("arm", settings.ARMS, lambda df: df))
        if "nccl_setting" in cols:
            checks.append(("nccl_setting", settings.VARIANTS, lambda df: df))
        if not checks:
            continue
        df = pd.read_csv(path, low_memory=False)
        for col, known, rows in checks:
            for v in rows(df)[col].dropna().unique():
                seen.add(v)
                if v not in known and v != suite.REPEAT_VARIANT:
                    missing.append(f"{path.relative_to(ROOT)}: {col} {v!r}")
    assert not missing, "setting names in committed results that the registry no longer holds:\n" + "\n".join(missing)
    assert {"default", "P2P_DISABLE=1", "GRAPH_MIXING_SUPPORT=0", "PROTO=LL128"} <= seen   # the check saw the sweeps
