"""Joint attention's costs count every sample and each token through its own stream's weights."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fixtures.zoo_patterns import B, D, H, JointAttention, N

from mhaudit.api import audit
from mhaudit.data import AttentionBlock

DK = D // H
TEXT = 4


def _block(model: Any, *inputs: torch.Tensor) -> AttentionBlock:
    (block,) = audit(model.eval(), inputs).blocks
    return block


def _check(block: AttentionBlock, batch: int, image: int, text: int) -> None:
    n = image + text  # the joint sequence
    assert (block.layout.batch_size, block.layout.seq_len_q, block.layout.streams) == (
        batch, n, 2)
    flops = block.flops
    # QKᵀ over every sample: 2·b·h·n²·d_k.
    assert flops.scores == 2 * batch * H * n * n * DK
    # Each token goes through its own stream's 32 → 32 projection: 2·b·n·32·32 per role.
    assert (flops.q_proj, flops.k_proj, flops.v_proj, flops.o_proj) == (
        (2 * batch * n * D * D,) * 4)


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_joint_fixture_costs_every_sample(batch: int) -> None:
    with torch.device("meta"):
        model = JointAttention()
        inputs = (torch.randn(batch, N, D), torch.randn(batch, TEXT, D))
    _check(_block(model, *inputs), batch, N, TEXT)


def test_flux_double_stream_block_costs_both_samples() -> None:
    flux = pytest.importorskip("diffusers.models.transformers.transformer_flux")
    with torch.device("meta"):
        model = flux.FluxTransformerBlock(D, H, DK)
        inputs = (torch.randn(B, N, D), torch.randn(B, 5, D), torch.randn(B, D))
    _check(_block(model, *inputs), B, N, 5)
