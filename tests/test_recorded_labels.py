"""helpers.interconnect.recorded_labels: the strings committed studies and runs recorded, mapped once to Methods."""
import pandas as pd
import pytest

from helpers import repo_root
from helpers.core import recorded
from helpers.interconnect import recorded_labels as rl, studies, suite
from helpers.interconnect.method import COLUMNS, LEGACY_LEAD_US, Method

RUNS = repo_root() / "runs"


def test_every_string_of_every_registered_study_maps():
    fid = studies.fidelity_tables()             # raises on a string the module does not list
    ar = fid[fid.quantity.str.startswith("all_reduce time per call") & ~fid.quantity.str.contains("its own")]
    assert ar.method.notna().all()
    for role in studies.GAP_ROLES:
        g = studies.gap(role)
        assert g[g.who == "ours"].method.notna().all() and g[g.who == "nccl-tests"].tool_shape.notna().all()


def test_documented_examples():
    f, placement, direct = rl.FIDELITY_METHODS[
        "torch.distributed in one CUDA graph, host timer, rotating buffers, ranks launched at one deadline 0.3 ms "
        "ahead, in-place"]
    assert (f["harness"], f["start"], f["lead"], placement, direct) == ("graph", "aligned", 300, "in-place", False)
    assert rl.GAP_METHODS["ours, aligned start 0.2 ms ahead, non-blocking stream"] == Method(
        harness="graph", timer="host", rotate_bytes=2**20, start="aligned", start_lead_us=200)
    assert rl.GAP_METHODS["ours, aligned start, legacy default stream"].start_lead_us == LEGACY_LEAD_US
    assert rl.GAP_METHODS["ours, aligned start, ncclAllReduce direct, non-blocking stream"].api == "nccl"


def test_the_one_h200_study_ran_on_the_legacy_stream_and_the_two_h200_one_did_not():
    fid = studies.fidelity_tables()
    torch_rows = fid[(fid.api == "torch")]
    assert set(torch_rows[torch_rows.setup == "1x NVIDIA H200"].stream) == {"legacy"}
    assert set(torch_rows[torch_rows.setup == "2x NVIDIA H200"].stream) == {"side"}
    assert set(fid[fid.api == "direct"].stream) == {"legacy"}


def test_a_reworded_string_fails_at_load_naming_it(tmp_path):
    s = recorded.measured_studies("fidelity")[0]
    t = pd.read_csv(s.path / "fidelity.csv")
    t.loc[t.ours_method.str.startswith("torch.distributed eager, host timer"), "ours_method"] = \
        "torch.distributed eager, the host's timer, rotating buffers, in-place"
    t.to_csv(tmp_path / "fidelity.csv", index=False)
    with pytest.raises(rl.RecordedLabelError, match="the host's timer"):
        studies.read_fidelity(tmp_path / "fidelity.csv", s.id)
    g = pd.read_csv(recorded.study("allreduce-gap-idle").path / "allreduce_gap.csv")
    g.loc[0, "method"] = "ours, aligned start, a blue stream"
    with pytest.raises(rl.RecordedLabelError, match="a blue stream"):
        rl.from_gap(g)


def test_tidy_tables_of_the_time_get_todays_method_columns():
    old = pd.read_csv(RUNS / "h200x2-20261129f" / "results" / "06_vm_p2p" / "collective_sweep.csv")
    assert "method" not in old.columns
    new = rl.from_tidy(old)
    assert set(COLUMNS) <= set(new.columns) and len(new) == len(old)
    graph = new[old.harness == "graph+host_timer+aligned+libnccl"]
    # the variant sweep of that run was timed by today's VARIANT_METHOD (its recorded lead: 0.3 ms)
    assert set(graph[graph.op == "all_reduce"].method) == {suite.VARIANT_METHOD.label}
    assert set(graph[graph.op == "all_to_all"].method) == {suite.VARIANT_METHOD.for_op("all_to_all").label}
    assert set(new[old.harness == "eager"].method) == {"eager", "eager+out_of_place"}
    assert rl.from_tidy(new) is new                                  # today's tables pass through


def test_tidy_labels_that_say_rotate_need_the_studys_size_and_unknown_labels_are_named():
    t = pd.DataFrame([{"op": "all_reduce", "backend": "nccl", "harness": "graph+host_timer+rotate",
                       "placement": "in-place"}])
    with pytest.raises(rl.RecordedLabelError, match="no rotation size"):
        rl.from_tidy(t)
    assert rl.from_tidy(t, rotate_bytes=2**28).method.iloc[0] == "graph+host_timer+rotate_256MiB"
    direct = rl.from_tidy(t.assign(backend="nccl-direct"), rotate_bytes=2**28)
    assert direct.api.iloc[0] == "direct" and direct.stream.iloc[0] == "legacy"
    aligned = rl.from_tidy(t.assign(harness="graph+host_timer+rotate+aligned"), rotate_bytes=2**28)
    assert aligned.start_lead_us.iloc[0] == LEGACY_LEAD_US           # recorded before the lead was a column
    with pytest.raises(rl.RecordedLabelError, match="'graph\\+warp'"):
        rl.from_tidy(t.assign(harness="graph+warp"))


def test_an_older_runs_tables_get_one_method_vocabulary_at_load():
    """The two-GPU run saved its run and fit tables with harness labels and no lead; chapter 06's replay maps
    them with the lead its own sweep recorded, so every collective method they name is one the sweep has."""
    from helpers.chapters import vm_p2p as ch
    from helpers.core import layout

    saved = ch.saved_suite(layout.Run(repo_root() / "runs" / "h200x2-20261129f", "06_vm_p2p"))
    assert saved.machine.label == "2x NVIDIA H200" and saved.statements is None
    sweep = set(saved.collective_sweep.method)
    assert set(saved.collective_runs.method) <= sweep
    assert set(saved.fits[saved.fits.scope == "collective"].method) <= sweep
    assert set(saved.fits[saved.fits.scope == "copy"].method) == {"eager", "graph"}
