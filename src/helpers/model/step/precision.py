"""What precision "fp8" holds in FP8 and what that costs in bytes: the FP8_WEIGHTS rule, the bytes one rank
holds of a weight in each precision, and the check that a precision (and for fp8 every FP8 weight's
per-rank shape) is usable. See helpers.model.fp8 for the values and products themselves."""
from __future__ import annotations

import numpy as np

from .. import arith as ma
from .. import fp8
from .shapes import (BYTES, FP8_WEIGHTS, PRECISIONS, StepError, WSpec, attention_specs, local_shape,
                     mlp_specs)

def held_in_fp8(name: str, precision: str) -> bool:
    return precision == "fp8" and name in FP8_WEIGHTS


def stored_bytes(s: WSpec, tp: int, precision: str) -> float:
    """Bytes one rank holds (and a step reads, where it reads all of it) of weight `s`: 1 a value plus a
    float32 scale per output column for the FP8 weights of precision "fp8", else BYTES[precision] a value."""
    shape = local_shape(s, tp)
    values = float(np.prod(shape))
    if held_in_fp8(s.name, precision):
        return values + float(np.prod(shape[:-2])) * shape[-1] * fp8.SCALE_BYTES
    return values * BYTES[precision]


def check_precision(precision: str, m: ma.ModelConfig | None = None, tp: int = 1) -> None:
    """precision one of PRECISIONS; for "fp8", every FP8 weight's per-rank shape usable by the scaled
    products (K and N multiples of 16), else StepError naming the weight."""
    if precision not in PRECISIONS:
        raise StepError(f"precision {precision!r}: expected one of {PRECISIONS}")
    if precision == "fp8" and m is not None:
        specs = attention_specs(m) + (mlp_specs(m, True) if m.dense_layers else []) \
            + (mlp_specs(m, False) if m.moe_layers else [])
        for sp in specs:
            if sp.name in FP8_WEIGHTS:
                try:
                    fp8.check_shape(f"{sp.name} of {m.name} at TP{tp}", local_shape(sp, tp))
                except fp8.Fp8Error as e:
                    raise StepError(str(e)) from e
