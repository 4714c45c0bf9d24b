"""Projection rules MHA009–MHA010: an inner width off d_model, and Q/K/V in three GEMMs."""

from __future__ import annotations

from mhaudit import units
from mhaudit.data import AttentionBlock, Severity
from mhaudit.rules.base import Hit, NumberSpec, Rule, RuleContext
from mhaudit.rules.sources import GEMMA, MEGATRON, NVIDIA_GUIDE, SCALING


def _inner_width_differs(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    inner = lay.num_heads * lay.head_dim
    inner_v = lay.num_heads * lay.v_head_dim
    if inner == lay.d_model and inner_v == lay.d_model:
        return None
    params, textbook = block.params.total, block.params.textbook
    ratio = params / textbook if textbook else 0.0
    return Hit(
        f"h·d_k = {lay.num_heads}·{lay.head_dim} = {inner} (h·d_v = {inner_v}) differs from "
        f"d_model = {lay.d_model}: Q/K/V/O hold {units.count(params)} parameters against the "
        f"textbook {units.count(textbook)} ({units.ratio(ratio)})",
        {"inner_width": inner, "inner_v_width": inner_v, "d_model": lay.d_model,
         "params": params, "textbook_params": textbook, "params_ratio": ratio},
    )


INNER_WIDTH_DIFFERS_FROM_D_MODEL = Rule(
    code="MHA009", name="inner-width-differs-from-d-model", severity=Severity.INFO,
    since="0.1.0",
    summary="h·d_k (or h·d_v) differs from d_model, so the textbook 4·d² does not hold.",
    why="Attention parameters and projection FLOPs scale with the inner width h·d_k, not "
        "with d_model. That can be intended (Gemma's d_k = 256), but it changes every "
        "cost figure against the textbook and is easy to get wrong by accident.",
    known_problems="It fires on deliberate designs too (Gemma, latent attention, wide "
                   "value heads); ignore it per module where the width is intended. The "
                   "ratio compares Q/K/V/O parameters only, not FLOPs.",
    example="d_model = 3072 with h = 16 heads of d_k = 256: inner width 4096.",
    fix="Set d_k = d_model / h unless the wider or narrower inner width is intended.",
    references=(SCALING, GEMMA),
    numbers=(
        NumberSpec("inner_width", "elements", "h·d_k"),
        NumberSpec("inner_v_width", "elements", "h·d_v"),
        NumberSpec("d_model", "elements", "the input width of the Q projection"),
        NumberSpec("params", "count", "Q/K/V/O weights and biases"),
        NumberSpec("textbook_params", "count", "4·d_model² plus the layout's biases"),
        NumberSpec("params_ratio", "ratio", "params over textbook_params (0 without one)"),
    ),
    check=_inner_width_differs,
)


def _unfused_qkv(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    projections = (lay.q, lay.k, lay.v)
    if lay.kind != "self" or any(p is None for p in projections):
        return None
    if len({p.weight for p in projections if p is not None}) < 3:
        return None
    if any(p.fused for p in projections if p is not None):
        return None
    input_bytes = lay.batch_size * lay.seq_len_q * lay.d_model * ctx.element_bytes
    width = (lay.num_heads + 2 * lay.num_kv_heads) * lay.head_dim
    return Hit(
        f"Q, K and V are three projections: three GEMM launches read the "
        f"{units.nbytes(input_bytes)} input three times ({units.nbytes(2 * input_bytes)} of "
        f"extra reads per forward) where one {lay.d_model}×{width} projection reads it once",
        {"projections": 3, "input_bytes": input_bytes, "extra_read_bytes": 2 * input_bytes,
         "fused_width": width},
        fix=f"Fuse them into one nn.Linear({lay.d_model}, {width}) and split its output.",
    )


UNFUSED_QKV_PROJECTIONS = Rule(
    code="MHA010", name="unfused-qkv-projections", severity=Severity.INFO, since="0.1.0",
    summary="Self-attention computes Q, K and V with three separate projections.",
    why="Three GEMMs launch three kernels and read the input activation three times; one "
        "fused projection of width (h + 2·h_kv)·d_k reads it once and runs a larger, "
        "better-shaped GEMM.",
    known_problems="The extra bytes count reads of the input only, at the traced shape. "
                   "Compilers (torch.compile, TensorRT) can fuse the three GEMMs "
                   "themselves, so what runs may already be one; and a fused weight makes "
                   "tensor-parallel sharding of Q, K and V need a split of its own.",
    example="`self.q = nn.Linear(d, d)`, `self.k = nn.Linear(d, d)` and "
            "`self.v = nn.Linear(d, d)` in one self-attention module.",
    fix="Fuse them into one nn.Linear(d, (h + 2·h_kv)·d_k) and split its output.",
    references=(NVIDIA_GUIDE, MEGATRON),
    numbers=(
        NumberSpec("projections", "count", "separate Q, K and V projections"),
        NumberSpec("input_bytes", "bytes", "the input activation one projection reads"),
        NumberSpec("extra_read_bytes", "bytes", "reads a fused projection saves per forward"),
        NumberSpec("fused_width", "elements", "output width of the fused projection"),
    ),
    check=_unfused_qkv,
)

RULES = (INNER_WIDTH_DIFFERS_FROM_D_MODEL, UNFUSED_QKV_PROJECTIONS)
"""The projection rules, in code order."""
