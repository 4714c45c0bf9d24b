"""Output projections behind joins: a matrix shared with another branch counts only the
columns that read the context; a per-sample loop is one block."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fixtures.zoo_parallel import HIDDEN, B, D, FusedOutput, HeadsConcatenated, N, PerSampleJoint

from mhaudit.api import audit
from mhaudit.data import AttentionBlock

QKV = 3 * (D * D + D)
"""The fused qkv: 32 → 96 with a bias, 3·1,056 = 3,168."""


def _block(model: Any, *inputs: torch.Tensor) -> AttentionBlock:
    (block,) = audit(model.eval(), inputs).blocks
    params = block.params
    assert params.textbook + sum(d.params for d in params.deviations) == params.total
    assert not any(d.reason.startswith("not explained") for d in params.deviations)
    return block


@pytest.mark.parametrize("context_first", [True, False])
def test_output_that_also_reads_an_mlp_counts_the_context_columns(context_first: bool) -> None:
    with torch.device("meta"):
        model, x = FusedOutput(context_first), torch.randn(B, N, D)
    block = _block(model, x)
    # out is (D + HIDDEN) → D: its 32·32 context columns and its bias are the block's O
    # (1,056); the other 64·32 columns are the MLP's. 3,168 + 1,056 = 4,224.
    assert (block.params.o, block.params.o_bias) == (D * D + D, D)  # o counts its bias
    assert block.params.total == QKV + D * D + D
    assert block.layout.o is not None and block.layout.o.in_features == D
    assert block.params.o < (D + HIDDEN) * D + D  # the whole matrix is not the block's


def test_contexts_concatenated_by_head_keep_the_whole_output() -> None:
    with torch.device("meta"):
        model, x = HeadsConcatenated(), torch.randn(B, N, D)
    block = _block(model, x)
    # 4 heads of 8: q, k, v 4·3·(32·8 + 8) = 3,168; out 32·32 + 32 = 1,056, all of it.
    assert (block.layout.num_heads, block.layout.head_dim) == (4, 8)
    assert block.params.total == 4 * 3 * (D * 8 + 8) + D * D + D


def test_flux_single_stream_block_output_is_its_context_columns() -> None:
    flux = pytest.importorskip("diffusers.models.transformers.transformer_flux")
    with torch.device("meta"):
        model = flux.FluxSingleTransformerBlock(D, 4, 8)  # mlp_ratio 4: MLP width 128
        inputs = (torch.randn(B, N, D), torch.randn(B, 5, D), torch.randn(B, D))
    block = _block(model, *inputs)
    # to_q, to_k, to_v 32 → 4·8 with biases (3,168); no to_out: proj_out reads
    # cat([context, mlp]) (32 + 128 → 32). The O is its 32·32 context columns + bias.
    assert (block.layout.num_heads, block.layout.head_dim, block.layout.seq_len_kv) == (4, 8, 11)
    assert block.params.total == QKV + D * D + D


def test_per_sample_loop_of_joint_attention_is_one_block() -> None:
    with torch.device("meta"):
        model, x, c = PerSampleJoint(text=16), torch.randn(B, N, D), torch.randn(B, 5, 16)
    block = _block_of_many(model, x, c)
    # Image q, k, v, o 4·1,056; text tq, tk, tv 16 → 32 3·512; out_text 32 → 16 + 16 = 528:
    # 4,224 + 1,536 + 528 = 6,288, both samples' cores in one block with both outputs.
    assert (block.layout.num_heads, block.layout.head_dim, block.layout.streams) == (4, 8, 2)
    assert block.params.total == 4 * (D * D + D) + 3 * 16 * D + D * 16 + 16
    assert block.layout.core_count == B


def test_mochi_block_is_one_joint_block_of_two_widths() -> None:
    mochi = pytest.importorskip("diffusers.models.transformers.transformer_mochi")
    with torch.device("meta"):
        model = mochi.MochiTransformerBlock(D, 4, 8, pooled_projection_dim=16)
        inputs = (torch.randn(B, N, D), torch.randn(B, 5, 16), torch.randn(B, D),
                  torch.ones(B, 5, dtype=torch.bool))
    block = _block_of_many(model, *inputs)
    # to_q/k/v 3·1,024, add_q/k/v 16 → 32 3·512, to_out 1,056, to_add_out 32 → 16 + 16:
    # 3,072 + 1,536 + 1,056 + 528 = 6,192.
    assert block.params.total == 6192
    assert (block.layout.num_heads, block.layout.num_kv_heads) == (4, 4)


def _block_of_many(model: Any, *inputs: torch.Tensor) -> AttentionBlock:
    (block,) = audit(model.eval(), inputs).blocks
    return block
