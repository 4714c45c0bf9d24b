"""Parallelism rule MHA008: head counts that do not shard over the tensor-parallel degree."""

from __future__ import annotations

from mhaudit import units
from mhaudit.data import AttentionBlock, Layout, Severity
from mhaudit.rules.base import Hit, NumberSpec, Rule, RuleContext
from mhaudit.rules.sources import GQA, MEGATRON

TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)
"""Tensor-parallel degrees the fix proposes from."""


def _shards(lay: Layout, degree: int) -> bool:
    """Query heads split evenly, and KV heads split or replicate evenly, over ``degree``."""
    kv = lay.num_kv_heads
    return lay.num_heads % degree == 0 and (kv % degree == 0 or degree % max(1, kv) == 0)


def _not_divisible_by_tp(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    tp = ctx.tensor_parallel
    if tp is None or tp <= 1 or _shards(lay, tp):
        return None
    valid = [str(t) for t in TP_DEGREES if t > 1 and _shards(lay, t)]
    fix = (f"Use a tensor-parallel degree in {{{', '.join(valid)}}} or change the head counts."
           if valid else "Change the head counts: h, and h_kv or the degree, must divide evenly.")
    return Hit(
        f"h = {lay.num_heads} query heads and h_kv = {lay.num_kv_heads} KV heads do not shard "
        f"over tensor-parallel degree {tp} ({units.decimal(lay.num_heads / tp)} query heads "
        f"and {units.decimal(lay.num_kv_heads / tp)} KV heads per GPU)",
        {"heads": lay.num_heads, "kv_heads": lay.num_kv_heads, "tensor_parallel": tp,
         "heads_per_gpu": lay.num_heads / tp},
        fix=fix,
    )


HEADS_NOT_DIVISIBLE_BY_TENSOR_PARALLEL = Rule(
    code="MHA008", name="heads-not-divisible-by-tensor-parallel", severity=Severity.ERROR,
    since="0.1.0",
    summary="With --tensor-parallel N, the query heads do not split evenly over N GPUs, "
            "or the KV heads neither split over nor replicate evenly across them.",
    why="Tensor parallelism gives each GPU h/N query heads and h_kv/N KV heads (or "
        "replicates each KV head N/h_kv times). Other counts cannot be sharded by "
        "Megatron-style column/row splits, so the model does not run at that degree.",
    known_problems="Runs only when a tensor-parallel degree is given. It checks the head "
                   "split of attention alone, not that d_model, the MLP width or the "
                   "vocabulary split over the degree, and not sequence or context "
                   "parallelism.",
    example="h = 12 heads with --tensor-parallel 8.",
    fix="Use a tensor-parallel degree that divides h (and h_kv), or change the head counts.",
    references=(MEGATRON, GQA),
    numbers=(
        NumberSpec("heads", "count", "h, the query heads"),
        NumberSpec("kv_heads", "count", "h_kv, the key/value heads"),
        NumberSpec("tensor_parallel", "count", "the tensor-parallel degree checked"),
        NumberSpec("heads_per_gpu", "count", "h / degree, fractional when it does not shard"),
    ),
    check=_not_divisible_by_tp,
)

RULES = (HEADS_NOT_DIVISIBLE_BY_TENSOR_PARALLEL,)
"""The parallelism rules, in code order."""
