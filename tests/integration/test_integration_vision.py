"""Vision layouts in transformers' own code: pooled queries, learned queries, LeViT's heads.

Ground truth comes from each config's arguments and the model's source
(transformers/models/NAME/modeling_NAME.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mhaudit.api import audit
from mhaudit.data import Report

transformers = pytest.importorskip("transformers")


def _audit(model_cls: Any, config: Any, *shape: int) -> Report:
    with torch.device("meta"):
        model = model_cls(config).eval()
        x = torch.randn(*shape)
    return audit(model, (x,))


def _rows(report: Report) -> list[tuple[object, ...]]:
    return [(b.layout.kind, b.layout.num_heads, b.layout.num_kv_heads, b.layout.head_dim,
             b.layout.v_head_dim, b.layout.d_model, b.layout.seq_len_q, b.layout.seq_len_kv,
             b.params.total) for b in report.blocks]


def test_hiera_pooled_queries_keep_their_heads() -> None:
    config = transformers.HieraConfig(
        embed_dim=32, depths=[1, 2, 1], num_heads=[1, 2, 4], num_query_pool=2,
        image_size=[64, 64], patch_stride=[4, 4], masked_unit_size=[4, 4])
    report = _audit(transformers.HieraModel, config, 1, 3, 64, 64)
    # Stage widths 32, 64, 128 (embed_dim_multiplier 2), heads of 32. The first block of a
    # stage reads the previous width and max-pools its queries over 4 strided groups.
    # qkv (in·3·out + 3·out) + proj (out·out + out): 32·96 + 96 + 32·32 + 32 = 4,224;
    # 32·192 + 192 + 64·64 + 64 = 10,496; 64·192 + 192 + 4,160 = 16,640;
    # 64·384 + 384 + 128·128 + 128 = 41,472.
    assert _rows(report) == [
        ("self", 1, 1, 32, 32, 32, 16, 16, 4224),
        ("self", 2, 2, 32, 32, 32, 4, 16, 10496),
        ("self", 2, 2, 32, 32, 64, 4, 4, 16640),
        ("self", 4, 4, 32, 32, 64, 1, 4, 41472),
    ]


def test_aimv2_pooling_head_reads_its_learned_query() -> None:
    config = transformers.Aimv2VisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        image_size=28, patch_size=14, use_head=True)
    report = _audit(transformers.Aimv2VisionModel, config, 1, 3, 28, 28)
    head = report.blocks[-1]
    assert head.layout.name == "head"
    # One learned query over 4 patches; k_proj, v_proj 32·32 (no bias), output_proj
    # 32·32 + 32: 3,104, and no Q projection.
    assert _rows(report)[-1] == ("cross", 4, 4, 8, 8, 32, 1, 4, 3104)
    assert head.layout.q is None and head.layout.o is not None


def test_levit_heads_are_key_dim_wide_and_subsampling_blocks_find_their_projection() -> None:
    config = transformers.LevitConfig(
        image_size=64, hidden_sizes=[32, 64, 96], num_attention_heads=[2, 4, 6],
        depths=[1, 1, 1], key_dim=[8, 8, 8], mlp_ratio=[2, 2, 2], attention_ratio=[2, 2, 2])
    report = _audit(transformers.LevitModel, config, 1, 3, 64, 64)
    # Stage 0: h = 2 heads of key_dim 8, values 2·8; qkv 32·(2·(8 + 8 + 16)) = 2,048 and
    # projection (2·16)·32 = 1,024 behind a Hardswish (no biases: the BatchNorms hold them).
    # Subsampling: 32 // 8 = 4 heads, values 4·8; kv 32·4·(8 + 32) = 5,120, q 32·32 = 1,024,
    # projection 128·64 = 8,192.
    assert _rows(report) == [
        ("self", 2, 2, 8, 16, 32, 16, 16, 3072),
        ("self", 4, 4, 8, 32, 32, 4, 16, 14336),
        ("self", 4, 4, 8, 16, 64, 4, 4, 12288),
        ("self", 8, 8, 8, 32, 64, 1, 4, 49152),
        ("self", 6, 6, 8, 16, 96, 1, 1, 27648),
    ]


def test_groupvit_assigns_tokens_to_groups_by_a_softmax_over_the_groups() -> None:
    config = transformers.GroupViTVisionConfig(
        hidden_size=64, intermediate_size=128, depths=[1, 1], num_group_tokens=[8, 0],
        num_output_groups=[4, 4], num_attention_heads=4, image_size=32, patch_size=8)
    report = _audit(transformers.GroupViTVisionModel, config, 1, 3, 32, 32)
    by_name = {b.layout.name: b for b in report.blocks}
    assign = by_name["vision_model.encoder.stages.0.downsample.assign"]
    # GroupViTAssignAttention: softmax(q·kᵀ · 64**-0.5, dim=-2) over the 4 output groups,
    # hard straight through, renormalised over the (32 / 8)² = 16 image tokens it assigns;
    # one head of hidden_size = 64; q, k, v and proj are 64·64 + 64 each.
    lay = assign.layout
    assert (lay.kind, lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.seq_len_q,
            lay.seq_len_kv) == ("cross", 1, 1, 64, 4, 16)
    assert assign.params.total == 4 * (64 * 64 + 64)
    # The pre-assignment cross attention keeps the config's 4 heads of 16.
    pre = by_name["vision_model.encoder.stages.0.downsample.pre_assign_attn.attn"].layout
    assert (pre.num_heads, pre.head_dim) == (4, 16)
