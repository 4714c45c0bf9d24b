"""Scores written into a buffer are followed to the matmul; a band computed over
overlapping chunks is read as one block with its window and costed as it is computed."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_bands import (
    DK,
    ChunkedBandAttention,
    D,
    H,
    IndexPutScores,
    SliceScatterScores,
    W,
)
from torch import fx, nn
from torch.utils.flop_counter import FlopCounterMode

from mhaudit.api import audit
from mhaudit.cost.arithmetic import banded_attention_parts
from mhaudit.data import Layout
from mhaudit.detect.blocks import detect
from mhaudit.detect.patterns.buffers import written_buffer, written_values
from mhaudit.trace.export import trace

B, N = 2, 8
"""Batch and tokens of the fixtures (N a multiple of the window's w = 2)."""


def _layouts(build: type[nn.Module]) -> list[Layout]:
    with torch.device("meta"):
        model = build().eval()
        x = torch.randn(B, N, D)
    return detect(trace(model, (x,), {}), model)


@pytest.mark.parametrize("build", [IndexPutScores, SliceScatterScores],
                         ids=["index_put_", "slice_scatter"])
def test_scores_written_into_a_buffer_are_one_dense_block(build: type[nn.Module]) -> None:
    (layout,) = _layouts(build)
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.kind) == (
        H, H, DK, "self")
    assert (layout.seq_len_q, layout.seq_len_kv, layout.window_chunk) == (N, N, None)


def test_chunked_band_is_one_block_with_its_window() -> None:
    (layout,) = _layouts(ChunkedBandAttention)
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.v_head_dim) == (
        H, H, DK, DK)
    # the whole sequence of 8 queries and keys; each query sees w = 2 keys either side
    assert (layout.seq_len_q, layout.seq_len_kv, layout.batch_size) == (N, N, B)
    assert (layout.window, layout.window_chunk, layout.windowed) == (2 * W, 2 * W, None)
    assert (layout.kind, bool(layout.causal)) == ("self", False)


def test_chunked_band_costs_what_its_chunks_compute() -> None:
    model = ChunkedBandAttention().eval()
    x = torch.randn(B, N, D)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(x)
    (block,) = audit(model, (x,)).blocks
    f = block.flops
    # bh = 2·4 = 8 sequences, c = 8/2 − 1 = 3 chunks of 2w = 4: scores 2·8·3·4·4·8 = 6,144;
    # context over n/w = 4 chunks of w = 2 queries by 3w = 6 keys: 2·8·4·2·6·8 = 6,144
    assert (f.scores, f.context) == (6144, 6144)
    # softmax over 8 rows of 2w + 1 = 5 keys per sequence: 3·8·8·5 = 960
    assert f.softmax == 960
    # torch counts the four projections (4·2·16·32·32 = 131,072) and the two einsums
    projections = f.q_proj + f.k_proj + f.v_proj + f.o_proj
    assert projections == 131072
    assert projections + f.scores + f.context == counter.get_total_flops()
    # the chunk tiles held at once: 8·3·4·4 = 384 scores, 2 bytes each at bf16 (the default)
    assert block.memory.scores_bytes == 768


def test_banded_parts_pad_the_sequence_to_the_chunk() -> None:
    # 10 positions pad to 12 with 2w = 4: c = 12/2 − 1 = 5 chunks, 12/2 = 6 context chunks
    scores, softmax, context = banded_attention_parts(1, 10, 4, 8, 8)
    assert scores == 2 * 5 * 4 * 4 * 8
    assert softmax == 3 * 12 * 5
    assert context == 2 * 6 * 2 * 6 * 8


def test_a_buffer_holds_what_is_written_into_its_views_in_place() -> None:
    graph = fx.Graph()
    x = graph.placeholder("x")
    buffer = graph.call_function(torch.ops.aten.new_zeros.default, (x, [4, 4]))
    view = graph.call_function(torch.ops.aten.slice.Tensor, (buffer, 0, 0, 2))
    written = graph.call_function(torch.ops.aten.copy_.default, (view, x))
    copied = graph.call_function(torch.ops.aten.copy.default, (view, buffer))  # functional
    scattered = graph.call_function(torch.ops.aten.slice_scatter.default, (buffer, x, 0, 0, 2))
    assert written_values(buffer) == [x]  # the functional copy writes nothing into it
    assert written_values(scattered) == [x, buffer]  # the values, then what they go into
    assert written_values(x) is None
    assert written_buffer(written, x) is buffer and written_buffer(copied, buffer) is None
