"""The tile-skipping count is a closed form: it equals the per-tile walk, in constant time."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from mhaudit.cost.block import causal_pairs, causal_tile_pairs


def _walk(n_q: int, n_kv: int, offset: int, window: int | None, tile: int) -> int:
    """The definition, one query tile at a time (the reference, linear in n_q)."""
    total = 0
    for r0 in range(0, n_q, tile):
        r1 = min(n_q, r0 + tile) - 1
        hi = min(n_kv - 1, r1 + offset)
        lo = 0 if window is None else max(0, r0 + offset - window + 1)
        if hi >= lo:
            total += (r1 - r0 + 1) * (min(n_kv, (hi // tile + 1) * tile) - lo // tile * tile)
    return total


@settings(max_examples=400, deadline=None)
@given(tile=st.sampled_from([1, 2, 3, 8, 128]), n_q=st.integers(1, 700),
       n_kv=st.integers(1, 700), offset=st.integers(-800, 800),
       window=st.one_of(st.none(), st.integers(1, 900)))
def test_closed_form_equals_the_tile_walk(
    tile: int, n_q: int, n_kv: int, offset: int, window: int | None
) -> None:
    assert causal_tile_pairs(n_q, n_kv, offset, window, tile) == _walk(
        n_q, n_kv, offset, window, tile)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 2_000), window=st.one_of(st.none(), st.integers(1, 2_000)))
def test_tiles_bound_the_pairs_from_above(n: int, window: int | None) -> None:
    assert causal_tile_pairs(n, n, 0, window) >= causal_pairs(n, n, 0, window)


def test_largest_accepted_length_is_instant() -> None:
    n = 2**40  # the largest --seq-len the CLI accepts
    start = time.perf_counter()
    full = causal_tile_pairs(n, n)
    windowed = causal_tile_pairs(n, n, 0, 4096)
    assert time.perf_counter() - start < 0.01
    tiles = n // 128
    # tiles·(tiles + 1)/2 lower-triangle tiles of 128² each
    assert full == tiles * (tiles + 1) // 2 * 128 * 128
    # window 4096 = 32 tiles: tile t reaches tiles t − 32 .. t (33 of them, fewer at the start)
    assert windowed == 128 * 128 * (33 * tiles - 32 * 33 // 2)
