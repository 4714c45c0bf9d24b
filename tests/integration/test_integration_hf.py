"""Detection is exact on real third-party attention code (transformers, torch.nn).

Every model is built from a small config under ``torch.device("meta")``: no weights,
no hub files, no real compute. The expected blocks come from each config
(hidden size, heads, KV heads, head dim, bias flags), with the arithmetic written
out in a comment, never from mhaudit's own output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from mhaudit.data import Layout
from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count
from mhaudit.trace.export import trace

tf = pytest.importorskip("transformers")

BATCH = 2
SEQ = 16
"""Token positions of the (encoder) input."""
DEC_SEQ = 8
"""Token positions of the decoder input of encoder-decoder models."""
VOCAB = 100

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Expected:
    """One attention block as the config defines it."""

    name: str
    module_type: str
    kind: str
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    seq_len_q: int
    seq_len_kv: int
    q: int
    k: int
    v: int
    o: int

    @property
    def total(self) -> int:
        return self.q + self.k + self.v + self.o


def block(
    name: str,
    module_type: str,
    *,
    d: int,
    h: int,
    kv: int,
    dk: int,
    bias: tuple[bool, bool, bool, bool],
    n_q: int = SEQ,
    n_kv: int | None = None,
    kind: str = "self",
) -> Expected:
    """The parameter counts of one block from its shape.

    q = d·h·d_k (+ h·d_k bias), k = v = d·h_kv·d_k (+ h_kv·d_k bias),
    o = h·d_k·d (+ d bias). Every model here has d_v = d_k and O back to d.
    """
    qb, kb, vb, ob = bias
    return Expected(
        name=name,
        module_type=module_type,
        kind=kind,
        d_model=d,
        num_heads=h,
        num_kv_heads=kv,
        head_dim=dk,
        v_head_dim=dk,
        seq_len_q=n_q,
        seq_len_kv=n_q if n_kv is None else n_kv,
        q=d * h * dk + (h * dk if qb else 0),
        k=d * kv * dk + (kv * dk if kb else 0),
        v=d * kv * dk + (kv * dk if vb else 0),
        o=h * dk * d + (d if ob else 0),
    )


ALL_BIASES = (True, True, True, True)
NO_BIASES = (False, False, False, False)


@dataclass(frozen=True)
class Family:
    """One model family: how to build it and the blocks its config defines."""

    id: str
    build: Callable[[str], tuple[nn.Module, Inputs]]
    """Builds model and inputs for an attention implementation, on the current device."""
    expected: Callable[[Any], list[Expected]]
    """Expected blocks from the built model's config."""
    total: int
    """Hand-computed params of one block of each distinct role (enc self, dec self, dec cross),
    summed: a check on the test's own arithmetic."""
    impls: tuple[str, ...] = ("eager", "sdpa")


def _ids(n: int = SEQ) -> torch.Tensor:
    return torch.zeros(BATCH, n, dtype=torch.long)


def _hf(config_cls: Any, model_cls: Any, make_inputs: Callable[[], Inputs], **config: Any
        ) -> Callable[[str], tuple[nn.Module, Inputs]]:
    def build(impl: str) -> tuple[nn.Module, Inputs]:
        cfg = config_cls(**config)
        cfg._attn_implementation = impl
        return model_cls(cfg), make_inputs()

    return build


def _token_inputs() -> Inputs:
    return (), {"input_ids": _ids()}


def _seq2seq_inputs() -> Inputs:
    return (), {"input_ids": _ids(), "decoder_input_ids": _ids(DEC_SEQ)}


# --- GPT-2: Conv1D, fused c_attn of width 3·d, all biases -------------------------------------
# d = 64, h = 4, d_k = 16: q = k = v = 64·64 + 64 = 4,160; o = 64·64 + 64 = 4,160; total 16,640.
def _gpt2(cfg: Any) -> list[Expected]:
    d, h = cfg.n_embd, cfg.n_head
    return [block(f"h.{i}.attn", "GPT2Attention", d=d, h=h, kv=h, dk=d // h, bias=ALL_BIASES)
            for i in range(cfg.n_layer)]


# --- BERT / RoBERTa: Q in attention.self.query, O in attention.output.dense ---------------------
# d = 64, h = 4, d_k = 16: each of q, k, v, o = 64·64 + 64 = 4,160; total 16,640.
def _bert_like(module_type: str) -> Callable[[Any], list[Expected]]:
    def expected(cfg: Any) -> list[Expected]:
        d, h = cfg.hidden_size, cfg.num_attention_heads
        return [block(f"encoder.layer.{i}.attention", module_type, d=d, h=h, kv=h, dk=d // h,
                      bias=ALL_BIASES) for i in range(cfg.num_hidden_layers)]

    return expected


# --- DistilBERT: q_lin, k_lin, v_lin, out_lin in one module -------------------------------------
# d = 64, h = 4, d_k = 16: each 64·64 + 64 = 4,160; total 16,640.
def _distilbert(cfg: Any) -> list[Expected]:
    d, h = cfg.dim, cfg.n_heads
    return [block(f"transformer.layer.{i}.attention", "DistilBertSelfAttention", d=d, h=h, kv=h,
                  dk=d // h, bias=ALL_BIASES) for i in range(cfg.n_layers)]


# --- Llama (GQA), wrapped in ForCausalLM: lm_head is no attention ------------------------------
# d = 128, h = 8, h_kv = 2, d_k = 128/8 = 16, no biases:
# q = 128·8·16 = 16,384; k = v = 128·2·16 = 4,096; o = 8·16·128 = 16,384; total 40,960.
def _llama(cfg: Any) -> list[Expected]:
    d, h, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    b = cfg.attention_bias
    return [block(f"model.layers.{i}.self_attn", "LlamaAttention", d=d, h=h, kv=kv, dk=d // h,
                  bias=(b, b, b, b)) for i in range(cfg.num_hidden_layers)]


# --- Qwen2 (GQA): biases on q, k, v but not on o -----------------------------------------------
# d = 96, h = 6, h_kv = 2, d_k = 16:
# q = 96·6·16 + 96 = 9,312; k = v = 96·2·16 + 32 = 3,104; o = 6·16·96 = 9,216; total 24,736.
def _qwen2(cfg: Any) -> list[Expected]:
    d, h, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    return [block(f"layers.{i}.self_attn", "Qwen2Attention", d=d, h=h, kv=kv, dk=d // h,
                  bias=(True, True, True, False)) for i in range(cfg.num_hidden_layers)]


# --- Mistral (MQA, head_dim 48 ≠ 128/4 = 32, inner width 4·48 = 192 ≠ 128) ---------------------
# q = 128·4·48 = 24,576; k = v = 128·1·48 = 6,144; o = 4·48·128 = 24,576; total 61,440.
def _mistral(cfg: Any) -> list[Expected]:
    d, h, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    return [block(f"layers.{i}.self_attn", "MistralAttention", d=d, h=h, kv=kv, dk=cfg.head_dim,
                  bias=NO_BIASES) for i in range(cfg.num_hidden_layers)]


# --- Gemma (MQA, head_dim 32 ≠ 64/4 = 16, inner width 4·32 = 128 ≠ 64) -------------------------
# q = 64·4·32 = 8,192; k = v = 64·1·32 = 2,048; o = 4·32·64 = 8,192; total 20,480.
def _gemma(cfg: Any) -> list[Expected]:
    d, h, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    b = cfg.attention_bias
    return [block(f"layers.{i}.self_attn", "GemmaAttention", d=d, h=h, kv=kv, dk=cfg.head_dim,
                  bias=(b, b, b, b)) for i in range(cfg.num_hidden_layers)]


# --- Qwen3 (GQA, q_norm/k_norm on the heads, head_dim 32 ≠ 64/4 = 16) ---------------------------
# q = 64·4·32 = 8,192; k = v = 64·2·32 = 4,096; o = 4·32·64 = 8,192; total 24,576
# (the q_norm/k_norm weights are norms, not projection parameters).
def _qwen3(cfg: Any) -> list[Expected]:
    d, h, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    b = cfg.attention_bias
    return [block(f"layers.{i}.self_attn", "Qwen3Attention", d=d, h=h, kv=kv, dk=cfg.head_dim,
                  bias=(b, b, b, b)) for i in range(cfg.num_hidden_layers)]


# --- T5: encoder self, decoder self, decoder cross; inner h·d_kv = 4·32 = 128 ≠ d = 64 ----------
# no biases: each of q, k, v = 64·4·32 = 8,192; o = 4·32·64 = 8,192; total 32,768 per block.
def _t5(cfg: Any) -> list[Expected]:
    d, h, dk = cfg.d_model, cfg.num_heads, cfg.d_kv
    blocks = [block(f"encoder.block.{i}.layer.0.SelfAttention", "T5Attention", d=d, h=h, kv=h,
                    dk=dk, bias=NO_BIASES) for i in range(cfg.num_layers)]
    for i in range(cfg.num_decoder_layers):
        blocks.append(block(f"decoder.block.{i}.layer.0.SelfAttention", "T5Attention", d=d, h=h,
                            kv=h, dk=dk, bias=NO_BIASES, n_q=DEC_SEQ))
        blocks.append(block(f"decoder.block.{i}.layer.1.EncDecAttention", "T5Attention", d=d,
                            h=h, kv=h, dk=dk, bias=NO_BIASES, n_q=DEC_SEQ, n_kv=SEQ,
                            kind="cross"))
    return blocks


# --- BART: encoder 4 heads of 16, decoder 8 heads of 8 (self and cross), all biases ------------
# each of q, k, v, o = 64·64 + 64 = 4,160; total 16,640 per block whatever the head split.
def _bart(cfg: Any) -> list[Expected]:
    d, he, hd = cfg.d_model, cfg.encoder_attention_heads, cfg.decoder_attention_heads
    blocks = [block(f"encoder.layers.{i}.self_attn", "BartAttention", d=d, h=he, kv=he,
                    dk=d // he, bias=ALL_BIASES) for i in range(cfg.encoder_layers)]
    for i in range(cfg.decoder_layers):
        blocks.append(block(f"decoder.layers.{i}.self_attn", "BartAttention", d=d, h=hd, kv=hd,
                            dk=d // hd, bias=ALL_BIASES, n_q=DEC_SEQ))
        blocks.append(block(f"decoder.layers.{i}.encoder_attn", "BartAttention", d=d, h=hd,
                            kv=hd, dk=d // hd, bias=ALL_BIASES, n_q=DEC_SEQ, n_kv=SEQ,
                            kind="cross"))
    return blocks


# --- ViT: (32/8)² = 16 patches + [CLS] = 17 positions; qkv_bias, O always with bias -------------
# d = 64, h = 4, d_k = 16: each 64·64 + 64 = 4,160; total 16,640.
def _vit(cfg: Any) -> list[Expected]:
    d, h, b = cfg.hidden_size, cfg.num_attention_heads, cfg.qkv_bias
    n = (cfg.image_size // cfg.patch_size) ** 2 + 1
    return [block(f"layers.{i}.attention", "ViTAttention", d=d, h=h, kv=h, dk=d // h,
                  bias=(b, b, b, True), n_q=n) for i in range(cfg.num_hidden_layers)]


def _vit_inputs() -> Inputs:
    return (), {"pixel_values": torch.zeros(BATCH, 3, 32, 32)}


# --- GPT-NeoX: fused query_key_value (3·d wide, interleaved per head), rotary on 25% of d_k -----
# d = 64, h = 4, d_k = 16, attention_bias: q = k = v = 64·64 + 64 = 4,160 (a third of the
# 64·192 + 192 fused weight each); o = 64·64 + 64 = 4,160; total 16,640.
def _neox(cfg: Any) -> list[Expected]:
    d, h, b = cfg.hidden_size, cfg.num_attention_heads, cfg.attention_bias
    return [block(f"layers.{i}.attention", "GPTNeoXAttention", d=d, h=h, kv=h, dk=d // h,
                  bias=(b, b, b, b)) for i in range(cfg.num_hidden_layers)]


# --- Falcon (multi_query): fused query_key_value of width d + 2·d_k = 64 + 32 = 96, no bias ----
# d = 64, h = 4, h_kv = 1, d_k = 16: q = 64·4·16 = 4,096; k = v = 64·1·16 = 1,024;
# o = 64·64 = 4,096; total 10,240.
def _falcon(cfg: Any) -> list[Expected]:
    d, h, b = cfg.hidden_size, cfg.num_attention_heads, cfg.bias
    kv = 1 if cfg.multi_query and not cfg.new_decoder_architecture else cfg.num_kv_heads
    return [block(f"h.{i}.self_attention", "FalconAttention", d=d, h=h, kv=kv, dk=d // h,
                  bias=(b, b, b, b)) for i in range(cfg.num_hidden_layers)]


# --- OPT: separate q/k/v/out_proj with biases ----------------------------------------------------
# d = 64, h = 4, d_k = 16: each 64·64 + 64 = 4,160; total 16,640.
def _opt(cfg: Any) -> list[Expected]:
    d, h, b = cfg.hidden_size, cfg.num_attention_heads, cfg.enable_bias
    return [block(f"decoder.layers.{i}.self_attn", "OPTAttention", d=d, h=h, kv=h, dk=d // h,
                  bias=(b, b, b, b)) for i in range(cfg.num_hidden_layers)]


# --- Phi-3: fused qkv_proj (GQA) of width (8 + 2·2)·16 = 192, no biases --------------------------
# d = 128, h = 8, h_kv = 2, d_k = 16: q = 128·8·16 = 16,384; k = v = 128·2·16 = 4,096;
# o = 8·16·128 = 16,384; total 40,960.
def _phi3(cfg: Any) -> list[Expected]:
    d, h, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    return [block(f"layers.{i}.self_attn", "Phi3Attention", d=d, h=h, kv=kv, dk=d // h,
                  bias=NO_BIASES) for i in range(cfg.num_hidden_layers)]


FAMILIES = [
    Family("gpt2", _hf(tf.GPT2Config, tf.GPT2Model, _token_inputs, n_embd=64, n_head=4,
                       n_layer=2, vocab_size=VOCAB, n_positions=32, bos_token_id=0,
                       eos_token_id=0), _gpt2, 16_640),
    Family("bert", _hf(tf.BertConfig, tf.BertModel, _token_inputs, hidden_size=64,
                       num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                       vocab_size=VOCAB, max_position_embeddings=32),
           _bert_like("BertAttention"), 16_640),
    Family("roberta", _hf(tf.RobertaConfig, tf.RobertaModel, _token_inputs, hidden_size=64,
                          num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                          vocab_size=VOCAB, max_position_embeddings=40),
           _bert_like("RobertaAttention"), 16_640),
    Family("distilbert", _hf(tf.DistilBertConfig, tf.DistilBertModel, _token_inputs, dim=64,
                             n_heads=4, n_layers=2, hidden_dim=128, vocab_size=VOCAB,
                             max_position_embeddings=32), _distilbert, 16_640),
    Family("llama-gqa", _hf(tf.LlamaConfig, tf.LlamaForCausalLM, _token_inputs, hidden_size=128,
                            num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                            intermediate_size=256, vocab_size=VOCAB), _llama, 40_960),
    Family("qwen2-gqa-qkv-bias", _hf(tf.Qwen2Config, tf.Qwen2Model, _token_inputs,
                                     hidden_size=96, num_attention_heads=6,
                                     num_key_value_heads=2, num_hidden_layers=2,
                                     intermediate_size=192, vocab_size=VOCAB), _qwen2, 24_736),
    Family("mistral-mqa-headdim", _hf(tf.MistralConfig, tf.MistralModel, _token_inputs,
                                      hidden_size=128, num_attention_heads=4,
                                      num_key_value_heads=1, head_dim=48, num_hidden_layers=2,
                                      intermediate_size=256, vocab_size=VOCAB),
           _mistral, 61_440),
    Family("gemma-mqa-headdim", _hf(tf.GemmaConfig, tf.GemmaModel, _token_inputs, hidden_size=64,
                                    num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                                    num_hidden_layers=2, intermediate_size=128,
                                    vocab_size=VOCAB), _gemma, 20_480),
    Family("qwen3-qk-norm", _hf(tf.Qwen3Config, tf.Qwen3Model, _token_inputs, hidden_size=64,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                num_hidden_layers=2, intermediate_size=128, vocab_size=VOCAB),
           _qwen3, 24_576),
    # enc self + dec self + dec cross = 3 · 32,768
    Family("t5", _hf(tf.T5Config, tf.T5Model, _seq2seq_inputs, d_model=64, d_kv=32, num_heads=4,
                     d_ff=128, num_layers=2, num_decoder_layers=2, vocab_size=VOCAB),
           _t5, 3 * 32_768),
    # enc self + dec self + dec cross = 3 · 16,640
    Family("bart", _hf(tf.BartConfig, tf.BartModel, _seq2seq_inputs, d_model=64, encoder_layers=2,
                       decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=8,
                       encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB,
                       max_position_embeddings=64), _bart, 3 * 16_640),
    Family("vit", _hf(tf.ViTConfig, tf.ViTModel, _vit_inputs, hidden_size=64,
                      num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                      image_size=32, patch_size=8, num_channels=3), _vit, 16_640),
    Family("gpt-neox-partial-rotary", _hf(tf.GPTNeoXConfig, tf.GPTNeoXModel, _token_inputs,
                                          hidden_size=64, num_attention_heads=4,
                                          num_hidden_layers=2, intermediate_size=128,
                                          vocab_size=VOCAB, rotary_pct=0.25), _neox, 16_640),
    Family("falcon-multi-query", _hf(tf.FalconConfig, tf.FalconModel, _token_inputs,
                                     hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                     multi_query=True, new_decoder_architecture=False,
                                     bias=False, alibi=False, vocab_size=VOCAB),
           _falcon, 10_240),
    Family("opt", _hf(tf.OPTConfig, tf.OPTModel, _token_inputs, hidden_size=64,
                      num_attention_heads=4, num_hidden_layers=2, ffn_dim=128,
                      word_embed_proj_dim=64, vocab_size=VOCAB, max_position_embeddings=64),
           _opt, 16_640),
    Family("phi3-fused-gqa", _hf(tf.Phi3Config, tf.Phi3Model, _token_inputs, hidden_size=128,
                                 num_attention_heads=8, num_key_value_heads=2,
                                 num_hidden_layers=2, intermediate_size=256, vocab_size=VOCAB,
                                 pad_token_id=0, bos_token_id=0, eos_token_id=0),
           _phi3, 40_960),
]


# --- torch.nn ------------------------------------------------------------------------------------
# nn.Transformer(d=64, h=4): fused in_proj_weight (192·64) + in_proj_bias (192), out_proj with
# bias: each of q, k, v, o = 64·64 + 64 = 4,160; total 16,640 per block;
# blocks: 2 encoder self, 2 × (decoder self + decoder cross).
def _nn_transformer(_: str) -> tuple[nn.Module, Inputs]:
    model = nn.Transformer(d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                           dim_feedforward=128, batch_first=True)
    return model, ((torch.zeros(BATCH, SEQ, 64), torch.zeros(BATCH, DEC_SEQ, 64)), {})


def _nn_transformer_expected(model: nn.Transformer) -> list[Expected]:
    enc = model.encoder.layers[0].self_attn
    d, h = enc.embed_dim, enc.num_heads
    blocks = [block(f"encoder.layers.{i}.self_attn", "MultiheadAttention", d=d, h=h, kv=h,
                    dk=d // h, bias=ALL_BIASES) for i in range(len(model.encoder.layers))]
    for i in range(len(model.decoder.layers)):
        blocks.append(block(f"decoder.layers.{i}.self_attn", "MultiheadAttention", d=d, h=h,
                            kv=h, dk=d // h, bias=ALL_BIASES, n_q=DEC_SEQ))
        blocks.append(block(f"decoder.layers.{i}.multihead_attn", "MultiheadAttention", d=d,
                            h=h, kv=h, dk=d // h, bias=ALL_BIASES, n_q=DEC_SEQ, n_kv=SEQ,
                            kind="cross"))
    return blocks


# nn.TransformerEncoder(d=96, h=8, d_k = 96/8 = 12): each of q, k, v, o = 96·96 + 96 = 9,312;
# total 37,248 per layer.
def _nn_encoder(_: str) -> tuple[nn.Module, Inputs]:
    layer = nn.TransformerEncoderLayer(d_model=96, nhead=8, dim_feedforward=128,
                                       batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2), ((torch.zeros(BATCH, SEQ, 96),), {})


def _nn_encoder_expected(model: nn.TransformerEncoder) -> list[Expected]:
    attn = model.layers[0].self_attn
    d, h = attn.embed_dim, attn.num_heads
    return [block(f"layers.{i}.self_attn", "MultiheadAttention", d=d, h=h, kv=h, dk=d // h,
                  bias=ALL_BIASES) for i in range(len(model.layers))]


TORCH_FAMILIES = [
    Family("nn.Transformer", _nn_transformer, _nn_transformer_expected, 3 * 16_640, ("sdpa",)),
    Family("nn.TransformerEncoder", _nn_encoder, _nn_encoder_expected, 37_248, ("sdpa",)),
]


# --- the tests -----------------------------------------------------------------------------------
def _cases(families: list[Family]) -> list[Any]:
    return [pytest.param(f, impl, id=f"{f.id}-{impl}") for f in families for impl in f.impls]


def _got(layout: Layout) -> tuple[Any, ...]:
    params = [p.params if p is not None else 0 for p in (layout.q, layout.k, layout.v, layout.o)]
    return (layout.name, layout.module_type, layout.kind, layout.implementation,
            layout.d_model, layout.num_heads, layout.num_kv_heads, layout.head_dim,
            layout.v_head_dim, layout.batch_size, layout.seq_len_q, layout.seq_len_kv,
            *params, sum(params))


def _want(e: Expected, impl: str) -> tuple[Any, ...]:
    return (e.name, e.module_type, e.kind, impl, e.d_model, e.num_heads, e.num_kv_heads,
            e.head_dim, e.v_head_dim, BATCH, e.seq_len_q, e.seq_len_kv,
            e.q, e.k, e.v, e.o, e.total)


def _check(family: Family, impl: str, config_of: Callable[[nn.Module], Any]) -> None:
    with torch.device("meta"):
        model, (args, kwargs) = family.build(impl)
    expected = family.expected(config_of(model))
    # The helper's arithmetic agrees with the hand-computed totals in the comments.
    per_kind = {(e.name.split(".")[0], e.name.rsplit(".", 1)[-1]): e.total for e in expected}
    assert sum(per_kind.values()) == family.total

    layouts = detect(trace(model, args, kwargs), model)

    assert len(layouts) == len(expected), [lay.name for lay in layouts]
    assert [_got(lay) for lay in layouts] == [_want(e, impl) for e in expected]
    for lay in layouts:
        breakdown = count(lay)
        assert breakdown.total == sum(p.params for p in (lay.q, lay.k, lay.v, lay.o) if p)
        unexplained = [d.reason for d in breakdown.deviations
                       if d.reason.startswith("not explained")]
        assert not unexplained, (lay.name, unexplained)
        assert breakdown.textbook + sum(d.params for d in breakdown.deviations) == breakdown.total


@pytest.mark.parametrize(("family", "impl"), _cases(FAMILIES))
def test_transformers_family(family: Family, impl: str) -> None:
    def config_of(model: nn.Module) -> Any:
        config = model.config
        assert config._attn_implementation == impl
        return config

    _check(family, impl, config_of)


@pytest.mark.parametrize(("family", "impl"), _cases(TORCH_FAMILIES))
def test_torch_nn_family(family: Family, impl: str) -> None:
    _check(family, impl, lambda model: model)
