"""Score-memory rule MHA005: the b·h·n_q·n_kv score matrix written to memory."""

from __future__ import annotations

from mhaudit import units
from mhaudit.cost.block import score_elements
from mhaudit.cost.kernels import sdpa_backend
from mhaudit.data import AttentionBlock, Severity
from mhaudit.rules.base import Hit, NumberSpec, Rule, RuleContext, Threshold
from mhaudit.rules.sources import FLASH_PAPER, SDP_UTILS
from mhaudit.rules.target import on_target, target_of


def _score_elements(block: AttentionBlock) -> int:
    return score_elements(block.layout)


def _score_element_bytes(block: AttentionBlock) -> int:
    """Bytes per materialised score, from the block's memory figures."""
    elements = _score_elements(block)
    return block.memory.scores_bytes_if_materialized // elements if elements else 0


def _how_and_fix(block: AttentionBlock, ctx: RuleContext) -> tuple[str, str]:
    """What writes the scores, and the fix for it."""
    lay = block.layout
    choice = target_of(block, ctx)
    if choice.kernel == "eager":
        alt = sdpa_backend(lay.head_dim, lay.v_head_dim, ctx.dtype, ctx.profile)
        return ("eager softmax(QKᵀ) materialises",
                f"Call F.scaled_dot_product_attention(q, k, v, is_causal=...); on "
                f"{ctx.profile.name} it would run the {alt.backend} kernel.")
    return (f"SDPA falls back to the math kernel on {ctx.profile.name} ({choice.reason}), "
            "which materialises",
            "Make the layout fit a fused kernel: fp16/bf16, d_k a multiple of 8 and ≤ 256, "
            "then call F.scaled_dot_product_attention.")


def _materialized_scores(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    if not target_of(block, ctx).materializes_scores:
        return None
    costed = on_target(block, ctx)
    scores = costed.memory.scores_bytes_if_materialized
    element_bytes = _score_element_bytes(costed)
    if scores <= ctx.threshold("min_scores_bytes"):
        return None
    share = scores / ctx.profile.memory_bytes
    shape = f"{lay.batch_size}×{lay.num_heads}×{lay.seq_len_q}×{lay.seq_len_kv}"
    how, fix = _how_and_fix(block, ctx)
    of_memory = (f", {units.percent(share, 2)} of {ctx.profile.name} memory"
                 if share >= 1e-4 else "")
    return Hit(
        f"{how} the {shape} score matrix: {units.nbytes(scores)} "
        f"({element_bytes} B per score{of_memory}), growing with h and n²",
        {"scores_bytes": scores, "score_elements": _score_elements(block),
         "score_element_bytes": element_bytes, "device_memory_fraction": share},
        fix=fix,
    )


MATERIALIZED_ATTENTION_SCORES = Rule(
    code="MHA005", name="materialized-attention-scores", severity=Severity.WARNING,
    since="0.1.0",
    summary="The b·h·n_q·n_kv score matrix is written to memory: eager softmax(QKᵀ) or "
            "SDPA's math fallback on the target.",
    why="Fused kernels keep scores in on-chip memory. An explicit softmax(QKᵀ)V, or the "
        "math fallback (in fp32 for half inputs), writes and reads b·h·n_q·n_kv scores: "
        "memory that grows with h and with n², and bandwidth the kernel did not need.",
    known_problems="The bytes are one live score matrix per block at the traced shape; "
                   "eager code that chunks the sequence, or a compiler that fuses the "
                   "softmax, materialises less. Attention written by hand in a way that "
                   "detection reads as eager is flagged even when a later compile step "
                   "would fuse it.",
    example="`scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)` then "
            "`scores.softmax(-1) @ v`, or SDPA with d_k = 20 in fp16 on a T4.",
    fix="Call F.scaled_dot_product_attention(q, k, v, is_causal=...) instead.",
    references=(SDP_UTILS, FLASH_PAPER),
    thresholds=(Threshold("min_scores_bytes", 0, "Score bytes above which the rule fires."),),
    numbers=(
        NumberSpec("scores_bytes", "bytes", "the score matrix, b·h·n_q·n_kv · element size"),
        NumberSpec("score_elements", "count", "scores in the matrix, b·h·n_q·n_kv"),
        NumberSpec("score_element_bytes", "bytes", "bytes per stored score"),
        NumberSpec("device_memory_fraction", "fraction", "share of the target GPU's memory"),
    ),
    check=_materialized_scores,
)

RULES = (MATERIALIZED_ATTENTION_SCORES,)
"""The score-memory rules, in code order."""
