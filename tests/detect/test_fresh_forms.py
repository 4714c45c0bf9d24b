"""Attention forms a first reading missed, each read as a block with the figures its
constructor fixes (hand arithmetic) and FLOPs that torch's FlopCounterMode confirms."""

from __future__ import annotations

import torch
from fixtures.zoo_forms_fresh import (
    ChannelsFirstBlock,
    DecayRetention,
    EdgeScatterAttention,
    LandmarkMaps,
    NanToNumScores,
    RowColumnMaps,
    SharedProjectionRelu2,
    SoftmaxFeatureMaps,
)
from fixtures.zoo_negative import GroupNormConvMix, ScatterSoftmaxPool
from fixtures.zoo_patterns import DifferentialOneSoftmax
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mhaudit.api import audit
from mhaudit.data import AttentionBlock


def _counted(model: nn.Module, *inputs: torch.Tensor) -> int:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(*inputs)
    return int(counter.get_total_flops())


def _one_block(model: nn.Module, *inputs: torch.Tensor) -> AttentionBlock:
    report = audit(model, inputs)
    assert report.coverage.unread_cores == ()
    (block,) = report.blocks
    return block


def test_a_context_with_v_on_the_left_of_the_transposed_probabilities() -> None:
    model, x = ChannelsFirstBlock(16).eval(), torch.randn(1, 16, 2, 3)
    block = _one_block(model, x)
    lay = block.layout
    # one head over c = 16 channels, n = 2·3 = 6 pixels
    assert (lay.kind, lay.num_heads, lay.head_dim, lay.v_head_dim) == ("self", 1, 16, 16)
    assert (lay.seq_len_q, lay.seq_len_kv) == (6, 6)
    # each 1×1 conv: 16·16 weights + 16 biases = 272
    assert (block.params.q, block.params.k, block.params.v, block.params.o) == (272,) * 4
    f = block.flops
    # scores and context: 2·n·n·c = 2·6·6·16 = 1,152 each; projections 4·2·6·16·16 = 12,288
    assert (f.scores, f.context) == (1152, 1152)
    assert f.q_proj + f.k_proj + f.v_proj + f.o_proj == 12288
    assert f.q_proj + f.k_proj + f.v_proj + f.o_proj + f.scores + f.context == _counted(model, x)


def test_nan_to_num_on_the_scores_is_walked_through_like_any_elementwise_op() -> None:
    model, x = NanToNumScores(32, 4).eval(), torch.randn(2, 5, 32)
    block = _one_block(model, x)
    lay = block.layout
    assert (lay.num_heads, lay.head_dim, lay.seq_len_q, lay.seq_len_kv) == (4, 8, 5, 5)
    # the fused qkv: 32·96 + 96 = 3,168 split in three; O: 32·32 + 32 = 1,056
    assert (block.params.q, block.params.k, block.params.v, block.params.o) == (1056,) * 4
    f = block.flops
    # scores and context: 2·b·h·n·n·d_k = 2·2·4·5·5·8 = 3,200 each
    assert (f.scores, f.context) == (3200, 3200)
    assert f.q_proj + f.k_proj + f.v_proj + f.o_proj + f.scores + f.context == _counted(model, x)


def test_softmax_feature_maps_over_a_state_are_linear_attention_per_head_slice() -> None:
    model, x = SoftmaxFeatureMaps(32, 4).eval(), torch.randn(2, 32, 6)
    block = _one_block(model, x)
    lay = block.layout
    # 4 heads of 32/4 = 8 channels each, sliced one by one from each 1×1 conv
    assert (lay.score_form, lay.num_heads, lay.num_kv_heads, lay.head_dim) == ("linear", 4, 4, 8)
    assert (lay.v_head_dim, lay.seq_len_q, lay.seq_len_kv) == (8, 6, 6)
    # each conv: 32·32 + 32 = 1,056 (Q, K, V read all of theirs, 8 channels per head)
    assert (block.params.q, block.params.k, block.params.v, block.params.o) == (1056,) * 4
    f = block.flops
    # the state K_iV_iᵀ and its product with Q_i: 2·b·h·n·d_k·d_v = 2·2·4·6·8·8 = 6,144 each
    assert f.scores + f.context == 2 * 6144
    assert f.q_proj + f.k_proj + f.v_proj + f.o_proj + f.scores + f.context == _counted(model, x)


def test_relu2_scores_of_q_and_k_scaled_from_one_shared_projection() -> None:
    model, x = SharedProjectionRelu2(32, 8, 48).eval(), torch.randn(2, 6, 32)
    block = _one_block(model, x)
    lay = block.layout
    # one head: d_k = s = 8, d_v = e = 48, over n = 6 tokens
    assert (lay.score_form, lay.num_heads, lay.head_dim, lay.v_head_dim) == ("kernel", 1, 8, 48)
    assert (lay.d_model, lay.seq_len_q, lay.seq_len_kv) == (32, 6, 6)
    # V: 32·48 + 48 = 1,584; O: 48·32 + 32 = 1,568. Q and K share z (32·8 + 8 = 264),
    # counted once, plus the offsets added after it (2·8 = 16, a bias of each); the per-dim
    # scales are an elementwise product, no projection weight: 280
    assert (block.params.v, block.params.o) == (1584, 1568)
    assert block.params.q + block.params.k == 280
    # the broadcast einsum sums nothing: torch counts 0 for it, and so does the total
    report = audit(model, (x,))
    families = report.totals.flops_by_family
    assert families["matmul"] + families["conv"] == _counted(model, x)


def test_scores_times_a_causal_decay_matrix_are_a_causal_kernel_block() -> None:
    model, x = DecayRetention(32, 4).eval(), torch.randn(1, 5, 32)
    block = _one_block(model, x)
    lay = block.layout
    # 4 heads of d_k = 32/4 = 8, d_v = 64/4 = 16; D keeps j ≤ i: causal
    assert (lay.score_form, lay.num_heads, lay.head_dim, lay.v_head_dim) == ("kernel", 4, 8, 16)
    assert (lay.causal, lay.seq_len_q, lay.seq_len_kv) == (True, 5, 5)
    # no biases: Q, K 32·32 = 1,024; V 32·64 = 2,048; O (after the per-head GroupNorm) 64·32
    assert (block.params.q, block.params.k, block.params.v, block.params.o) == (
        1024, 1024, 2048, 2048)
    f = block.flops
    # scores 2·b·h·n·n·d_k = 2·4·5·5·8 = 1,600; context 2·4·5·5·16 = 3,200
    assert (f.scores, f.context) == (1600, 3200)
    # torch also counts the gate projection: 2·5·32·64 = 20,480
    assert f.q_proj + f.k_proj + f.v_proj + f.o_proj + f.scores + f.context + 20480 == \
        _counted(model, x)


def test_a_scatter_softmax_over_per_edge_products_is_listed_with_why() -> None:
    edges = torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]])  # (2, E): source, target
    report = audit(EdgeScatterAttention(16, 2).eval(), (torch.randn(4, 16), edges))
    assert report.blocks == ()
    (unread,) = report.coverage.unread_cores
    assert (unread.module, unread.op) == ("", "exp")
    assert "scattered by an index" in unread.why and "graph's edges" in unread.why


def test_scatter_pools_and_group_norm_convs_are_neither_blocks_nor_unread() -> None:
    for model, x in ((ScatterSoftmaxPool(16, 2), torch.randn(6, 16)),
                     (GroupNormConvMix(16), torch.randn(2, 16, 8))):
        report = audit(model.eval(), (x,))
        assert report.blocks == () and report.coverage.unread_cores == ()


def test_differential_attention_scores_and_softmax_count_both_maps() -> None:
    model, x = DifferentialOneSoftmax().eval(), torch.randn(2, 6, 32)
    block = _one_block(model, x)
    lay = block.layout
    # h = 4 heads, each two maps of d_k = 32/4/2 = 4 against one V head of 2·4 = 8
    assert (lay.num_heads, lay.head_dim, lay.v_head_dim, lay.score_maps) == (4, 4, 8, 2)
    f = block.flops
    # QKᵀ over 2h = 8 maps: 2·b·8·n·n·d_k = 2·2·8·6·6·4 = 4,608; softmax 3 per score over
    # b·8·n·n = 576 scores: 1,728; PV over h = 4 heads: 2·2·4·6·6·8 = 4,608
    assert (f.scores, f.softmax, f.context) == (4608, 1728, 4608)
    assert f.q_proj + f.k_proj + f.v_proj + f.o_proj + f.scores + f.context == _counted(model, x)


def test_softmax_maps_composed_with_each_other_are_listed_not_blocks() -> None:
    report = audit(LandmarkMaps(32, 2, 2).eval(), (torch.randn(1, 8, 32),))
    # A1 meets pinv(A2), A2 meets functions of itself, A3's context meets A1·pinv(A2)
    assert report.blocks == ()
    unread = report.coverage.unread_cores
    assert [u.op for u in unread] == ["softmax"] * 3
    assert all("composed into an approximation" in u.why for u in unread)


def test_a_softmax_over_joined_row_and_column_logits_is_listed_with_why() -> None:
    report = audit(RowColumnMaps(16).eval(), (torch.randn(1, 16, 3, 4),))
    assert report.blocks == ()
    (unread,) = report.coverage.unread_cores
    assert unread.op == "softmax" and "joined side by side" in unread.why
