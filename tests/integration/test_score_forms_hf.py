"""Score forms in transformers' own code: YOSO's kernel, MobileViTV2's separable and
SwiftFormer's additive attention, Florence-2's (DaViT) channel attention.

Ground truth comes from each config's arguments and the model's source
(transformers/models/NAME/modeling_NAME.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from mhaudit.api import audit
from mhaudit.data import Report

transformers = pytest.importorskip("transformers")


def _audit(model_cls: Any, config: Any, inputs: Callable[[], torch.Tensor]) -> Report:
    with torch.device("meta"):
        model = model_cls(config).eval()
        x = inputs()
    return audit(model, (x,))


def _rows(report: Report) -> list[tuple[object, ...]]:
    return [(b.layout.score_form, b.layout.num_heads, b.layout.num_kv_heads, b.layout.head_dim,
             b.layout.d_model, b.layout.seq_len_q, b.layout.seq_len_kv, b.params.total)
            for b in report.blocks]


def test_yoso_expectation_is_a_kernel_core() -> None:
    config = transformers.YosoConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64)
    report = _audit(transformers.YosoModel, config, lambda: torch.randint(0, 64, (1, 16)))
    (block,) = report.blocks
    # YosoCumulation on CPU: (1 − acos(q·kᵀ)/π)^hash_code_len times the masks, then ·V.
    # 4 heads of 32 / 4 = 8; query, key, value, output.dense 32·32 + 32: 4,224.
    assert _rows(report) == [("kernel", 4, 4, 8, 32, 16, 16, 4224)]
    # acos, divide by π, 1 −, power: 4 ops per score; the masks multiplied in are not counted.
    assert block.layout.score_map_ops == 4
    # QKᵀ 2·4·16·16·8 = 16,384; map 4·4·16·16 = 4,096; PV 16,384.
    assert (block.flops.scores, block.flops.softmax, block.flops.context) == (16384, 4096, 16384)
    assert not report.coverage.ops_without_formula  # acos has a formula


def test_mobilevitv2_separable_attention_is_one_head_over_each_width() -> None:
    config = transformers.MobileViTV2Config(image_size=64, width_multiplier=0.25,
                                            n_attn_blocks=[1, 1, 1])
    report = _audit(transformers.MobileViTV2Model, config, lambda: torch.randn(1, 3, 64, 64))
    # Widths base_attn_unit_dims [128, 192, 256] · 0.25 = 32, 48, 64; 2×2 patches of the
    # 8×8, 4×4 and 2×2 feature maps: 16, 4 and 1 patches. qkv_proj is a 1×1 conv to
    # 1 + 2d channels (the query is one channel), out_proj d → d, both with biases:
    # 32·65 + 65 + 32·32 + 32 = 3,201; 48·97 + 97 + 48·48 + 48 = 7,105; 64·129 + 129 + 4,160
    # = 12,545.
    assert _rows(report) == [
        ("separable", 1, 1, 32, 32, 16, 16, 3201),
        ("separable", 1, 1, 48, 48, 4, 4, 7105),
        ("separable", 1, 1, 64, 64, 1, 1, 12545),
    ]
    first = report.blocks[0]
    # b = 4 pixels per patch; softmax 3·4·16 = 192; pooling 2·4·16·32 + broadcast 4·16·32.
    assert (first.flops.scores, first.flops.softmax, first.flops.context) == (0, 192, 6144)


def test_swiftformer_additive_attention_scores_queries_with_a_learned_vector() -> None:
    config = transformers.SwiftFormerConfig(depths=[1, 1, 1, 1], embed_dims=[16, 16, 32, 32])
    report = _audit(transformers.SwiftFormerModel, config, lambda: torch.randn(1, 3, 64, 64))
    # w_g (d, 1) scores each query; to_query, to_key and proj d·d + d; `final` runs after
    # the residual add and is no projection of the core: 16 + 3·272 = 832, 32 + 3·1,056
    # = 3,200. Tokens 16·16, 8·8, 4·4, 2·2 (stride 4, then 2 per stage).
    assert _rows(report) == [
        ("separable", 1, 1, 16, 16, 256, 256, 832),
        ("separable", 1, 1, 16, 16, 64, 64, 832),
        ("separable", 1, 1, 32, 32, 16, 16, 3200),
        ("separable", 1, 1, 32, 32, 4, 4, 3200),
    ]
    assert all(b.layout.kind == "self" for b in report.blocks)


def test_florence2_channel_attention_heads_are_the_groups() -> None:
    config = transformers.Florence2VisionConfig(
        depths=[1, 1, 1, 1], embed_dim=[32, 64, 96, 128], num_heads=[2, 4, 6, 8],
        num_groups=[4, 8, 12, 16], window_size=4)
    backbone = transformers.models.florence2.modeling_florence2.Florence2VisionBackbone
    report = _audit(backbone, config, lambda: torch.randn(1, 3, 64, 64))
    channel = [r for r in _rows(report) if r[0] == "channel"]
    # Florence2VisionChannelAttention: groups = num_groups[stage], d_k = C / groups = 8
    # channels per group, over 16·16, 8·8, 4·4 and 2·2 tokens; qkv C·3C + 3C, proj C·C + C.
    assert channel == [
        ("channel", 4, 4, 8, 32, 256, 256, 4 * (32 * 32 + 32)),
        ("channel", 8, 8, 8, 64, 64, 64, 4 * (64 * 64 + 64)),
        ("channel", 12, 12, 8, 96, 16, 16, 4 * (96 * 96 + 96)),
        ("channel", 16, 16, 8, 128, 4, 4, 4 * (128 * 128 + 128)),
    ]
    first = next(b for b in report.blocks if b.layout.score_form == "channel")
    # QᵀK over 256 tokens 2·4·8·256·8 = 131,072; softmax 3·4·8·8 = 768; PV 131,072.
    assert (first.flops.scores, first.flops.softmax, first.flops.context) == (
        131072, 768, 131072)
    # the window attention beside it keeps its softmax: num_heads[0] = 2 heads of 16.
    assert _rows(report)[0][:4] == ("softmax", 2, 2, 16)


def test_mra_without_its_kernel_is_reported_as_unread_projections() -> None:
    config = transformers.MraConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64)
    report = _audit(transformers.MraModel, config, lambda: torch.randint(0, 64, (1, 32)))
    # mra2_attention returns torch.zeros_like(query) when mra_cuda_kernel is None (CPU):
    # no score is computed, so no block; Q, K and V are computed and never read.
    assert report.blocks == ()
    prefix = "encoder.layer.0.attention.self."
    assert report.coverage.unread_projections == tuple(
        prefix + role for role in ("key", "query", "value"))
