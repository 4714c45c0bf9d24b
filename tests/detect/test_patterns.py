"""Each hidden-layout pattern is read exactly from what the graph computes."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_patterns import PATTERNS, B, D, N, Pattern

from mhaudit.data import Layout
from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count
from mhaudit.load.target import normalize_inputs
from mhaudit.trace.export import trace


def _detect(pattern: Pattern) -> list[Layout]:
    with torch.device("meta"):
        model = pattern.build().eval()
        args, kwargs = normalize_inputs(pattern.inputs())
    return detect(trace(model, args, kwargs), model)


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.id for p in PATTERNS])
def test_pattern_is_one_exact_block(pattern: Pattern) -> None:
    (layout,) = _detect(pattern)
    params = count(layout)
    got = (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.v_head_dim,
           layout.kind, bool(layout.causal), params.total, layout.sinks, layout.head_mixing,
           layout.padded_head_dim, layout.windowed, layout.streams)
    want = (pattern.heads, pattern.kv_heads, pattern.d_k, pattern.d_v, pattern.kind,
            pattern.causal, pattern.params, pattern.sinks, pattern.head_mixing,
            pattern.padded_head_dim, pattern.windowed, pattern.streams)
    assert got == want
    # The deviations explain the whole difference from 4·d², each by a named cause.
    assert params.textbook + sum(d.params for d in params.deviations) == params.total
    assert not any(d.reason.startswith("not explained") for d in params.deviations)


@pytest.mark.parametrize(("pattern_id", "words"), [
    ("sinks", "attention sinks"), ("talking-heads", "head mixing"),
    ("padded-head-dim", "zero-padded to 16"), ("windowed", "windows of 3 tokens"),
    ("joint-two-streams", "2 token streams"),
])
def test_deviations_name_the_pattern(pattern_id: str, words: str) -> None:
    pattern = next(p for p in PATTERNS if p.id == pattern_id)
    (layout,) = _detect(pattern)
    assert any(words in d.reason for d in count(layout).deviations)


def test_windowed_block_costs_every_window() -> None:
    # 6 tokens in windows of 3 at batch 2: 2 windows per sequence, 4 window rows of 3 queries
    # against 6 keys (the window and the one before it).
    (layout,) = _detect(next(p for p in PATTERNS if p.id == "windowed"))
    assert (layout.batch_size, layout.seq_len_q, layout.seq_len_kv) == (4, 3, 6)


def test_grouped_projection_reports_its_groups_and_costs_what_it_computes() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from mhaudit.api import audit
    from mhaudit.cost.block import block_flops

    pattern = next(p for p in PATTERNS if p.id == "grouped-pointwise-conv")
    model = pattern.build().eval()
    (x,) = pattern.inputs()
    (block,) = audit(model, (x,)).blocks
    assert [p.groups for p in (block.layout.q, block.layout.k, block.layout.v)] == [4, 4, 4]
    assert block.layout.o is not None and block.layout.o.groups == 1
    # Each grouped 1×1 conv: 2·rows·(32/4)·32 = 2·12·8·32 = 6,144 FLOPs over 2·6 rows.
    cost = block_flops(block.layout)
    assert cost.q_proj == cost.k_proj == cost.v_proj == 2 * (B * N) * (D // 4) * D
    with FlopCounterMode(display=False) as counter:
        model(x)
    convs = counter.get_flop_counts()["Global"][torch.ops.aten.convolution]
    assert cost.q_proj + cost.k_proj + cost.v_proj + cost.o_proj == convs
