"""Command builder for `transformers serve` (transformers[serving]): the CPU-capable stand-in server.

It speaks the OpenAI API (/v1/completions, /v1/chat/completions, /v1/models) and answers /health.
Quirks the client copes with: the request's model name must equal the served path; streams end without
`data: [DONE]` (usage arrives in the last chunk); the chat endpoint echoes the prompt in its first
chunk, so benchmarks use /v1/completions; unknown request fields are refused (HTTP 422).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from helpers.serving.server import ServerSpec, free_port

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

    def argv(self, host: str, port: int) -> list[str]:
        a = [sys.executable, "-m", "transformers.cli.transformers", "serve", self.model,
             "--host", host, "--port", str(port), "--device", self.device, "--dtype", self.dtype,
             "--log-level", "info"]
        if self.attn_implementation:
            a += ["--attn-implementation", self.attn_implementation]
        a += ["--continuous-batching"] if self.continuous_batching else []
        if self.seed is not None:
            a += ["--default-seed", str(self.seed)]
        return a + list(self.extra_args)


def spec(cfg: TransformersServeConfig, name: str = "transformers-serve", host: str = "127.0.0.1",
         port: int | None = None) -> ServerSpec:
    port = port or free_port(host)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false", **cfg.env}
    return ServerSpec(argv=tuple(cfg.argv(host, port)), port=port, host=host, env=env, health_path="/health",
                      name=name)
