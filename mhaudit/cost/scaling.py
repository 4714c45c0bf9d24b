"""Project block costs to other sequence lengths from the detected layouts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mhaudit.cost.block import block_flops, block_memory
from mhaudit.cost.forms import score_elements
from mhaudit.data import AttentionBlock, Layout, ScalingPoint


def at_length(layout: Layout, seq_len: int) -> Layout:
    """The layout at ``seq_len`` queries; self-attention keys follow, cross keys stay.

    Keys made by a map over positions (``kv_rows``) keep their share of the positions
    (a compressor of blocks of l positions: n/l keys); the projections below the map, the
    map itself and the per-head maps of the queries and the context run over the whole
    sequence, so their rows and FLOPs scale with it.
    """
    kv = seq_len if layout.kind == "self" else layout.seq_len_kv
    n = layout.seq_len_q
    if not n:
        return replace(layout, seq_len_q=seq_len, seq_len_kv=kv)
    if layout.kv_rows and layout.kind == "self":
        kv = max(1, layout.seq_len_kv * seq_len // n)

    def scaled(flops: tuple[int, int]) -> tuple[int, int]:
        return flops[0] * seq_len // n, flops[1] * seq_len // n

    return replace(layout, seq_len_q=seq_len, seq_len_kv=kv, kv_rows=layout.kv_rows * seq_len // n,
                   kv_transform_flops=scaled(layout.kv_transform_flops),
                   absorbed_flops=scaled(layout.absorbed_flops))


def score_element_bytes(block: AttentionBlock, element_bytes: int) -> int:
    """Bytes per score as the block was costed: 4 for the math fallback on half inputs."""
    elements = score_elements(block.layout)
    if not elements:
        return element_bytes
    return block.memory.scores_bytes_if_materialized // elements


def project(
    blocks: Sequence[AttentionBlock], seq_lens: Sequence[int], element_bytes: int
) -> tuple[ScalingPoint, ...]:
    """One point per length: FLOPs, score bytes and KV cache summed over blocks.

    Score bytes keep each block's score width (fp32 for the SDPA math fallback on half
    inputs). The KV cache is what the block holds at that length: causal self-attention
    up to its sliding window, cross-attention its static per-source cache, encoders none.
    """
    points = []
    for n in seq_lens:
        flops: dict[str, int] = {}
        scores = kv = 0
        for block in blocks:
            layout = at_length(block.layout, n)
            flops[block.name] = block_flops(layout).total
            memory = block_memory(layout, element_bytes, materializes_scores=True,
                                  scores_element_bytes=score_element_bytes(block, element_bytes))
            scores += memory.scores_bytes_if_materialized
            kv += memory.kv_cache_bytes
        points.append(ScalingPoint(n, sum(flops.values()), scores, kv, flops))
    return tuple(points)
