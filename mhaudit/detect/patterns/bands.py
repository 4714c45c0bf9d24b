"""Banded scores computed over overlapping chunks (sliding-window attention without a mask).

Longformer's sliding chunks cut the sequence of n queries and keys into c = n/w − 1
chunks of 2w positions with stride w, multiply each chunk's queries by its keys (a
(2w × 2w) score tile per chunk), and copy the tiles' diagonals into a (n, 2w + 1) band:
each query's w keys either side and its own. The softmax runs over the band's 2w + 1
columns, and the probabilities meet V again chunk by chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import fx

from mhaudit.trace.graphs import numel, shape


@dataclass(frozen=True)
class Band:
    """A banded core read from its chunked scores and the band its softmax runs over."""

    queries: int
    """Positions of the sequence the band covers (n, padding to a multiple of w included)."""
    chunk: int
    """Queries (and keys) per score chunk: 2w, the chunks overlapping by w."""


def chunked_band(softmax: fx.Node, scores: fx.Node, probs: fx.Node, extra: int = 0
                 ) -> Band | None:
    """The band when ``scores`` computes overlapping chunks that ``softmax`` reads as a band.

    ``scores`` is (…, c, 2w, 2w) with (…) the b·h sequences; the softmax reads b·h·n rows
    of 2w + 1 keys; the chunks are the c = n/w − 1 windows of 2w with stride w; and
    ``probs``, the probabilities as they meet V, are the n/w skewed chunks of w queries
    by 3w keys. ``extra`` logit columns beside the band (global keys) are not the band's.
    None when any of these does not hold (a plain or block-diagonal core).
    """
    tiles, rows = shape(scores), shape(softmax)
    if len(tiles) < 3 or not rows or tiles[-1] != tiles[-2] or tiles[-1] % 2:
        return None
    chunk, chunks = tiles[-1], tiles[-3]
    stride, sequences = chunk // 2, math.prod(tiles[:-3])
    if rows[-1] != chunk + 1 + extra or not sequences:
        return None
    queries, rest = divmod(numel(softmax) // rows[-1], sequences)
    if rest or not stride or queries % stride or chunks != queries // stride - 1:
        return None
    if numel(probs) != sequences * queries * 3 * stride:  # (…, n/w, w, 3w)
        return None
    return Band(queries=queries, chunk=chunk)
