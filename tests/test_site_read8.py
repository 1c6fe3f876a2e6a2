"""Site reads 8 and 9 (the published run presented by d39bff7 and 43eaf39): the statements that disagreed stay in
agreement.

T1/U1: the VM's loss at the achieved decode batch takes bare metal's step at that batch, read between the community's
observed steps around it, not bare metal's 64-stream step in proportion to the batch nor scaled by a prediction (which
put it below the observed step at 32 streams). T4: a set-aside reason names the rule's sizes without "only". T8/U5: a
chapter a replay presented again says so in its parameters box, in the prose and in the table's cells.
"""
from __future__ import annotations

import pytest

from helpers.book import staging
from helpers.chapters.diagnosis.verdict_sections import faster_where

import sitereads


@pytest.fixture(scope="module")
def v():
    return sitereads.verdict()


def test_bare_metals_step_at_the_achieved_batch_lies_between_its_observed_steps(v):
    """T1, U1: bare metal's observed steps rise with the batch; at the achieved batch the step read between them lies
    between its two neighbours, so never below the observed step at a smaller batch; the loss is the VM's step there
    less that, and the proportional reading (the page's earlier figure) is larger."""
    steps = v.bare_metal_steps()
    assert list(steps["batch"]) == sorted(steps["batch"]) and steps["step_ms"].is_monotonic_increasing
    assert {1.0, 64.0} <= set(steps["batch"]) and len(steps) > 2
    rule, _ = v.achieved_batch_rule()
    b = rule["batch"]
    below = steps[steps["batch"] <= b].iloc[-1]
    above = steps[steps["batch"] >= b].iloc[0]
    assert below["step_ms"] <= rule["bm_step_ms"] <= above["step_ms"]
    assert rule["bm_point_lo"]["batch"] == below["batch"] and rule["bm_point_hi"]["batch"] == above["batch"]
    assert rule["lost_ms_per_step"] == pytest.approx(rule["vm_step_ms"] - rule["bm_step_ms"])
    assert rule["loss_proportional_ms"] > rule["lost_ms_per_step"]
    assert v.loss_ms(64)[0] == pytest.approx(rule["lost_ms_per_step"])
    # at the nominal batch the observed figures alone, as before
    lo, mid, hi = v.loss_ms(64)
    obs = {o.key: o.observed_tok_s for o in sitereads.observations()}
    assert mid == pytest.approx(64e3 / obs["vm_64"] - 64e3 / obs["bm_64"])


def test_a_set_aside_reason_names_the_rules_sizes_without_only(v):
    """T4: "faster than P2P at one stream's 12 KiB of the rule's two sizes", never "only" (a model set aside may beat
    P2P at the achieved batch's size between them)."""
    adm = v.admissibility()
    fast = adm[adm["faster_at"].map(len) > 0].set_index("scenario_key")
    words = faster_where(fast, v.thresholds())
    assert " only" not in words and "of the rule's two sizes" in words


def test_a_replayed_chapters_parameters_box_says_the_replay_set_them():
    """T8, U5: the box of a chapter a replay presented again names the replay's commit, and its cells say the replay
    set a value; a chapter the run executed itself keeps "set by the run"."""
    defaults = 'mode = "auto"  # allowed: auto, recorded, replay\nrun_dir = ""\n'
    injected = 'mode = "replay"\nrun_dir = "/x/runs/r"\n'
    ctx = staging.RunContext("r", "h200", replayed={"06_vm_p2p": ("abc1234", "replay"),
                                                    "07_diagnosis": ("abc1234", "auto")})
    box = staging.parameters_box(defaults, injected, ctx, "06_vm_p2p")
    assert "a replay at commit `abc1234` re-executed it with these values (mode `replay`" in box
    assert '`"replay"` (set by the replay)' in box and "(set by the run)" not in box
    diag = staging.parameters_box(defaults, 'mode = "recorded"\n', ctx, "07_diagnosis")
    assert "a replay at commit `abc1234` re-executed it with these values (measuring nothing)" in diag
    kept = staging.parameters_box(defaults, 'mode = "recorded"\n', ctx, "03_baselines_tuning")
    assert "Run `r` (target `h200`) executed this chapter with these values" in kept and "(set by the run)" in kept
