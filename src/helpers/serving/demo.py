"""The cpu-demo's stand-ins: tiny models and `transformers serve` configurations that really differ.

Each demo configuration is a real launch that ends in one outcome class of the recorded backend
matrix, for a real reason: NaN weights give the sampler's NaN error, a value the server rejects makes
it exit at start-up, truncated weights crash the load, a server that answers HTTP but has no health
endpoint never becomes healthy, an untrained model answers the arithmetic prompt wrongly.
"""
from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers.serving import tiny_model, transformers_serve as ts
from helpers.serving.server import ServerSpec, free_port


@dataclass(frozen=True)
class DemoConfig:
    name: str
    stands_for: str          # what in the investigation this imitates
    expected: str            # the outcome it is built to produce (a check on the classifier, not an input)


DEMO_CONFIGS = {
    "healthy": DemoConfig("healthy", "a working backend pair (trtllm / trtllm)", "ok"),
    "nan-weights": DemoConfig("nan-weights", "a kernel that produces NaN in decode (flashmla_kv, flashmla_sparse)", "nan"),
    "untrained": DemoConfig("untrained", "a backend that runs but computes garbage", "wrong-answer"),
    "rejected-flag": DemoConfig("rejected-flag", "a setting the engine refuses at start-up (as the recorded matrix's "
                                "flashinfer_trtllm MoE runner on SM120)", "unsupported"),
    "corrupt-weights": DemoConfig("corrupt-weights", "a server that dies while loading", "crash"),
    "never-healthy": DemoConfig("never-healthy", "a server that never reports ready", "startup-timeout"),
}


def models(root: str | Path, spec: tiny_model.TinyModelSpec | None = None) -> dict[str, Path]:
    """Build (or reuse) the demo's model folders under `root`: healthy, nan, untrained, corrupt."""
    root = Path(root)
    base = spec or tiny_model.TinyModelSpec()
    out = {
        "healthy": tiny_model.build(root / "healthy", base),
        "nan": tiny_model.build(root / "nan", _replace(base, poison="nan")),
        "untrained": tiny_model.build(root / "untrained", _replace(base, teach=False)),
    }
    corrupt = root / "corrupt"
    if not (corrupt / "model.safetensors").exists():
        shutil.copytree(out["healthy"], corrupt, dirs_exist_ok=True)
        w = corrupt / "model.safetensors"
        w.write_bytes(w.read_bytes()[: w.stat().st_size // 3])   # a download cut short
    out["corrupt"] = corrupt
    return out


def _replace(spec, **kw):
    from dataclasses import replace

    return replace(spec, **kw)


def variant(model_dir: str | Path, dest: str | Path, **config) -> Path:
    """A model folder sharing `model_dir`'s files (symlinks) with config.json keys overridden
    (e.g. experts_implementation="grouped_mm")."""
    src, dest = Path(model_dir).resolve(), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name == "config.json":
            continue
        link = dest / f.name
        if not link.exists():
            link.symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(config)
    (dest / "config.json").write_text(json.dumps(cfg, indent=1))
    return dest


def server_spec(name: str, model_dirs: dict[str, Path], device: str = "cpu") -> tuple[ServerSpec, str]:
    """(spec, model name to request) for demo configuration `name`."""
    if name not in DEMO_CONFIGS:
        raise ValueError(f"unknown demo configuration {name!r}; expected one of {', '.join(DEMO_CONFIGS)}")
    if name == "never-healthy":
        port = free_port()
        # a real HTTP server with no /health endpoint: it answers 404 forever
        argv = (sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                "--directory", str(model_dirs["healthy"]))
        return (ServerSpec(argv=argv, port=port, name=name, memory_mb=ts.CPU_MEMORY_MB if device == "cpu" else None),
                str(model_dirs["healthy"]))
    model = {"healthy": "healthy", "nan-weights": "nan", "untrained": "untrained", "rejected-flag": "healthy",
             "corrupt-weights": "corrupt"}[name]
    path = str(model_dirs[model])
    cfg = ts.TransformersServeConfig(model=path, device=device,
                                     attn_implementation="nsa_sparse" if name == "rejected-flag" else None)
    return ts.spec(cfg, name=name), path
