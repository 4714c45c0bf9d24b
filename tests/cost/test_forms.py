"""Each score form's core formula, computed by hand (b = 2, h = 4, n = 16, d_k = d_v = 8)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mhaudit.cost.forms import (
    CoreCost,
    CoreShape,
    _register,
    core_cost,
    dense_core,
    form_names,
)
from mhaudit.data import SCORE_FORMS, Layout

SHAPE = CoreShape(batch_heads=2 * 4, n_q=16, n_kv=16, d_k=8, d_v=8, map_ops=4)


def _layout(form: str, map_ops: int = 0) -> Layout:
    return Layout(name="attn", module_type="M", kind="self", implementation="eager",
                  d_model=32, num_heads=4, num_kv_heads=4, head_dim=8, v_head_dim=8,
                  batch_size=2, seq_len_q=16, seq_len_kv=16, d_out=32, causal=False,
                  scale=None, q=None, k=None, v=None, o=None, score_form=form,
                  score_map_ops=map_ops)


def test_every_form_has_one_formula() -> None:
    assert form_names() == SCORE_FORMS
    with pytest.raises(ValueError, match="has a formula already"):
        _register("softmax")(lambda s: CoreCost(0, 0, 0, 0))


@pytest.mark.parametrize(("form", "want"), [
    # QKᵀ 2·8·16·16·8 = 32,768; softmax 3·8·16·16 = 6,144; PV 32,768; 8·16·16 = 2,048.
    ("softmax", CoreCost(32768, 6144, 32768, 2048)),
    # as softmax, the map 4 ops per score: 4·2,048 = 8,192.
    ("kernel", CoreCost(32768, 8192, 32768, 2048)),
    # state φ(K)ᵀV 2·8·8·16·8 = 16,384; context φ(Q)·state 2·8·16·8·8 = 16,384; 8·8·8 = 512.
    ("linear", CoreCost(16384, 0, 16384, 512)),
    # no QKᵀ; softmax over 16 tokens 3·8·16 = 384; pooling 2·8·16·8 = 2,048 plus the
    # broadcast 8·16·8 = 1,024; 8·16 = 128 scores.
    ("separable", CoreCost(0, 384, 3072, 128)),
    # QᵀK over the tokens 2·8·8·16·8 = 16,384; softmax 3·8·8·8 = 1,536; PV 16,384; 8·8·8.
    ("channel", CoreCost(16384, 1536, 16384, 512)),
    # without a block mask, as softmax with score_mod's 4 ops per score in the softmax
    # part: 6,144 + 4·2,048 = 14,336.
    ("flex", CoreCost(32768, 14336, 32768, 2048)),
])
def test_form_formula(form: str, want: CoreCost) -> None:
    assert core_cost(_layout(form, SHAPE.map_ops)) == want


def test_channel_scores_do_not_grow_with_the_sequence() -> None:
    # 4× the tokens: 4× the matmuls, the same 512 scores.
    at_64 = core_cost(_layout("channel"), n_q=64, n_kv=64)
    assert (at_64.scores, at_64.score_elements) == (4 * 16384, 512)


def test_an_unknown_form_costs_as_softmax() -> None:
    assert core_cost(_layout("future")) == core_cost(_layout("softmax"))


def test_flex_counts_the_tiles_its_block_mask_visits() -> None:
    # 3 of 4 tiles visited: each part 3/4 of the dense one (32,768 · 3/4 = 24,576;
    # 14,336 · 3/4 = 10,752); the materialised scores stay 2,048.
    layout = replace(_layout("flex", SHAPE.map_ops), visited_fraction=0.75)
    assert core_cost(layout) == CoreCost(24576, 10752, 24576, 2048)
    assert dense_core(layout) == 32768 + 14336 + 32768


def test_rows_tied_into_one_map_share_its_softmax_and_scores() -> None:
    # batch_size 2 counts R = 2 rows of one sequence tied into one map: QKᵀ (summing over
    # the rows) and PV count both rows, 32,768 each; the one map is 1·4·16·16 = 1,024
    # scores, softmax 3·1,024 = 3,072.
    tied = replace(_layout("softmax"), tied_rows=2)
    assert core_cost(tied) == CoreCost(32768, 3072, 32768, 1024)
