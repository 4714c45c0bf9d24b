"""x-transformers: its attention options, one layer each, and its wrappers."""

from __future__ import annotations

from typing import Any

import torch

from corpus_harness.entry import Built, Entry, Want, lin, mha

D, H, DH, B, N, M = 32, 4, 8, 2, 6, 5
"""Width, heads, head dim, batch, tokens, context tokens."""
QKVO = 4 * lin(D, H * DH, bias=False)
"""to_q, to_k, to_v (D → 4·8) and to_out (4·8 → D), no biases: 4·1,024 = 4,096."""


def _layers(cls_name: str, depth: int = 1, context: int | None = None, **kwargs: Any) -> Built:
    import x_transformers as xt

    options = {"heads": H, "attn_dim_head": DH, **kwargs}
    layers = getattr(xt, cls_name)(dim=D, depth=depth, **options)
    extra = {} if context is None else {"context": torch.randn(B, M, context)}
    return layers, (torch.randn(B, N, D),), extra


def _enc(**kwargs: Any) -> Built:
    return _layers("Encoder", **kwargs)


def _dec(**kwargs: Any) -> Built:
    return _layers("Decoder", **kwargs)


def _wrapper() -> Built:
    import x_transformers as xt

    model = xt.TransformerWrapper(num_tokens=100, max_seq_len=16, attn_layers=xt.Decoder(
        dim=D, depth=2, heads=H, attn_dim_head=DH))
    return model, (torch.randint(0, 100, (B, N)),), {}


def _enc_dec() -> Built:
    import x_transformers as xt

    model = xt.XTransformer(dim=D, enc_num_tokens=100, enc_depth=1, enc_heads=H,
                            enc_attn_dim_head=DH, enc_max_seq_len=16, dec_num_tokens=100,
                            dec_depth=1, dec_heads=H, dec_attn_dim_head=DH, dec_max_seq_len=16)
    src, tgt = torch.randint(0, 100, (B, M)), torch.randint(0, 100, (B, N))
    return model, (src, tgt), {}


def _continuous() -> Built:
    import x_transformers as xt

    model = xt.ContinuousTransformerWrapper(dim_in=12, dim_out=12, max_seq_len=16,
                                            attn_layers=xt.Encoder(dim=D, depth=1, heads=H,
                                                                   attn_dim_head=DH))
    return model, (torch.randn(B, N, 12),), {}


def _vit() -> Built:
    import x_transformers as xt

    model = xt.ViTransformerWrapper(image_size=16, patch_size=4, attn_layers=xt.Encoder(
        dim=D, depth=1, heads=H, attn_dim_head=DH))
    return model, (torch.randn(B, 3, 16, 16),), {}


def _x(**kwargs: Any) -> tuple[Want, ...]:
    return (mha(D, H, QKVO, **kwargs),)


ENTRIES = [
    # attn_dim_head 16 with 4 heads: inner width 64 ≠ D: to_q/k/v 32·64, to_out 64·32 = 8,192.
    Entry("xt_dim_head_wider", "x-transformers", lambda: _layers("Encoder", attn_dim_head=16),
          (mha(D, H, 4 * 32 * 64, head_dim=16),)),
    # 8 heads of 4 over 2 KV heads: q 32·32, k = v = 32·8, o 32·32 = 2,560.
    Entry("xt_gqa_small_heads", "x-transformers",
          lambda: _layers("Encoder", attn_dim_head=4, heads=8, attn_kv_heads=2),
          (mha(D, 8, 2 * 1024 + 2 * 32 * 8, kv_heads=2, head_dim=4),)),
    Entry("xt_qk_norm", "x-transformers", lambda: _enc(attn_qk_norm=True), _x()),
    Entry("xt_qk_norm_dim_scale", "x-transformers",
          lambda: _enc(attn_qk_norm=True, attn_qk_norm_dim_scale=True), _x()),
    Entry("xt_rotary", "x-transformers", lambda: _dec(rotary_pos_emb=True), _x()),
    Entry("xt_alibi", "x-transformers", lambda: _dec(alibi_pos_bias=True), _x()),
    Entry("xt_t5_rel_pos_bias", "x-transformers", lambda: _enc(rel_pos_bias=True), _x()),
    Entry("xt_dynamic_pos_bias", "x-transformers", lambda: _enc(dynamic_pos_bias=True), _x()),
    # to_v_gate (D → 4·8 with bias) gates the values: a gate, not a projection of Q/K/V/O.
    Entry("xt_gate_values", "x-transformers", lambda: _enc(attn_gate_values=True), _x()),
    Entry("xt_head_scale", "x-transformers", lambda: _enc(attn_head_scale=True), _x()),
    Entry("xt_sparse_topk", "x-transformers", lambda: _enc(attn_sparse_topk=3), _x()),
    Entry("xt_softclamp_logits", "x-transformers", lambda: _dec(attn_softclamp_logits=True),
          _x()),
    # Attention on attention: to_out is 4·8 → 2·D and a GLU: q, k, v 3·1,024 + o 32·64 = 5,120.
    Entry("xt_attn_on_attn", "x-transformers", lambda: _enc(attn_on_attn=True),
          (mha(D, H, 3 * 1024 + 32 * 64),)),
    Entry("xt_residual_attn", "x-transformers", lambda: _layers("Encoder", depth=2,
                                                                residual_attn=True),
          _x() * 2),
    Entry("xt_value_residual", "x-transformers",
          lambda: _layers("Decoder", depth=2, add_value_residual=True), _x() * 2),
    # Cross attention from a 24-wide context: to_k, to_v 24 → 32: 2·1,024 + 2·768 = 3,584.
    Entry("xt_cross_attender", "x-transformers",
          lambda: _layers("CrossAttender", context=24, cross_attn_dim_context=24),
          (mha(D, H, 2 * 1024 + 2 * 768, kind="cross"),)),
    Entry("xt_decoder_cross_attend", "x-transformers",
          lambda: _layers("Decoder", context=D, cross_attend=True),
          (mha(D, H, QKVO), mha(D, H, QKVO, kind="cross"))),
    Entry("xt_head_learned_sink", "x-transformers", lambda: _dec(attn_head_learned_sink=True),
          _x()),
    Entry("xt_data_dependent_alibi", "x-transformers",
          lambda: _dec(attn_data_dependent_alibi=True), _x()),
    Entry("xt_x_transformer_enc_dec", "x-transformers", _enc_dec,
          (*_x(), *_x(), mha(D, H, QKVO, kind="cross"))),
    Entry("xt_transformer_wrapper", "x-transformers", _wrapper, _x() * 2),
    Entry("xt_continuous_wrapper", "x-transformers", _continuous, _x()),
    Entry("xt_vit_wrapper", "x-transformers", _vit, _x()),
]
