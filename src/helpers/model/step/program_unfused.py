"""DecodeStep's unfused program: one torch operator chain per op, the reference the fused path is checked
against (DecodeStep mixes this in; its state is DecodeStep's)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import fp8
from .ops import Op, rmsnorm, rope
from .shapes import Shard


class UnfusedProgram:
    """DecodeStep's `_program` (which hands a fused step to FusedProgram) and the unfused ops of each part."""

    def _program(self) -> list[Op]:
        if self.fusion == "fused":
            return self._program_fused()
        rm, S = self.rm, self.S
        sh = rm.shard
        ops: list[Op] = []

        def add(name, comp, fn, stream="main", kind="op"):
            if fn is not None:
                ops.append(Op(name, comp, fn, stream, kind))
        H = rm.head
        lo = rm.rank * sh.vocab

        def embed():
            ids = self.tokens - lo
            inside = (ids >= 0) & (ids < sh.vocab)
            S.h = H["embed"][ids.clamp(0, sh.vocab - 1)] * inside[:, None].to(self.dt)
        add("embedding", "norms and small ops", embed)
        if rm.tp > 1:
            add("all-reduce (embedding)", "collectives", self._all_reduce("h"))
        for p, li in enumerate(rm.layer_of_position):
            W, C = rm.layers[li], rm.caches[li]
            self._attention_ops(add, W, C, sh)
            if li < rm.dense_held:
                self._dense_ops(add, W)
            else:
                self._moe_ops(add, W, sh)
            if rm.tp > 1:
                add("all-reduce (MLP)", "collectives", self._all_reduce("mlp"))
            add("residual (MLP)", "norms and small ops", lambda: setattr(S, "h", S.h + S.mlp))

        def final():
            S.xf = rmsnorm(S.h, H["final_norm"])
        add("final norm", "norms and small ops", final)
        add("lm_head", "lm_head", lambda: setattr(S, "logits", S.xf @ H["lm_head"]))
        if rm.tp > 1 and self.group is not None:
            add("all-gather (logits)", "collectives", self._all_gather_logits())
        else:
            add("logits view", "norms and small ops", lambda: setattr(S, "full_logits", S.logits))
        add("sampling", "norms and small ops", lambda: setattr(S, "next_tokens", S.full_logits.argmax(-1)))
        return ops

    def _attention_ops(self, add, W, C, sh: Shard):
        m, S, b, c = self.rm.m, self.S, self.b, self.c
        ql, kl, r, nope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim
        hl = sh.heads

        def ln1():
            S.x = rmsnorm(S.h, W["ln1"])
        add("input norm", "norms and small ops", ln1)
        self._quantize(add, "x", "attention", W["qkv_a"], W.get("idx_wk"))
        add("fused q_a + kv_a", "attention", lambda: setattr(S, "qkv", self._mm("x", W["qkv_a"])))

        def norms():
            S.qc = rmsnorm(S.qkv[:, :ql], W["q_norm"])
            S.kvc = rmsnorm(S.qkv[:, ql:ql + kl], W["kv_norm"])
        add("q_a + kv_a norms", "norms and small ops", norms)
        self._quantize(add, "qc", "attention", W["q_b"], W.get("idx_wq_b"))
        add("q_b", "attention", lambda: setattr(S, "q", self._mm("qc", W["q_b"]).view(b, hl, m.qk_head_dim)))

        def absorb_k():
            S.qlat = torch.bmm(S.q[..., :nope].transpose(0, 1), W["w_kc"]).transpose(0, 1)
        add("absorbed k (bmm)", "attention", absorb_k)

        def rot():
            S.qpe = rope(S.q[..., nope:], self.cos, self.sin)
            S.kpe = rope(S.qkv[:, ql + kl:], self.cos, self.sin)
        add("rotary embedding", "attention", rot)

        def store():
            C["kv"][:b, c - 1].copy_(torch.cat([S.kvc, S.kpe], -1))
        add("kv-cache store", "attention", store)
        if m.has_indexer:
            self._indexer_ops(add, W, C)

        def attend():
            q = torch.cat([S.qlat, S.qpe], -1)                       # [b, heads, kv_lora + rope]
            if self.attention == "sparse" and c > m.index_topk:
                k = C["kv"][:b].gather(1, S.topi[..., None].expand(-1, -1, kl + r))
            else:
                k = C["kv"][:b, :c]
            s = torch.bmm(q, k.transpose(1, 2)) * self.scale
            p_ = torch.softmax(s.float(), -1).to(self.dt)
            S.olat = torch.bmm(p_, k[..., :kl])
        add("attention", "attention", attend)

        def absorb_v():
            S.o = torch.bmm(S.olat.transpose(0, 1), W["w_vc"]).transpose(0, 1).reshape(b, hl * m.v_head_dim)
        add("absorbed v (bmm)", "attention", absorb_v)
        self._quantize(add, "o", "attention", W["o_proj"])
        add("o_proj", "attention", lambda: setattr(S, "a", self._mm("o", W["o_proj"])))
        if self.rm.tp > 1:
            add("all-reduce (attention)", "collectives", self._all_reduce("a"))

        def res_norm():
            S.h = S.h + S.a
            S.x2 = rmsnorm(S.h, W["ln2"])
        add("residual + norm", "norms and small ops", res_norm)

    def _indexer_ops(self, add, W, C):
        m, S, b, c = self.rm.m, self.S, self.b, self.c
        nh, d, r = m.index_n_heads, m.index_head_dim, m.qk_rope_head_dim

        def wq():
            S.iq = self._mm("qc", W["idx_wq_b"]).view(b, nh, d)
        add("indexer wq_b", "indexer", wq)

        def wk():
            S.ik = F.layer_norm(self._mm("x", W["idx_wk"]), (d,), W["idx_k_norm_w"], W["idx_k_norm_b"])
        add("indexer wk + k_norm", "indexer", wk)

        def rot():
            S.iq = torch.cat([rope(S.iq[..., :r], self.cos, self.sin), S.iq[..., r:]], -1)
            S.ik = torch.cat([rope(S.ik[..., :r], self.cos, self.sin), S.ik[..., r:]], -1)
        add("indexer rope", "indexer", rot)
        add("indexer weights_proj", "indexer", lambda: setattr(S, "iw", S.x @ W["idx_weights_proj"]))
        add("indexer key store", "indexer", lambda: C["ik"][:b, c - 1].copy_(S.ik))

        def scores():
            sc = torch.relu(torch.bmm(S.iq, C["ik"][:b, :c].transpose(1, 2)))      # [b, heads, c]
            S.isc = (sc * S.iw[..., None]).sum(1)
        add("index scores", "indexer", scores)
        add("top-k", "indexer", lambda: setattr(S, "topi", S.isc.topk(min(m.index_topk, c), -1).indices))

    def _dense_ops(self, add, W):
        S, i = self.S, self.rm.shard.dense_inter
        self._quantize(add, "x2", "shared/dense MLP", W["d_w13"])
        add("dense gate_up", "shared/dense MLP", lambda: setattr(S, "d13", self._mm("x2", W["d_w13"])))
        add("dense activation", "shared/dense MLP",
            lambda: setattr(S, "da", F.silu(S.d13[:, :i]) * S.d13[:, i:]))
        self._quantize(add, "da", "shared/dense MLP", W["d_w2"])
        add("dense down", "shared/dense MLP", lambda: setattr(S, "mlp", self._mm("da", W["d_w2"])))

    def _moe_ops(self, add, W, sh: Shard):
        """As SGLang's DeepseekV2MoE: the shared expert, then the router, top-k and routed experts; with
        the overlap, the latter on the second stream (forked after the MLP input is ready, joined before
        the two outputs are added)."""
        m, S, b = self.rm.m, self.S, self.b
        k, E, i = m.top_k, m.n_routed, sh.moe_inter
        scaling = float(m.routed_scaling)
        shared = "s_w13" in W
        routed = "alt" if (self.overlap and shared) else "main"
        fp8_experts = isinstance(W["w13"], fp8.QWeight)
        j = self._moe_positions
        self._moe_positions += 1
        self._quantize(add, "x2", "moe", W["w13"], W.get("s_w13"))
        if routed == "alt":
            self._fork(add, "routed experts", "moe")
        if shared:
            si = sh.shared_inter
            add("shared gate_up", "shared/dense MLP", lambda: setattr(S, "s13", self._mm("x2", W["s_w13"])))
            add("shared activation", "shared/dense MLP",
                lambda: setattr(S, "sa", F.silu(S.s13[:, :si]) * S.s13[:, si:]))
            self._quantize(add, "sa", "shared/dense MLP", W["s_w2"])
            add("shared down", "shared/dense MLP", lambda: setattr(S, "sd", self._mm("sa", W["s_w2"])))

        add("router", "moe", lambda: setattr(S, "rl", (S.x2 @ W["router"]).float()), routed)

        def select():
            s = torch.sigmoid(S.rl)
            if self.forced_routing is not None:
                ids = self.forced_routing[j].to(s.device)
            else:
                ids = torch.topk(s + W["router_bias"].float(), k, -1).indices
            w = s.gather(1, ids)
            S.rw = (w / w.sum(-1, keepdim=True) * scaling).to(self.dt)
            S.ids = ids
            if self.record_routing:
                self.routing.append(ids)
        add("top-k select", "moe", select, routed)

        def permute():
            flat = S.ids.reshape(-1)
            S.order = torch.argsort(flat, stable=True)
            S.tok = S.order // k
            if fp8_experts:
                S.xs_q = fp8.gather_rows(*S.x2_q, S.tok)
            else:
                S.xs = S.x2[S.tok]
            counts = torch.zeros(E, dtype=torch.int32, device=flat.device).scatter_add_(
                0, flat, torch.ones_like(flat, dtype=torch.int32))
            S.offs = torch.cumsum(counts, 0, dtype=torch.int32)
        add("permute", "moe", permute, routed)
        add("grouped gemm 1", "moe", lambda: setattr(S, "g1", self._gmm("xs", W["w13"])), routed)
        add("expert activation", "moe", lambda: setattr(S, "ga", F.silu(S.g1[:, :i]) * S.g1[:, i:]), routed)
        self._quantize(add, "ga", "moe", W["w2"], stream=routed)
        add("grouped gemm 2", "moe", lambda: setattr(S, "g2", self._gmm("ga", W["w2"])), routed)

        def combine():
            wts = S.rw.reshape(-1)[S.order][:, None]
            S.moe = torch.zeros(b, m.hidden, dtype=self.dt, device=S.g2.device).index_add_(
                0, S.tok, S.g2.to(self.dt) * wts)
        add("combine", "moe", combine, routed)
        if routed == "alt":
            self._join(add, "routed experts", "moe")
        if shared:
            add("add shared", "norms and small ops", lambda: setattr(S, "mlp", S.moe + S.sd))
        else:
            add("moe out", "norms and small ops", lambda: setattr(S, "mlp", S.moe))
