"""Latent attention at decode: the absorbed form decode kernels run over the latent cache."""

from __future__ import annotations

from mhaudit.cost.arithmetic import SOFTMAX_FLOPS_PER_ELEMENT
from mhaudit.data import Layout

ABSORBED = "absorbed"
"""The latent-attention decode form mhaudit counts by default."""

LATENT_DECODE_CONVENTION = (
    "absorbed: W_UK folded into the query and W_UV into the output (as FlashMLA, vLLM and "
    "SGLang decode), so each new token's scores run over the (d_c + d_r)-wide latent cache: "
    "QKᵀ 2·h·n·(d_c + d_r), PV 2·h·n·d_c FLOPs per layer; decode.flops_per_step_non_absorbed "
    "counts the same step at the per-head dims"
)
"""What ``conventions.latent_attention_decode`` says."""


def latent_split(layout: Layout) -> tuple[int, int] | None:
    """(d_c, d_r) of latent attention: the compressed K/V width the up-projection reads
    and the decoupled rope key beside it in the cache; None without a latent.

    The latent cache holds d_c + d_r elements per position (``latent_width``); the K
    projection's bottleneck is d_c (DeepSeek-V2/V3: kv_lora_rank 512 + rope 64 = 576).
    """
    width = layout.latent_width
    if width is None or width <= 0:
        return None
    rank = layout.k.low_rank_width if layout.k is not None else 0
    d_c = rank if 0 < rank <= width else width
    return d_c, width - d_c


def absorbed_core_flops(layout: Layout, batch: int, keys: int) -> int | None:
    """QKᵀ + softmax + PV of one new token per sequence over ``keys`` latent positions.

    With the up-projections absorbed every query head scores the latent itself:
    2·b·h·keys·(d_c + d_r) + SOFTMAX_FLOPS_PER_ELEMENT·b·h·keys + 2·b·h·keys·d_c. The
    absorbed projections cost per token what the up-projection of the new token did
    (2·h·d_c·(d_nope + d_v)), so the rest of the step is unchanged. Dense, masks
    ignored; None without a latent.
    """
    split = latent_split(layout)
    if split is None:
        return None
    d_c, d_r = split
    pairs = batch * layout.num_heads * keys
    return 2 * pairs * (d_c + d_r) + SOFTMAX_FLOPS_PER_ELEMENT * pairs + 2 * pairs * d_c
