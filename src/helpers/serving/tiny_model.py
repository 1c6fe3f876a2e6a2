"""Tiny random-weight language models built at run time, so a real server can run anywhere.

`build(folder, TinyModelSpec(...))` trains a byte-level BPE tokenizer with `tokenizers` on a small
generated corpus, wraps it with a chat template, creates a small Mixture-of-Experts causal LM
(qwen2_moe architecture) with random weights through `from_config`, and saves both. Nothing is
downloaded (HF_HUB_OFFLINE is honoured: no hub name is ever used).

`poison="nan"` writes NaN into the output projection's weights: the saved model is a real NaN model,
whose logits are non-finite, as in a kernel that computes garbage. The folder is reused when it already
holds a model built from the same spec (a `tiny_spec.json` records it).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

POISONS = ("none", "nan")


@dataclass(frozen=True)
class TinyModelSpec:
    hidden_size: int = 64
    num_layers: int = 2
    num_experts: int = 4
    experts_per_token: int = 2
    moe_intermediate_size: int = 64
    num_heads: int = 4
    vocab_size: int = 512
    max_position_embeddings: int = 2048
    poison: str = "none"           # "none" | "nan"
    teach: bool = True             # train briefly on the smoke prompt so a healthy model answers it
    dtype: str = "float32"         # "float32" | "bfloat16"
    seed: int = 0
    extra_config: dict = field(default_factory=dict)   # other config keys (e.g. experts_implementation)

    def __post_init__(self):
        if self.poison not in POISONS:
            raise ValueError(f"TinyModelSpec.poison = {self.poison!r}: expected one of {POISONS}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"TinyModelSpec.dtype = {self.dtype!r}: expected 'float32' or 'bfloat16'")
        for name in ("hidden_size", "num_layers", "num_experts", "experts_per_token", "num_heads",
                     "vocab_size", "moe_intermediate_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"TinyModelSpec.{name} must be >= 1, got {getattr(self, name)}")
        if self.experts_per_token > self.num_experts:
            raise ValueError("TinyModelSpec.experts_per_token must not exceed num_experts")
        if self.hidden_size % self.num_heads:
            raise ValueError("TinyModelSpec.hidden_size must be a multiple of num_heads")

    def as_dict(self) -> dict:
        return asdict(self)


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _corpus(n: int = 400) -> list[str]:
    """A deterministic little corpus: arithmetic and a few words, enough to train a small BPE."""
    import random

    rng = random.Random(0)
    words = ("the server answers tokens per second under load while experts route each token "
             "through a small network and the cache keeps keys and values for every layer").split()
    lines = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        lines.append(f"What is {a}+{b}? {a} + {b} = {a + b}.")
        lines.append(" ".join(rng.choice(words) for _ in range(12)))
    return lines


def param_count(spec: TinyModelSpec) -> int:
    """Parameters of the model a spec describes (computed from the built config, no weights)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(_config(spec))
    return sum(p.numel() for p in model.parameters())


def _config(spec: TinyModelSpec):
    from transformers import Qwen2MoeConfig

    return Qwen2MoeConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.moe_intermediate_size * 2,
        moe_intermediate_size=spec.moe_intermediate_size,
        shared_expert_intermediate_size=spec.moe_intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        num_experts=spec.num_experts,
        num_experts_per_tok=spec.experts_per_token,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
        **spec.extra_config,
    )


def _tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


SMOKE_PROMPT = "What is 3+5?"
#: what a taught model replies: the answer as a whole word, then text (generation never stops early)
TAUGHT_REPLY = "8 is the sum of three and five."


def _teach(model, tok, steps: int = 80) -> float:
    """Overfit the smoke prompt's answer (a fraction of a second for a tiny model); returns the loss."""
    import torch

    prompt = tok.apply_chat_template([{"role": "user", "content": SMOKE_PROMPT}], tokenize=False,
                                     add_generation_prompt=True)
    p_ids = tok(prompt, add_special_tokens=False).input_ids
    a_ids = tok(TAUGHT_REPLY, add_special_tokens=False).input_ids
    x = torch.tensor([p_ids + a_ids], device=model.device)
    labels = torch.tensor([[-100] * len(p_ids) + a_ids], device=model.device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=x, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return float(loss.detach())


def build(folder: str | os.PathLike, spec: TinyModelSpec | None = None, device: str = "cpu") -> Path:
    """Build (or reuse) a tiny random-weight MoE model with its tokenizer in `folder`; return the folder.

    `device` is where the weights are initialised and taught ("cuda" is much faster for large specs)."""
    import torch
    from transformers import AutoModelForCausalLM

    spec = spec or TinyModelSpec()
    folder = Path(folder)
    marker = folder / "tiny_spec.json"
    if marker.exists() and json.loads(marker.read_text()) == spec.as_dict():
        return folder
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(spec.seed)
    tok = _tokenizer(spec.vocab_size)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(_config(spec), dtype=getattr(torch, spec.dtype))
    if spec.teach:
        _teach(model, tok)
    if spec.poison == "nan":
        with torch.no_grad():
            model.lm_head.weight.fill_(float("nan"))
    # no end-of-sequence stop: a random model would otherwise end requests at random lengths, and the
    # benchmark needs fixed output lengths (the server has no ignore_eos field)
    model.generation_config.eos_token_id = None
    model.generation_config.do_sample = True     # sampling: a NaN model fails in the sampler, as in the field
    model.generation_config.temperature = 1.0
    model.generation_config.top_k = 0
    model.generation_config.top_p = 1.0
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    marker.write_text(json.dumps(spec.as_dict(), indent=1, sort_keys=True))
    return folder
