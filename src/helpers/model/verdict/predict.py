"""The Verdict: every band the diagnosis shows, built once from its inputs: seeded draws of every input,
the step per draw, bare metal and the VM per host-path scenario, the attribution of the VM's loss and
the decision rule's thresholds and evidence."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from helpers.core import recorded
from helpers.model import arith as ma
from helpers.model import kernels as kt
from helpers.model import measured as mb
from helpers.model.verdict import collectives as cl
from helpers.model.verdict import predictor as pr
from helpers.model.verdict.compute import bare_collectives_us, compute_us, parts, routed_us
from helpers.model.verdict.ranges import (BAND, BARE, CANNOT, EXPLAINS, FACTOR_UNIT, INPUTS, SAMPLES, SEED, SOFT_GRID, TP, VM,
                                          Inputs, Observation, VerdictInputError, inputs, observations)
from helpers.model.verdict.remedy import check_remedies
from helpers.model.verdict.scenarios import (REMEDY_ARMS, HostPath, copy_scenarios, measured_scenario, nccl_scenario,
                                             tuned_scenario,
                                             pair_scenarios, rule_sizes, study_scenario, vm_collectives_us)

@dataclass
class Verdict:
    """Every band the chapter shows, built once from its inputs."""

    model: ma.ModelConfig
    context: int
    floor_us: float
    inputs: Inputs
    scenarios: list[HostPath]
    samples: int = SAMPLES
    seed: int = SEED
    _draws: dict = field(default_factory=dict)
    #: every range as first registered, priced as it was then (before issue 45: no model error, the collective
    #: factor on the table, the step formula of commit 4483241); set by as_first_registered
    first_registered: bool = False

    @classmethod
    def build(cls, model: str, context: int, floor_us: float, study: mb.PrecisionStudy | None,
              hostpath_sweep: pd.DataFrame | None = None, vm_allreduce_us: tuple = (0.0, 0.0),
              ranges: pd.DataFrame | None = None, samples: int = SAMPLES, seed: int = SEED,
              scenarios: tuple[str, ...] | None = None) -> "Verdict":
        """Check every input before anything is computed (VerdictInputError naming it)."""
        m = ma.load_model(model)
        if not (isinstance(samples, int) and 100 <= samples <= 100_000):
            raise VerdictInputError(f"samples = {samples!r}: expected an integer from 100 to 100000")
        ins = inputs(study, ranges)
        hps = (copy_scenarios(m) + nccl_scenario() + tuned_scenario(m) + pair_scenarios() + study_scenario(hostpath_sweep)
               + measured_scenario(float(vm_allreduce_us[0]), float(vm_allreduce_us[1]), m))
        if scenarios is not None:
            known = {h.key for h in hps}
            unknown = [s for s in scenarios if s not in known]
            if unknown:
                raise VerdictInputError(f"unknown host-path scenario(s) {unknown}; this run has {sorted(known)}")
            hps = [h for h in hps if h.key in scenarios]
        if not hps:
            raise VerdictInputError("no host-path scenario has evidence: the VM cannot be predicted")
        observations()          # every observation it is scored against, present (VerdictInputError naming one)
        check_remedies()
        return cls(m, int(context), float(floor_us), ins, hps, samples, seed)

    # -- draws
    def draw(self, system: str) -> dict:
        """SAMPLES draws of every input for `system` (seeded: the same for every call); 'q' is the
        host-path scenarios' shared quantile (one all-reduce cost level per draw, correlated across sizes).
        Bare metal's draws are the predictor's for the reference (helpers.model.verdict.predictor: the same seed,
        ranges and order, so the bands here are predict()'s); the VM's add the model's own error after 'q'."""
        if system == BARE and not self.first_registered and system not in self._draws:
            d = pr.draw_inputs(self.inputs, kt.RTX, self.samples, self.seed, False)
            d["batch_at_nominal_64"] = self.inputs.get("batch_at_nominal_64", BARE).draw(None, self.samples)
            d["q"] = np.full(self.samples, 0.5)
            self._draws[system] = d
        if system not in self._draws:
            rng = np.random.default_rng(self.seed)
            d = {}
            for name in INPUTS:
                if name == "collective_spread" and system == VM:
                    d[name] = np.ones(self.samples)
                    rng.uniform(size=self.samples)   # keep the streams aligned across systems
                    continue
                d[name] = self.inputs.get(name, system).draw(rng, self.samples)
            d["q"] = rng.uniform(size=self.samples)
            if not self.first_registered:
                d["model_error"] = self.inputs.get("model_error", system).draw(rng, self.samples)
            self._factor_mode(system, d)
            self._draws[system] = d
        return self._draws[system]

    def _factor_mode(self, system: str, d: dict) -> None:
        """Where the collective range is the one first registered (a factor on the table), say so to
        bare_collectives_us."""
        if system == BARE and self.inputs.get("collective_spread", BARE).unit == FACTOR_UNIT:
            d["collective_factor"] = d["collective_spread"]

    def as_first_registered(self) -> "Verdict":
        """The same verdict with every input range as first registered, before any comparison moved it."""
        return Verdict(self.model, self.context, self.floor_us, self.inputs.as_first_registered(), self.scenarios,
                       self.samples, self.seed, first_registered=True)

    def mids(self, system: str) -> dict:
        if system == BARE and not self.first_registered:
            d = pr.draw_inputs(self.inputs, kt.RTX, 1, self.seed, True)
            d["batch_at_nominal_64"] = np.array([self.inputs.get("batch_at_nominal_64", BARE).mid])
            d["q"] = np.array([0.5])
            return d
        d = {n: np.array([self.inputs.get(n, system).mid]) for n in INPUTS if not (n == "collective_spread" and system == VM)}
        if not self.first_registered:
            d["model_error"] = np.array([self.inputs.get("model_error", system).mid])
        if system == VM:
            d["collective_spread"] = np.ones(1)
        d["q"] = np.array([0.5])
        self._factor_mode(system, d)
        return d

    def scenario(self, key: str) -> HostPath:
        for h in self.scenarios:
            if h.key == key:
                return h
        raise VerdictInputError(f"unknown host-path scenario {key!r}; this run has {[h.key for h in self.scenarios]}")

    # -- steps
    def _batches(self, obs_conc: int, soft: bool, draw: dict) -> np.ndarray:
        if soft:
            return np.asarray(draw["batch_at_nominal_64"], dtype=float) * obs_conc / 64.0
        return np.full(len(draw["q"]), float(obs_conc))

    def step_us(self, system: str, batch: np.ndarray, draw: dict, scenario: HostPath | None = None,
                collectives: bool = True) -> np.ndarray:
        """Step time per draw at the (possibly fractional) batches given: compute, collectives (bare
        metal's or the scenario's) and CPU time; fractional batches are interpolated on SOFT_GRID."""
        batch = np.asarray(batch, dtype=float)
        uniq = np.unique(batch)
        if len(uniq) == 1 and float(uniq[0]).is_integer():
            return self._step_at(system, int(uniq[0]), draw, scenario, collectives)
        grid = sorted(set(SOFT_GRID) | {int(math.floor(batch.min())), int(math.ceil(batch.max()))})
        at = {g: self._step_at(system, g, draw, scenario, collectives) for g in grid}
        gs = np.array(grid, dtype=float)
        idx = np.clip(np.searchsorted(gs, batch) - 1, 0, len(gs) - 2)
        lo, hi = gs[idx], gs[idx + 1]
        w = (batch - lo) / (hi - lo)
        stack = np.array([at[g] for g in grid])
        rows = np.arange(len(batch))
        return stack[idx, rows] * (1 - w) + stack[idx + 1, rows] * w

    def _step_at(self, system, batch, draw, scenario, collectives):
        p = parts(self.model.key, batch, self.context, self.floor_us)
        if system == BARE and scenario is None and collectives and not self.first_registered:
            return pr.step_us(p, draw, kt.RTX, pr.deployment_settings(), self.model.fmt("routed_experts"),
                              self.floor_us)
        gpu = compute_us(p, draw)
        if collectives:
            gpu = gpu + (bare_collectives_us(p, draw) if scenario is None else vm_collectives_us(p, scenario, draw["q"]))
        return gpu * (1 + draw["cpu_step_fraction"]) * draw.get("model_error", 1.0)

    def predict(self, obs: Observation, scenario: HostPath | None = None) -> dict:
        """Prediction, 5-95 % band and median of tokens/s for one observation (aggregate at the nominal
        concurrency, per stream at 1), the observation's percentile among the draws and whether it falls
        inside the band. The point prediction is the band's median, so it lies inside its own band; the
        step at every input's middle value (`mid_inputs_tok_s`) is kept beside it: at 64 on the VM it takes
        the nominal batch of 64 where the draws sample the achieved one, and can fall outside the band."""
        system = obs.system
        d, mid = self.draw(system), self.mids(system)
        b = self._batches(obs.concurrency, obs.soft, d)
        tok = b * 1e6 / self.step_us(system, b, d, scenario)
        bm = self._batches(obs.concurrency, obs.soft, mid)
        at_mid = float((bm * 1e6 / self.step_us(system, bm, mid, scenario))[0])
        lo, med, hi = np.percentile(tok, [BAND[0], 50, BAND[1]])
        return {"observation": obs.key, "system": system, "what": obs.label, "concurrency": obs.concurrency,
                "scenario": scenario.label if scenario else "bare-metal NCCL (aiconfigurator)",
                "scenario_key": scenario.key if scenario else "bare",
                "observed_tok_s": obs.observed_tok_s, "predicted_tok_s": float(med), "band_low_tok_s": float(lo),
                "band_median_tok_s": float(med), "band_high_tok_s": float(hi), "mid_inputs_tok_s": at_mid,
                "observed_percentile": 100 * float(np.mean(tok < obs.observed_tok_s)),
                "rel_err": (float(med) - obs.observed_tok_s) / obs.observed_tok_s,
                "inside_band": bool(lo <= obs.observed_tok_s <= hi)}

    def split(self, batch: int) -> dict:
        """Bare metal's point-prediction step at `batch` by term (ms): experts (routed and router, less the
        hidden shared expert), attention (its core, projections' share is in 'other'), indexer,
        collectives, everything else, and CPU time."""
        p = parts(self.model.key, batch, self.context, self.floor_us)
        d = self.mids(BARE)
        comp = float(compute_us(p, {**d, "indexer": np.zeros(1)})[0])   # compute without the indexer
        att = float((p.attention_roofline + d["attention_kernel"] * (p.attention_standin - p.attention_roofline))[0])
        idx = float((d["indexer"] * p.indexer)[0])
        moe = float(routed_us(p, d["routing_skew"])[0]) + p.router
        coll = float((bare_collectives_us(p, d) if self.first_registered else
                      cl.collectives_us(p, kt.RTX, d["collective_curve"], d["protocol_switch"]))[0])
        other = comp - moe - att
        cpu = (comp + idx + coll) * float(d["cpu_step_fraction"][0])
        return {"experts": moe / 1e3, "attention": att / 1e3, "indexer": idx / 1e3, "collectives": coll / 1e3,
                "other": other / 1e3, "cpu": cpu / 1e3, "step": (comp + idx + coll + cpu) / 1e3}

    def bare_metal(self) -> pd.DataFrame:
        return pd.DataFrame([self.predict(o) for o in observations() if o.system == BARE])

    def vm(self) -> pd.DataFrame:
        return pd.DataFrame([self.predict(o, h) for h in self.scenarios for o in observations() if o.system == VM])

    # -- attribution
    def loss_ms(self, c: int) -> tuple[float, float, float]:
        """The VM's lost time per step against bare metal at nominal concurrency c (both observed):
        c/observed_vm - c/observed_bm; at 64 its band follows the decode batch (low: the achieved), each end
        priced at its own batch (loss_at_batch_ms)."""
        if c == 1:
            x = self.loss_at_batch_ms(1, 1.0)
            return x, x, x
        r = self.inputs.get("batch_at_nominal_64", VM)
        return tuple(self.loss_at_batch_ms(c, float(b) * c / 64) for b in (r.low, r.mid, r.high))

    def step_pair_ms(self, c: int, b: float) -> tuple[float, float]:
        """(the VM's step, bare metal's step) in ms at nominal concurrency c when the decode batch was b: the VM's is
        b over its observed tokens/s at c; bare metal's is its observed step at c, c/observed_bm, and at another batch
        the community's observed steps read between the two batches around it (bare_metal_step_at: derived). A
        decode step does not grow in proportion to its batch (site-read8 T1: that scaling priced bare metal at 34.89
        in flight as 34.5 ms, below its own observed 48.5 ms at 32 streams)."""
        prim = {(o.system, o.concurrency): o for o in observations() if o.key in ("bm_1", "bm_64", "vm_1", "vm_64")}
        vm_step = b * 1e3 / prim[(VM, c)].observed_tok_s
        bm_step = c * 1e3 / prim[(BARE, c)].observed_tok_s if b == c else self.bare_metal_step_at(b)[0]
        return vm_step, bm_step

    @staticmethod
    def bare_metal_steps() -> pd.DataFrame:
        """Bare metal's observed decode steps by batch (ms = batch / tokens/s): the community reference's one stream
        and 64 (the primary observations) and the same community's decode benchmark on the recorded GPU at context 0
        (data/reference/holdouts.csv: observations the predictor's bands were not built beside; reading a step
        between them fits nothing to them)."""
        rows = [{"batch": float(o.concurrency), "step_ms": o.concurrency * 1e3 / o.observed_tok_s, "source": o.source}
                for o in observations() if o.key in ("bm_1", "bm_64")]
        h = recorded.load("reference/holdouts.csv")
        h = h[(h["system"] == kt.RTX) & (h["deployment"] == "bare-metal reference") & (h["context_label"].astype(str) == "0")
              & (h["metric"] == "aggregate output tok/s")]
        rows += [{"batch": float(r.concurrency), "step_ms": r.concurrency * 1e3 / float(r.observed), "source": r.source}
                 for r in h.itertuples() if float(r.concurrency) not in (1.0, 64.0)]
        return pd.DataFrame(rows).sort_values("batch").reset_index(drop=True)

    def bare_metal_step_at(self, b: float) -> tuple[float, dict, dict]:
        """Bare metal's step (ms) at batch b, read linearly between its two observed steps around b
        (bare_metal_steps), with those two points."""
        s = self.bare_metal_steps()
        lo = s[s["batch"] <= b].iloc[-1]
        hi = s[s["batch"] >= b].iloc[0]
        if hi["batch"] == lo["batch"]:
            return float(lo["step_ms"]), lo.to_dict(), hi.to_dict()
        f = (b - lo["batch"]) / (hi["batch"] - lo["batch"])
        return float(lo["step_ms"] + f * (hi["step_ms"] - lo["step_ms"])), lo.to_dict(), hi.to_dict()

    def loss_at_batch_ms(self, c: int, b: float) -> float:
        """The VM's lost time per step at nominal concurrency c with a decode batch of b: its step less bare
        metal's at the same batch (step_pair_ms)."""
        vm_step, bm_step = self.step_pair_ms(c, b)
        return vm_step - bm_step

    def excess_ms(self, c: int, hp: HostPath, q: float, batch: float | None = None,
                  all_reduces_only: bool = True) -> float:
        """The scenario's collectives minus bare metal's (mid factor) per step at batch c, in ms. By default the
        step's all-reduces only, the logits all-gather left at bare metal's cost: the basis of the decision rule's
        thresholds (thresholds: t = r + s x loss / n) and of page 08's formula, so a share here and a share from
        a threshold are one computation (site-read5 N1). `all_reduces_only=False`: every collective of the step
        (what restoring P2P would save: the remedies' gains)."""
        b = int(round(batch if batch is not None else c))
        p = parts(self.model.key, b, self.context, self.floor_us)
        if all_reduces_only:
            keep = [i for i, x in enumerate(p.collectives) if x[1] == "all_reduce"]
            p = replace(p, collectives=tuple(p.collectives[i] for i in keep),
                        curves=tuple(p.curves[i] for i in keep) if p.curves else ())
        bare = sum(n * us for _, _, n, _, us in p.collectives)
        return float((vm_collectives_us(p, hp, np.array([q]))[0] - bare) / 1e3)

    def attribution(self) -> pd.DataFrame:
        """Per scenario and end (1, 64): the share of the VM's lost time per step its host path explains through
        the step's all-reduces (excess_ms: the thresholds' basis; the logits all-gather at bare metal's cost), with
        its band (scenario low/high; at 64 also the decode batch) and what is left unexplained. `step_excess_ms`
        keeps every collective's excess (the all-gather's included) for the remedies' gains."""
        rows = []
        adm = {r.scenario_key: (r.admissible, r.why_not) for r in self.admissibility().itertuples()}
        for c in (1, 64):
            lo_l, mid_l, hi_l = self.loss_ms(c)
            rng = self.inputs.get("batch_at_nominal_64", VM)
            batches = (1,) if c == 1 else (rng.low, rng.high)
            for hp in self.scenarios:
                mid = self.excess_ms(c, hp, 0.5) / mid_l
                ends, at = [], []
                for b in batches:
                    loss = self.loss_at_batch_ms(c, b) if c != 1 else mid_l
                    for q in (0.0, 1.0):
                        ends.append(self.excess_ms(c, hp, q, b if c != 1 else None) / loss)
                        at.append(float(b))
                rows.append({"concurrency": c, "scenario": hp.label, "scenario_key": hp.key, "kind": hp.kind,
                             "lost_ms_per_step": mid_l, "lost_ms_low": lo_l, "lost_ms_high": hi_l,
                             "host_path_excess_ms": self.excess_ms(c, hp, 0.5),
                             "step_excess_ms": self.excess_ms(c, hp, 0.5, all_reduces_only=False),
                             "share_explained": mid, "share_low": min(ends), "share_high": max(ends),
                             # the decode batch each band end was drawn at (site-read6 R1: at 64 not only 64)
                             "share_low_batch": at[int(np.argmin(ends))], "share_high_batch": at[int(np.argmax(ends))],
                             "unexplained": 1 - mid, "admissible": adm[hp.key][0], "why_not": adm[hp.key][1]})
        return pd.DataFrame(rows)

    def share_band_basis(self) -> dict:
        """What the 64-stream share bands draw (site-read6 R1): each end takes the scenario's low and high all-reduce
        at both ends of the decode batch (`batch_at_nominal_64`: the achieved concurrency to the nominal 64), its
        message at that batch (the batch rounded to whole sequences) and the loss over that batch; the middle value
        is at the range's middle batch. One computation with attribution()."""
        r = self.inputs.get("batch_at_nominal_64", VM)
        lo_l, mid_l, hi_l = self.loss_ms(64)

        def message(b: float) -> float:
            p = parts(self.model.key, int(round(b)), self.context, self.floor_us)
            return float(next(m for _, kind, _, m, _ in p.collectives if kind == "all_reduce"))

        return {"batch_lo": float(r.low), "batch_mid": float(r.mid), "batch_hi": float(r.high),
                "loss_lo_ms": lo_l, "loss_mid_ms": mid_l, "loss_hi_ms": hi_l,
                "message_lo_bytes": message(r.low), "message_hi_bytes": message(r.high)}

    def share_envelope(self) -> dict[int, tuple[float, float]]:
        """Per end (1, 64): the lowest and highest share of the lost time the admissible scenarios explain
        (attribution's bands, the decode batch's range included), as computed: the one range every page
        states (page 1, the attribution, the conclusion)."""
        a = self.attribution()
        a = a[a["admissible"]]
        return {c: (float(a.loc[a["concurrency"] == c, "share_low"].min()),
                    float(a.loc[a["concurrency"] == c, "share_high"].max())) for c in (1, 64)}

    def residuals(self) -> pd.DataFrame:
        """What the VM's step leaves beyond its predicted compute (mid inputs, bare-metal collectives) at
        the observed batches 1 and 17: the same left-over at both points fits a latency-bound collective
        and a fixed per-step tax alike."""
        mid = self.mids(VM)
        out = []
        for o in observations():
            if o.key not in ("vm_1", "vm_17"):
                continue
            step = o.concurrency / o.observed_tok_s * 1e3
            comp = float(self.step_us(VM, np.array([o.concurrency]), mid, None)[0]) / 1e3
            out.append({"observation": o.key, "batch": o.concurrency, "observed_step_ms": step,
                        "predicted_with_bare_metal_collectives_ms": comp, "left_over_ms": step - comp})
        return pd.DataFrame(out)

    # -- which scenarios may set a bound
    def admissibility(self) -> pd.DataFrame:
        """Per scenario: whether its 8-rank all-reduce at the decision rule's two message sizes costs at least
        bare metal's NCCL over P2P at the same message (middle values). An all-reduce staged through host
        memory that beats direct P2P contradicts the physics it models: such a scenario is shown struck out,
        with this reason, and sets no bound (shares, ranges, the conclusion, the remedies' gains). A measured
        all-reduce is a measurement, not a model: it is always admitted."""
        th = self.thresholds()
        out = []
        for hp in self.scenarios:
            why, faster = [], []
            for t in th.itertuples():
                mid = float(np.ravel(hp.time("all_reduce", t.message_bytes, TP)[1])[0])
                if mid < t.bare_metal_us and hp.kind != "measured":
                    why.append(f"{mid:.0f} µs at {t.message_bytes / 1024:.0f} KiB against bare metal's "
                               f"{t.bare_metal_us:.0f} µs over P2P (aiconfigurator's NCCL table, read between its points: derived)")
                    faster.append(int(t.concurrency))
            # `faster_at`: the concurrencies (the rule's message sizes) where it beats P2P; one is enough to set it
            # aside at both, and the page says at which (a reason true at one stream only is said so: issue 47)
            if hp.key in REMEDY_ARMS:
                out.append({"scenario_key": hp.key, "scenario": hp.label, "admissible": False,
                            "why_not": REMEDY_ARMS[hp.key], "faster_at": tuple(faster)})
                continue
            out.append({"scenario_key": hp.key, "scenario": hp.label, "admissible": not why,
                        "why_not": ("faster through host memory than NCCL over P2P: " + "; ".join(why)) if why else "",
                        "faster_at": tuple(faster)})
        return pd.DataFrame(out)

    def admitted(self) -> list[HostPath]:
        """The scenarios that may set a bound (admissibility)."""
        ok = set(self.admissibility().query("admissible")["scenario_key"])
        return [h for h in self.scenarios if h.key in ok]

    # -- the decision rule
    def thresholds(self) -> pd.DataFrame:
        """What an 8-rank all-reduce on the VM must cost for its host path to explain at least EXPLAINS
        (and at most CANNOT) of the lost time: at one token (c=1) and at 64 tokens (c=64). Counted: the
        step's all-reduces; the logits all-gather (one a step) is left at bare metal's cost."""
        s1, s64 = rule_sizes(self.model)
        return pd.DataFrame([{"concurrency": c, **self._rule_at(c, self.loss_ms(c)[1]), "message_bytes": size}
                             for c, size in ((1, s1), (64, s64))])

    def _rule_at(self, batch: float, loss: float) -> dict:
        """The rule at a decode batch (rounded to whole sequences) and its loss per step: the step's all-reduces, the
        message and bare metal's all-reduce there, and t = r + s x L / n at EXPLAINS and CANNOT."""
        p = parts(self.model.key, int(round(batch)), self.context, self.floor_us)
        n_ar = sum(n for _, kind, n, _, _ in p.collectives if kind == "all_reduce")
        size, bare = next((m, us) for _, kind, _, m, us in p.collectives if kind == "all_reduce")
        return {"message_bytes": float(size), "all_reduces_per_step": n_ar, "bare_metal_us": float(bare),
                "lost_ms_per_step": loss, "explains_80_us": bare + EXPLAINS * loss * 1e3 / n_ar,
                "explains_25_us": bare + CANNOT * loss * 1e3 / n_ar}

    def achieved_batch_rule(self) -> tuple[dict, pd.DataFrame]:
        """The decision rule at the other end of the 64-stream bands (site-read7 S3, S6): the decode batch at the
        achieved concurrency (`batch_at_nominal_64`'s low, rounded to whole sequences for the message), its
        message, bare metal's all-reduce there and the loss over that batch, with the thresholds t = r + s x L / n
        as thresholds() computes them at the nominal 64; and each scenario's all-reduce at that message (low, mid,
        high) with the share of that loss its low and high explain: the ends of attribution()'s 64-stream bands
        drawn at that batch, one computation with them."""
        b = self.share_band_basis()
        batch, loss = b["batch_lo"], b["loss_lo_ms"]
        vm_step, bm_step = self.step_pair_ms(64, batch)
        _, p_lo, p_hi = self.bare_metal_step_at(batch)
        rule = {"concurrency": 64, "batch": batch, **self._rule_at(batch, loss),
                "vm_step_ms": vm_step, "bm_step_ms": bm_step, "bm_point_lo": p_lo, "bm_point_hi": p_hi,
                # the loss as priced before site-read8 T1 (bare metal's step in proportion to the batch), shown beside
                "loss_proportional_ms": vm_step - batch * 1e3 / next(o.observed_tok_s for o in observations()
                                                                       if o.key == "bm_64")}
        size, bare = rule["message_bytes"], rule["bare_metal_us"]
        n_ar = rule["all_reduces_per_step"]
        adm = {r.scenario_key: r.admissible for r in self.admissibility().itertuples()}
        rows = []
        for hp in self.scenarios:
            lo, mid, hi = (float(np.ravel(v)[0]) for v in hp.time("all_reduce", size, TP))
            share = lambda us: (us - bare) * n_ar / 1e3 / loss  # noqa: E731
            rows.append({"scenario": hp.label, "scenario_key": hp.key, "message_bytes": float(size), "low_us": lo,
                         "mid_us": mid, "high_us": hi, "share_low": share(lo), "share_high": share(hi),
                         "admissible": adm[hp.key]})
        return rule, pd.DataFrame(rows)

    def evidence(self) -> pd.DataFrame:
        """Each scenario's 8-rank all-reduce at the rule's two sizes (low, mid, high) and the share of the
        loss it would explain there."""
        th = self.thresholds()
        adm = {r.scenario_key: r.admissible for r in self.admissibility().itertuples()}
        rows = []
        for hp in self.scenarios:
            for t in th.itertuples():
                lo, mid, hi = (float(np.ravel(v)[0]) for v in hp.time("all_reduce", t.message_bytes, TP))
                share = lambda us: (us - t.bare_metal_us) * t.all_reduces_per_step / 1e3 / t.lost_ms_per_step  # noqa: E731
                rows.append({"scenario": hp.label, "scenario_key": hp.key, "kind": hp.kind,
                             "concurrency": t.concurrency, "message_bytes": t.message_bytes, "low_us": lo,
                             "mid_us": mid, "high_us": hi, "share_low": share(lo), "share_mid": share(mid),
                             "share_high": share(hi), "evidence": hp.evidence, "admissible": adm[hp.key]})
        return pd.DataFrame(rows)
