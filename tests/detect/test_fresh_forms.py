"""Attention forms a first reading missed, each read as a block with the figures its
constructor fixes (hand arithmetic) and FLOPs that torch's FlopCounterMode confirms."""

from __future__ import annotations

import torch
from fixtures.zoo_forms_fresh import ChannelsFirstBlock, NanToNumScores, SoftmaxFeatureMaps
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
