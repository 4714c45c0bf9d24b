"""Score forms are read from what the graph computes: a kernel map instead of a softmax,
one score per token pooled into a context vector, scores over channels."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo_forms import (
    DK,
    AdditiveAttention,
    B,
    ChannelAttention,
    D,
    H,
    LinearAttention,
    N,
    SeparableAttention,
    SigmoidAttention,
    UnreadAttention,
)
from fixtures.zoo_vision import VISION
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from mhaudit.api import audit
from mhaudit.data import AttentionBlock, Report


def _audit(build: type) -> Report:
    with torch.device("meta"):
        model = build().eval()
        x = torch.randn(B, N, D)
    return audit(model, (x,))


def _row(block: AttentionBlock) -> tuple[object, ...]:
    lay = block.layout
    return (lay.score_form, lay.kind, lay.num_heads, lay.num_kv_heads, lay.head_dim,
            lay.v_head_dim, lay.d_model, lay.seq_len_q, lay.seq_len_kv, block.params.total)


def _core(block: AttentionBlock) -> tuple[int, int, int, int | None]:
    return (block.flops.scores, block.flops.softmax, block.flops.context,
            block.memory.scores_bytes)


def test_a_sigmoid_over_the_scores_is_a_kernel_core() -> None:
    (block,) = _audit(SigmoidAttention).blocks
    # 4 heads of 8 over 16 tokens; q, k, v, o 32·32 + 32 each: 4,224.
    assert _row(block) == ("kernel", "self", H, H, DK, DK, D, N, N, 4224)
    # the map is the scale and the sigmoid: 2 ops per score.
    assert block.layout.score_map_ops == 2
    # QKᵀ 2·2·4·16·16·8 = 32,768; map 2·(2·4·16·16) = 4,096; PV 32,768; the eager core
    # writes 2·4·16·16 = 2,048 scores at 2 B (bf16, the audit's default): 4,096 B.
    assert _core(block) == (32768, 4096, 32768, 4096)


def test_separable_attention_is_one_head_over_the_width() -> None:
    (block,) = _audit(SeparableAttention).blocks
    # q: the width-1 slice of qkv, 32 + 1 = 33; k, v: 32·32 + 32 = 1,056 each; o 1,056.
    assert _row(block) == ("separable", "self", 1, 1, D, D, D, N, N, 33 + 3 * 1056)
    # no QKᵀ (the scores are q_proj: 2·2·16·32·1 = 2,048); softmax over 16 tokens
    # 3·2·16 = 96; pooling 2·2·16·32 = 2,048 + broadcast 2·16·32 = 1,024; 2·16 scores · 2 B.
    assert block.flops.q_proj == 2048
    assert _core(block) == (0, 96, 3072, 64)
    assert not block.findings


def test_additive_attention_reads_its_learned_vector_as_the_query() -> None:
    (block,) = _audit(AdditiveAttention).blocks
    lay = block.layout
    # q: w_g, 32·1, no bias; k: to_query and v: to_key, 32·32 + 32 each; o: proj 1,056.
    assert _row(block) == ("separable", "self", 1, 1, D, D, D, N, N, 32 + 3 * 1056)
    assert lay.q is not None and lay.q.weight == "w_g"
    assert lay.k is not None and lay.k.module == "to_query"
    assert _core(block) == (0, 96, 3072, 64)


def test_channel_attention_heads_are_the_groups() -> None:
    report = _audit(ChannelAttention)
    (block,) = report.blocks
    # 4 groups of 32 / 4 = 8 channels over 16 tokens (not 32 / 16 = 2 heads of 16);
    # qkv 32·96 + 96 = 3,168 and proj 1,056.
    assert _row(block) == ("channel", "self", H, H, DK, DK, D, N, N, 4224)
    # QᵀK over the tokens 2·2·4·8·16·8 = 16,384; softmax 3·2·4·8·8 = 1,536; PV 16,384;
    # 2·4·8·8 scores · 2 B = 1,024: no n² term.
    assert _core(block) == (16384, 1536, 16384, 1024)
    # the rules about n×n scores (MHA004 small head dim, MHA005 materialised) do not fire.
    assert not {f.code for f in block.findings} & {"MHA004", "MHA005"}
    families = report.totals.flops_by_family
    # the two activation matmuls and the four projections are the graph's matmul FLOPs.
    assert families["matmul"] == 4 * 65536 + 2 * 16384


def test_the_state_computed_first_is_linear_attention() -> None:
    (block,) = _audit(LinearAttention).blocks
    assert _row(block) == ("linear", "self", H, H, DK, DK, D, N, N, 4224)
    # state φ(K)ᵀV 2·2·4·8·16·8 = 16,384; φ(Q)·state 2·2·4·16·8·8 = 16,384; the normaliser
    # is not counted; the state is 2·4·8·8 = 512 elements at 2 B.
    assert _core(block) == (16384, 0, 16384, 1024)


@pytest.mark.parametrize("case", VISION[:2], ids=[c.id for c in VISION[:2]])
def test_softmax_attention_keeps_the_softmax_form(case: object) -> None:
    with torch.device("meta"):
        model = case.build().eval()  # type: ignore[attr-defined]
        x = torch.randn(B, N, D)
    assert [b.layout.score_form for b in audit(model, (x,)).blocks] == ["softmax"]


def test_projections_no_output_reads_are_coverage_not_a_block() -> None:
    report = _audit(UnreadAttention)
    # zeros_like(q) reads q's shape only: q, k and v reach no output; o does.
    assert report.blocks == ()
    assert report.coverage.unread_projections == ("k", "q", "v")
    assert report.to_dict()["coverage"]["unread_projections"] == ["k", "q", "v"]


def test_every_projection_of_an_attention_block_is_read() -> None:
    assert _audit(SigmoidAttention).coverage.unread_projections == ()


@settings(max_examples=6, deadline=None, phases=(Phase.explicit, Phase.generate))
@given(n=st.integers(2, 12), b=st.integers(1, 2),
       build=st.sampled_from([SigmoidAttention, ChannelAttention, LinearAttention]))
def test_block_matmuls_are_the_graphs_at_any_length(n: int, b: int, build: type) -> None:
    with torch.device("meta"):
        model = build().eval()
        x = torch.randn(b, n, D)
    report = audit(model, (x,))
    (block,) = report.blocks
    f = block.flops
    matmuls = f.q_proj + f.k_proj + f.v_proj + f.o_proj + f.scores + f.context
    # linear attention's normaliser φ(Q)·Σφ(K) is one more matmul, 2·b·h·n·d_k·1, that
    # the block does not count; every other matmul of the graph is the block's.
    extra = 2 * b * H * n * DK if build is LinearAttention else 0
    assert report.totals.flops_by_family["matmul"] == matmuls + extra
