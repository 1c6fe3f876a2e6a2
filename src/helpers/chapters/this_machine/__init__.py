"""Chapter 08 (notebooks/08_this_machine): a verdict for the machine the run measured, not the original VM.

Five parts, each a line chosen by a tested function from what the run holds, and "not measured here" where it
holds nothing: (1) VM or not from every signal (helpers.machine.virt) and every GPU pair four ways
(helpers.interconnect.pairs); (2) the all-reduce at GLM-5's decode sizes beside a healthy reference for this
GPU kind (helpers.model.thismachine); (3) GLM-5's decode predicted on this GPU kind; (4) the observation (chapter
03's `served` record where it is a real model's, else the typed parameters), the loss, the host path's share and
the thresholds, all from this machine's numbers; (5) the remedies its failed checks call for.

`inputs(run, mode, typed)` reads the run (through the chapter's declared needs); `verdict(inputs, model)` is pure.
"""
from __future__ import annotations

from helpers.chapters.this_machine.build import predict_decode, verdict
from helpers.chapters.this_machine.parts import (FormulaValues, Inputs, MachineVerdict, Values, answer_values,
                                                 formula_values, inputs, observation, pair_check, typed_observation)
from helpers.core import params
from helpers.model import arith as ma

CHAPTER = "08_this_machine"

PARAMS = {"mode": params.choice("recorded", "auto", "replay"), "run_dir": params.string(),
          "model": ma.model_param(),
          "observed_tok_s_1": params.number(0.0, 1e6),
          "observed_tok_s_max": params.number(0.0, 1e9),
          "observed_concurrency_max": params.number(0, 100_000, integer=True)}

__all__ = ["CHAPTER", "PARAMS", "FormulaValues", "formula_values", "Inputs", "MachineVerdict", "Values", "answer_values", "inputs", "observation",
           "pair_check", "predict_decode", "typed_observation", "verdict"]
