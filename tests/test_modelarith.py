"""Model arithmetic against hand-computed values on a tiny synthetic configuration, against the
transformers implementation, and GLM-5 against its published totals."""
import math

import pytest

from helpers.model import arith as ma

# A configuration small enough to count by hand (see the comments in the tests).
TINY = {
    "name": "tiny", "source": "hf-config",
    "architecture": {
        "hidden_size": 8, "num_hidden_layers": 2, "first_k_dense_replace": 1, "vocab_size": 10,
        "tie_word_embeddings": False,
        "attention": {"kind": "mla", "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 4,
                      "kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2},
        "indexer": {"index_topk": 3, "index_n_heads": 2, "index_head_dim": 4},
        "moe": {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
                "moe_intermediate_size": 2},
        "dense": {"intermediate_size": 6},
    },
    "published": {"source": "model-cards", "total_parameters": 1160, "active_parameters": 984},
    "precision": {"routed_experts": "nvfp4", "shared_experts": "bf16", "attention": "bf16", "kv_cache": "bf16"},
}


@pytest.fixture
def tiny():
    return ma.ModelConfig.from_dict("tiny", TINY)


def test_tiny_parameter_count_by_hand(tiny):
    # attention per layer: q_a 32 + q_a_norm 4 + q_b 32 + kv_a 48 + kv_a_norm 4 + kv_b 32 + o 32
    #   + indexer wq_b 32 + wk 32 + k_norm 8 + weights_proj 16 = 272; layer norms 16
    # dense MLP 3*8*6 = 144; MoE: router 32, shared 48, routed 4*48 = 192; embeddings 80, lm head 80,
    # final norm 8 -> 2*272 + 2*16 + 144 + 32 + 48 + 192 + 80 + 80 + 8 = 1160
    assert ma.total_parameters(tiny) == 1160
    # active: no embedding table (-80), routed at 2 of 4 (-192 + 96)
    assert ma.active_parameters(tiny) == 984


@pytest.mark.integration
def test_tiny_matches_transformers(tiny):
    torch = pytest.importorskip("torch")
    tr = pytest.importorskip("transformers")
    a = TINY["architecture"]
    cfg = tr.GlmMoeDsaConfig(
        vocab_size=10, hidden_size=8, intermediate_size=6, moe_intermediate_size=2, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, n_shared_experts=1, n_routed_experts=4,
        kv_lora_rank=4, q_lora_rank=4, qk_rope_head_dim=2, v_head_dim=2, qk_nope_head_dim=2,
        num_experts_per_tok=2, index_topk=3, index_head_dim=4, index_n_heads=2,
        mlp_layer_types=["dense", "sparse"])
    with torch.device("meta"):
        model = tr.GlmMoeDsaForCausalLM(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert a["hidden_size"] == 8
    assert ma.total_parameters(tiny) == n


def test_tiny_bytes_and_kv(tiny):
    t = ma.parameter_table(tiny).set_index("group")
    # routed: 192 values x (0.5 + 1/16) + 12 tensors x 8 bytes of tensor scales
    assert t.loc["routed experts", "bytes"] == pytest.approx(192 * 0.5625 + 12 * 8)
    kv = ma.kv_bytes_per_token(tiny)
    # latent 2 layers x (4 + 2) x 2 B = 24; indexer key 2 x 4 x 2 B = 16
    assert list(kv["bytes"]) == [24, 16]
    # batch 2, context 5: per sequence min(5, topk 3) x 24 + 5 x 16 = 152
    assert ma.kv_read_bytes(tiny, 2, 5) == 304


def test_tiny_messages_collectives_experts(tiny):
    assert ma.allreduce_bytes(tiny, 3) == 3 * 8 * 2
    assert ma.collectives_per_step(tiny) == 2 * 2 + 2
    assert ma.expected_distinct_experts(tiny, 1) == pytest.approx(2)
    assert ma.expected_distinct_experts(tiny, 2) == pytest.approx(4 * (1 - 0.5 ** 2))
    v = ma.ep_vs_tp_volume(tiny, 2, 2).set_index("layout")["bytes_sent_per_gpu"]
    # TP2 ring: 2(n-1)/n x (2 tokens x 8 x 2 B) = 32
    assert v["TP2 all-reduce"] == pytest.approx(32)
    # EP2: P(no expert on a GPU) = C(2,2)/C(4,2) = 1/6 -> 5/3 GPUs, 5/6 remote; 1 token a GPU x 8 x 4 B
    assert v["EP2 all-to-all"] == pytest.approx(5 / 6 * 8 * 4)


def test_tiny_weights_per_gpu(tiny):
    t = ma.parameter_table(tiny)
    rep = t.loc[t.tp_placement == "replicated", "bytes"].sum()
    sh = t.loc[t.tp_placement == "sharded", "bytes"].sum()
    assert ma.weights_per_gpu(tiny, 2) == pytest.approx(rep + sh / 2)
    assert ma.weights_per_gpu(tiny, 1) == pytest.approx(rep + sh)


def test_memory_fit_flags(tiny):
    total = ma.weight_bytes(tiny)
    fit = ma.memory_fit(tiny, [{"system": "small", "count": 2, "memory_bytes": total * 0.75}])
    f = fit.set_index("layout")["fits"]
    assert not f["replicated (whole model per GPU)"]
    assert f["TP2"]


def test_glm5_against_published():
    m = ma.load_model("glm5")
    chk = ma.published_check(m).set_index("quantity")["rel_diff"]
    assert abs(chk["total parameters"]) < 0.03
    assert abs(chk["active parameters"]) < 0.05
    assert m.hidden == 6144 and ma.collectives_per_step(m) == 2 * m.layers + 2
    # TP8 weights per GPU land in the tens of GB, replication does not fit 96 GB
    assert 40e9 < ma.weights_per_gpu(m, 8) < 70e9
    assert ma.weights_per_gpu(m, 1) > 96 * ma.GiB


def test_bad_inputs(tiny):
    with pytest.raises(ma.ModelError, match="known"):
        ma.load_model("no-such-model")
    with pytest.raises(ma.ModelError, match="batch"):
        ma.step_weight_bytes(tiny, 0)
    with pytest.raises(ma.ModelError, match="heads"):
        ma.weights_per_gpu(ma.load_model("glm5"), 3)
    with pytest.raises(ma.ModelError, match="heads"):
        ma.weights_per_gpu(tiny, 4)
    with pytest.raises(ma.ModelError, match="tokens"):
        ma.allreduce_bytes(tiny, 0)
    bad = {**TINY, "architecture": {**TINY["architecture"], "hidden_size": 0}}
    with pytest.raises(ma.ModelError, match="hidden_size"):
        ma.ModelConfig.from_dict("bad", bad)
    badp = {**TINY, "precision": {"routed_experts": "int3"}}
    with pytest.raises(ma.ModelError, match="int3"):
        ma.ModelConfig.from_dict("bad", badp)
