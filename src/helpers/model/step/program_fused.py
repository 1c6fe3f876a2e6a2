"""DecodeStep's fused program: the small ops as a serving engine fuses them (helpers.model.fused; compiled on
CUDA). DecodeStep mixes this in; its state is DecodeStep's."""
from __future__ import annotations

import torch

from .. import fp8
from .. import fused as fz
from .ops import Op, x_projection
from .shapes import Shard


class FusedProgram:
    """DecodeStep's `_program_fused` and the fused ops of each part."""

    # ---- the fused program (helpers.model.fused): what an engine fuses is one function, compiled on CUDA
    def _fz(self, fn):
        return fz.compiled(fn, self.compiled)

    def _program_fused(self) -> list[Op]:
        """The same step as _program, with the small ops fused as a serving engine fuses them: each residual
        add folded into the RMSNorm after it (the MLP's into the next layer's input norm), FP8 activation
        quantization inside the op that produces the activation, rotary embedding of all heads in one op,
        the indexer's scoring with its top-k, the router's sigmoid/top-k/normalise in one op, the routing
        weights applied in the experts' activation and the combine a gather-sum with the shared expert's
        output added. Op names of the products are _program's; see helpers.model.fused."""
        rm, S = self.rm, self.S
        sh = rm.shard
        ops: list[Op] = []

        def add(name, comp, fn, stream="main", kind="op"):
            if fn is not None:
                ops.append(Op(name, comp, fn, stream, kind))
        H = rm.head
        lo = rm.rank * sh.vocab
        emb = self._fz(fz.embed)

        def embed():
            S.h = emb(H["embed"], self.tokens, lo, sh.vocab, self.dt)
            S.res = (None, None)      # what the next norm adds to the residual stream first
        add("embedding", "norms and small ops", embed)
        if rm.tp > 1:
            add("all-reduce (embedding)", "collectives", self._all_reduce("h"))
        for li in rm.layer_of_position:
            W, C = rm.layers[li], rm.caches[li]
            self._attention_fused(add, W, C, sh)
            if li < rm.dense_held:
                self._dense_fused(add, W)
            else:
                self._moe_fused(add, W, sh)
        norm = self._fz(fz.add_rmsnorm)

        def final():
            S.h, S.xf, _ = norm(S.h, *S.res, H["final_norm"], 1e-5, False)
        add("final norm", "norms and small ops", final)
        add("lm_head", "lm_head", lambda: setattr(S, "logits", S.xf @ H["lm_head"]))
        if rm.tp > 1 and self.group is not None:
            add("all-gather (logits)", "collectives", self._all_gather_logits())
        else:
            add("logits view", "norms and small ops", lambda: setattr(S, "full_logits", S.logits))
        add("sampling", "norms and small ops", lambda: setattr(S, "next_tokens", S.full_logits.argmax(-1)))
        return ops

    @staticmethod
    def _fp8_any(*weights) -> bool:
        return any(isinstance(w, fp8.QWeight) for w in weights)

    def _set_q(self, name: str, x, q) -> None:
        setattr(self.S, name, x)
        if q is not None:
            setattr(self.S, name + "_q", q)

    def _attention_fused(self, add, W, C, sh: Shard):
        m, S, b, c = self.rm.m, self.S, self.b, self.c
        ql, kl, r, nope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim
        hl = sh.heads
        norm, lat, rot = self._fz(fz.add_rmsnorm), self._fz(fz.latent_norms), self._fz(fz.rotary_query)
        qx = self._fp8_any(W["qkv_a"], W.get("idx_wk"))
        def ln1():
            S.h, x, q = norm(S.h, *S.res, W["ln1"], 1e-5, qx)
            self._set_q("x", x, q)
        add("input norm", "norms and small ops", ln1)
        fused_w, parts = x_projection(W)
        n1 = parts[0]
        # the FP8 step's weights_proj, a product of its own: on the second stream with the overlap
        wp_alt = m.has_indexer and len(parts) < 3 and self._weights_proj_fused(add, W)

        def proj():
            y = self._mm("x", fused_w)
            S.qkv = y[:, :n1]
            if len(parts) > 1:
                S.ik = y[:, n1:n1 + parts[1]]
            if len(parts) > 2:
                S.iw = y[:, n1 + parts[1]:]
        add("fused q_a + kv_a", "attention", proj)
        qq = self._fp8_any(W["q_b"], W.get("idx_wq_b"))

        def norms():
            qc, S.entry, q = lat(S.qkv, W["q_norm"], W["kv_norm"], ql, kl, r, self.cos, self.sin, 1e-5, qq)
            self._set_q("qc", qc, q)
        add("q_a + kv_a norms", "norms and small ops", norms)
        add("q_b", "attention", lambda: setattr(S, "q", self._mm("qc", W["q_b"]).view(b, hl, m.qk_head_dim)))

        def absorb_k():
            S.qlat = torch.bmm(S.q[..., :nope].transpose(0, 1), W["w_kc"]).transpose(0, 1)
        add("absorbed k (bmm)", "attention", absorb_k)

        add("rotary embedding", "attention",
            lambda: setattr(S, "qfull", rot(S.q, S.qlat, self.cos, self.sin, nope)))
        add("kv-cache store", "attention", lambda: C["kv"][:b, c - 1].copy_(S.entry))
        if m.has_indexer:
            self._indexer_fused(add, W, C, wp_alt)
        if self.attention == "sparse" and c > m.index_topk:
            att = self._fz(fz.attend_sparse)
            fn = lambda: setattr(S, "olat", att(S.qfull, C["kv"][:b], S.topi, self.scale, kl))  # noqa: E731
        else:
            att = self._fz(fz.attend)
            fn = lambda: setattr(S, "olat", att(S.qfull, C["kv"][:b, :c], self.scale, kl))  # noqa: E731
        add("attention", "attention", fn)
        av = self._fz(fz.absorb_v)
        oq = self._fp8_any(W["o_proj"])

        def absorb_v():
            o, q = av(S.olat, W["w_vc"], oq)
            self._set_q("o", o, q)
        add("absorbed v (bmm)", "attention", absorb_v)
        add("o_proj", "attention", lambda: setattr(S, "a", self._mm("o", W["o_proj"])))
        if self.rm.tp > 1:
            add("all-reduce (attention)", "collectives", self._all_reduce("a"))
        mx = self._fp8_any(W.get("d_w13"), W.get("w13"), W.get("s_w13"))

        def res_norm():
            S.h, x2, q = norm(S.h, S.a, None, W["ln2"], 1e-5, mx)
            self._set_q("x2", x2, q)
        add("residual + norm", "norms and small ops", res_norm)

    def _indexer_fused(self, add, W, C, wp_alt: bool):
        m, S, b, c = self.rm.m, self.S, self.b, self.c
        nh, r = m.index_n_heads, m.qk_rope_head_dim
        qk, top = self._fz(fz.indexer_qk), self._fz(fz.indexer_topk)
        add("indexer wq_b", "indexer", lambda: setattr(S, "iq", self._mm("qc", W["idx_wq_b"])))
        if wp_alt:                           # weights_proj ran on the second stream (_weights_proj_fused)
            self._join(add, "indexer weights", "indexer")

        def rope():
            S.iq3, S.ik2 = qk(S.iq, S.ik, W["idx_k_norm_w"], W["idx_k_norm_b"], self.cos, self.sin, r, nh)
        add("indexer k_norm + rope", "indexer", rope)
        add("indexer key store", "indexer", lambda: C["ik"][:b, c - 1].copy_(S.ik2))
        if c > m.index_topk:
            add("index scores + top-k", "indexer",
                lambda: setattr(S, "topi", top(S.iq3, C["ik"][:b, :c], S.iw, m.index_topk)))
        else:
            # every cached position is in the top-k: the scores are computed, the selection is all of them
            # (SGLang's top-k transform takes the same short path below index_topk tokens)
            sc = self._fz(fz.indexer_scores)
            S.topi = torch.arange(c, device=self.rm.device).expand(b, c)
            add("index scores + top-k", "indexer", lambda: setattr(S, "isc", sc(S.iq3, C["ik"][:b, :c], S.iw)))

    def _weights_proj_fused(self, add, W) -> bool:
        """The indexer's weights_proj where it is a product of its own (the FP8 step: its weight stays bf16,
        as DeepSeek's FP8 checkpoints hold it, so it is not part of the fused q_a + kv_a product). It needs
        only the input norm's rows; with the overlap (up to DUAL_STREAM_TOKEN_THRESHOLD tokens on CUDA) it
        runs on the second stream beside the attention's products, joined before the index scores, as
        SGLang's indexer runs its key and weights products on its alternate stream at decode under CUDA
        graphs (python/sglang/srt/layers/attention/nsa/nsa_indexer.py, Indexer._get_q_k_bf16). Returns
        whether it went to the second stream (the index scores then join it back)."""
        S, wp = self.S, W["idx_weights_proj"]
        if self.overlap:
            self._fork(add, "indexer weights", "indexer")
        add("indexer weights_proj", "indexer", lambda: setattr(S, "iw", self._mm_bf16("x", wp)),
            "alt" if self.overlap else "main")
        return self.overlap

    def _dense_fused(self, add, W):
        S, i = self.S, self.rm.shard.dense_inter
        act = self._fz(fz.gated_act)
        q = self._fp8_any(W["d_w2"])
        add("dense gate_up", "shared/dense MLP",
            lambda: setattr(S, "d13", self._mm("x2", W["d_w13"], split=True)))

        def activation():
            a, aq = act(S.d13, i, None, q)
            self._set_q("da", a, aq)
        add("dense activation", "shared/dense MLP", activation)

        def down():
            S.mlp = self._mm("da", W["d_w2"])
            S.res = (S.mlp, None)
        add("dense down", "shared/dense MLP", down)
        if self.rm.tp > 1:
            add("all-reduce (MLP)", "collectives", self._all_reduce("mlp"))

    def _moe_fused(self, add, W, sh: Shard):
        m, S = self.rm.m, self.S
        k, E, i = m.top_k, m.n_routed, sh.moe_inter
        scaling = float(m.routed_scaling)
        shared = "s_w13" in W
        routed = "alt" if (self.overlap and shared) else "main"
        fp8_experts = isinstance(W["w13"], fp8.QWeight)
        j = self._moe_positions
        self._moe_positions += 1
        act, rtf, comb = self._fz(fz.gated_act), self._fz(fz.route_forced), self._fz(fz.combine)
        rt = fz.route_triton if (self.compiled and fz.route_triton_ok(self.rm.device, E, k)) else self._fz(fz.route)
        perm = self._fz(fz.permute_fp8 if fp8_experts else fz.permute)
        if routed == "alt":
            self._fork(add, "routed experts", "moe")
        if shared:
            si = sh.shared_inter
            sq = self._fp8_any(W["s_w2"])
            add("shared gate_up", "shared/dense MLP",
                lambda: setattr(S, "s13", self._mm("x2", W["s_w13"], split=True)))

            def s_act():
                a, aq = act(S.s13, si, None, sq)
                self._set_q("sa", a, aq)
            add("shared activation", "shared/dense MLP", s_act)
            add("shared down", "shared/dense MLP", lambda: setattr(S, "sd", self._mm("sa", W["s_w2"])))
        add("router", "moe", lambda: setattr(S, "rl", S.x2 @ W["router"]), routed)

        def select():
            if self.forced_routing is not None:
                S.ids = self.forced_routing[j].to(S.rl.device)
                S.rw = rtf(S.rl, S.ids, scaling, self.dt)
            else:
                S.rw, S.ids = rt(S.rl, W["router_bias"], k, scaling, self.dt)
            if self.record_routing:
                self.routing.append(S.ids)
        add("top-k select", "moe", select, routed)

        def permute():
            if fp8_experts:
                xq, xs, S.pw, S.inv, S.offs = perm(S.ids, S.rw, *S.x2_q, E)
                S.xs_q = (xq, xs)
            else:
                S.xs, S.pw, S.inv, S.offs, _ = perm(S.ids, S.rw, S.x2, E)
        add("permute", "moe", permute, routed)
        add("grouped gemm 1", "moe", lambda: setattr(S, "g1", self._gmm("xs", W["w13"], split=True)),
            routed)

        def e_act():
            a, aq = act(S.g1, i, S.pw, fp8_experts)
            self._set_q("ga", a, aq)
        add("expert activation", "moe", e_act, routed)
        add("grouped gemm 2", "moe", lambda: setattr(S, "g2", self._gmm("ga", W["w2"])), routed)
        # the routed rows come back from the second stream before the combine, which sums each token's expert
        # rows and adds the shared expert's output in one op (no separate add)
        if routed == "alt":
            self._join(add, "routed experts", "moe")
        tp = self.rm.tp > 1

        def combine():
            S.mlp = S.moe = comb(S.g2, S.inv, k, self.dt, S.sd if shared else None)
            S.res = (S.mlp, None)
        add("combine", "moe", combine)
        if tp:
            add("all-reduce (MLP)", "collectives", self._all_reduce("mlp"))
