"""One tensor-parallel rank's share of a decode step of an MLA + MoE model, built from torch operators.

From a model file in data/models/ (GLM-5 by default) and a TP degree, `build_rank` makes one rank's
weights (random, nothing downloaded) and `DecodeStep` runs one decode step of `batch` sequences whose
context is `context` tokens, the way a serving engine runs it:

    embedding (vocab-parallel) -> all-reduce
    per layer:  rmsnorm -> fused q_a + kv_a projection -> q_a / kv_a rmsnorm -> q_b -> absorbed k (bmm)
                -> rotary embedding -> KV-cache store -> attention over the cache -> absorbed v (bmm)
                -> o_proj -> all-reduce -> residual + rmsnorm
                DSA indexer: wq_b, wk + layernorm, rotary, weights_proj, key store, index scores, top-k
                dense layers: gate_up -> SiLU x up -> down
                MoE layers: router -> sigmoid top-k -> permute -> grouped GEMM 1 -> SiLU x up -> grouped
                GEMM 2 -> weighted combine; shared expert; -> all-reduce -> residual
    final rmsnorm -> lm_head (vocab-parallel) -> all-gather -> greedy sampling

Sharding follows tensor parallelism as SGLang lays out MLA models: the latent projections (fused
q_a/kv_a), the indexer, norms and the router replicated; q_b, the absorbed k/v up-projections and o_proj
split by heads (o_proj row-parallel); experts, the shared expert and the dense MLP split on their
intermediate size (gate_up column-parallel, down row-parallel); embedding and lm_head split by vocabulary.
The two all-reduces per layer sit after o_proj and after the MLP/MoE. With a process group (one process
per rank: torchrun, or `run_sharded` over gloo) they are real collectives inside the step; without one
they are left out and the step is one rank's compute.

Where the device cannot hold every layer, `build_rank` holds as many distinct MoE layers as fit and
cycles them over the model's MoE positions (the dense layers are held as they are), each with its own KV
cache, so weights are still read from memory, not from a cache.

Every op belongs to one component (`COMPONENTS`); `DecodeStep.run(components=...)` runs only some of
them, which is how step.timing times each component alone. `component_bytes` says what each component
reads per step, in the emulated precision and in the checkpoint's.

Precisions (`PRECISIONS`): "bf16" (the default), "fp32" (the CPU correctness reference) and "fp8": the
weights of the large matrix products (`FP8_WEIGHTS`: the fused q_a/kv_a projection, q_b, o_proj, the
indexer's wq_b and wk, the dense MLP, the shared expert and the routed experts) as E4M3 values with one
float32 scale per output column, every activation row quantized where it is used (helpers.model.fp8);
everything else in bf16 as SGLang's FP8 checkpoints keep it: norms, the router, embedding and lm_head,
the indexer's weights_proj, the absorbed k/v up-projections (a batched product torch has no scaled form
of) and the KV cache. `build_rank` refuses fp8 where a trial product fails on the device.

Shared-expert overlap (`shared_overlap`): as SGLang's DeepseekV2MoE does on CUDA for up to
DUAL_STREAM_TOKEN_THRESHOLD tokens, the shared expert runs on the current stream while the router, top-k
and routed experts run on a second stream, forked and joined with events (capturable in a CUDA graph).
In the fused FP8 step the indexer's weights_proj, a bf16 product of its own there, runs on that stream too,
beside the attention's products (SGLang's indexer runs its key and weights products on its alternate
stream at decode).
A component timed alone runs alone, so the components' sum exceeds the overlapped step by about the time
the overlap hides.

The package, by job: `shapes` (the vocabulary, one rank's shapes and sharding), `precision` (what "fp8"
holds in FP8 and its bytes), `build` (one rank's model and the memory plan), `ops`, `program_unfused`,
`program_fused` and `decode` (the DecodeStep and its two programs), `accounting` (bytes per component) and
`checks` (the sharded and FP8 correctness checks), `timing` (one step timed, whole and per component:
steptime's sweep and the two-rank check both use it). Every name callers use is here: `step.X`
(the timing names through helpers.model.steptime).
"""
from __future__ import annotations

from .. import arith as ma
from .. import fp8
from .accounting import component_bytes
from .build import (GPU_RESERVE_BYTES, MemoryPlan, RankModel, build_full, build_rank, check_inputs, context_limit,
                    convert_model, cpu_check_bytes, cpu_memory_rule, device_free_bytes, plan_memory, positions,
                    reserve_for, shard_model, to_device)
from .checks import (FP8_CHECK_VARIANTS, FP8_PRODUCT_TOLERANCE, FP8_TOLERANCE, FP32_TOLERANCE, NAIVE_GATE_UP,
                     LogitCheck, compare_logits, fp8_check, fp8_product_errors, fp8_sharding_check, run_sharded,
                     sharding_check, shift_scales, unsharded_logits)
from .decode import DecodeStep
from .ops import MOE_IMPLS, Op, x_projection, grouped_mm, grouped_mm_loop, rmsnorm, rope
from .precision import check_precision, held_in_fp8, stored_bytes
from .shapes import (ATTENTION_MODES, BYTES, COMPONENTS, DTYPES, DUAL_STREAM_TOKEN_THRESHOLD, FP8_WEIGHTS, FUSIONS,
                     PRECISIONS, SHARED_OVERLAP, Shard, StepError, StepMemoryError, WSpec, attention_specs,
                     head_specs, local_shape, mlp_specs, shard_sizes, shard_tensor, shard_weight)

__all__ = [
    "ma", "fp8",
    # shapes and sharding
    "COMPONENTS", "PRECISIONS", "DTYPES", "ATTENTION_MODES", "BYTES", "FP8_WEIGHTS", "SHARED_OVERLAP", "FUSIONS",
    "DUAL_STREAM_TOKEN_THRESHOLD", "StepError", "StepMemoryError", "Shard", "shard_sizes", "WSpec",
    "attention_specs", "mlp_specs", "head_specs", "local_shape", "shard_tensor", "shard_weight",
    # precision
    "held_in_fp8", "stored_bytes", "check_precision",
    # building and the memory plan
    "RankModel", "positions", "context_limit", "check_inputs", "build_full", "convert_model", "to_device",
    "shard_model", "MemoryPlan", "GPU_RESERVE_BYTES", "plan_memory", "cpu_check_bytes", "cpu_memory_rule",
    "reserve_for", "device_free_bytes", "build_rank",
    # the step
    "x_projection", "Op", "rmsnorm", "rope", "MOE_IMPLS", "grouped_mm", "grouped_mm_loop", "DecodeStep",
    # byte accounting
    "component_bytes",
    # correctness checks
    "LogitCheck", "FP32_TOLERANCE", "FP8_TOLERANCE", "FP8_PRODUCT_TOLERANCE", "compare_logits", "unsharded_logits",
    "run_sharded", "NAIVE_GATE_UP", "sharding_check", "shift_scales", "FP8_CHECK_VARIANTS", "fp8_check",
    "fp8_product_errors", "fp8_sharding_check",
]
