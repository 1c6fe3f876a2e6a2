"""Command builder for `transformers serve` (transformers[serving]): the CPU-capable stand-in server.

It speaks the OpenAI API (/v1/completions, /v1/chat/completions, /v1/models) and answers /health.
Quirks the client copes with: the request's model name must equal the served path; streams end without
`data: [DONE]` (usage arrives in the last chunk); the chat endpoint echoes the prompt in its first
chunk, so benchmarks use /v1/completions; unknown request fields are refused (HTTP 422).

Memory: with continuous batching, transformers sizes its paged cache from the free memory of the device;
on a CPU that is the machine's RAM (a 64-hidden tiny model took about 14.6 GB). A CPU server therefore
gets a cache of a stated size (`--cb-num-blocks`, `--cb-max-batch-tokens`: CPU_CB_CACHE) and runs within
a resident-memory cap (CPU_MEMORY_MB, enforced by helpers.core.procs; measured: about 0.5 GiB for the
tiny demo model at 16 concurrent requests).
"""
from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from helpers.serving.server import ServerSpec, free_port

#: the memory cap of a CPU server (MiB): each cpu-demo server runs within it
CPU_MEMORY_MB = 2048
#: the continuous-batching cache of a CPU server: blocks of the paged cache, tokens per batch
CPU_CB_CACHE = {"cb_num_blocks": 128, "cb_max_batch_tokens": 1024}


@dataclass(frozen=True)
class TransformersServeConfig:
    model: str                          # a local model folder (never a hub name here)
    device: str = "cpu"                 # "cpu" | "cuda" | "cuda:0" | "auto"
    dtype: str = "auto"
    attn_implementation: str | None = None
    continuous_batching: bool = False
    seed: int | None = 0                # --default-seed: reproducible sampling
    extra_args: tuple[str, ...] = ()    # passed as is (a flag the server rejects is a real test case)
    env: dict = field(default_factory=dict)
    memory_mb: float | None = None      # resident-memory cap; None: CPU_MEMORY_MB on a CPU, none on a GPU
    cb_num_blocks: int | None = None    # continuous batching's cache; None: CPU_CB_CACHE on a CPU, else its own
    cb_max_batch_tokens: int | None = None

    def on_cpu(self) -> bool:
        return self.device == "cpu"

    def memory_cap_mb(self) -> float | None:
        return self.memory_mb if self.memory_mb is not None else (CPU_MEMORY_MB if self.on_cpu() else None)

    def argv(self, host: str, port: int) -> list[str]:
        a = [sys.executable, "-m", "transformers.cli.transformers", "serve", self.model,
             "--host", host, "--port", str(port), "--device", self.device, "--dtype", self.dtype,
             "--log-level", "info"]
        if self.attn_implementation:
            a += ["--attn-implementation", self.attn_implementation]
        if self.continuous_batching:
            a += ["--continuous-batching"]
            blocks = self.cb_num_blocks or (CPU_CB_CACHE["cb_num_blocks"] if self.on_cpu() else None)
            tokens = self.cb_max_batch_tokens or (CPU_CB_CACHE["cb_max_batch_tokens"] if self.on_cpu() else None)
            a += ["--cb-num-blocks", str(blocks)] if blocks else []
            a += ["--cb-max-batch-tokens", str(tokens)] if tokens else []
        if self.seed is not None:
            a += ["--default-seed", str(self.seed)]
        return a + list(self.extra_args)


def offline_hub_cache() -> Path:
    """An empty hub cache folder for the server. transformers 5.17's `serve` answers /v1/models by scanning
    the hub cache and fails with HTTP 500 where ~/.cache/huggingface/hub does not exist (seen on the lent
    H200, whose image has none); the book serves models from local folders, so an empty cache is right."""
    p = Path(tempfile.gettempdir()) / "glm5-book-hf-hub"
    p.mkdir(parents=True, exist_ok=True)
    return p


def spec(cfg: TransformersServeConfig, name: str = "transformers-serve", host: str = "127.0.0.1",
         port: int | None = None) -> ServerSpec:
    port = port or free_port(host)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_CACHE": str(offline_hub_cache()), **cfg.env}
    return ServerSpec(argv=tuple(cfg.argv(host, port)), port=port, host=host, env=env, health_path="/health",
                      name=name, memory_mb=cfg.memory_cap_mb())
