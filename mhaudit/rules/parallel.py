"""Parallelism rules MHA008 and MHA011: head counts that do not shard over the tensor-parallel
degree, and KV heads replicated on every rank once the degree exceeds them."""

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

def _replicated_kv(block: AttentionBlock, ctx: RuleContext) -> Hit | None:
    lay = block.layout
    tp, kv = ctx.tensor_parallel, lay.num_kv_heads
    if (tp is None or kv <= 0 or tp <= kv or lay.latent_width is not None
            or not _shards(lay, tp) or block.memory.kv_cache_bytes_per_token == 0):
        return None
    cache_head = block.memory.kv_cache_bytes // kv
    weights = sum(p.params for p in (lay.k, lay.v) if p is not None) // kv * ctx.element_bytes
    per_rank = cache_head + weights
    even = per_rank * kv // tp
    copies = tp // kv
    group = (tp - kv) * per_rank
    return Hit(
        f"tensor-parallel degree {tp} exceeds h_kv = {kv}: each rank holds one whole KV head "
        f"({units.nbytes(cache_head)} of cache at {units.count(lay.batch_size)} × "
        f"{units.count(lay.seq_len_kv)} tokens and {units.nbytes(weights)} of W_K, W_V), "
        f"{copies} copies of each head, where an even split is {units.nbytes(even)} per rank; "
        f"each group of {lay.num_heads // kv} query heads is split over {copies} ranks",
        {"kv_heads": kv, "tensor_parallel": tp, "copies": copies,
         "kv_bytes_per_rank": per_rank, "replicated_bytes_per_rank": per_rank - even,
         "group_copy_bytes": group},
        fix=(f"Use h_kv = {tp} at t = {tp}: the same {units.nbytes(per_rank)} per rank then "
             f"holds distinct heads and the {tp} ranks stop storing {units.nbytes(group)} of "
             f"copies; or keep h_kv = {kv} and run attention at t = {kv}."),
    )


KV_HEADS_REPLICATED_BY_TENSOR_PARALLEL = Rule(
    code="MHA011", name="kv-heads-replicated-by-tensor-parallel", severity=Severity.WARNING,
    since="0.1.0",
    summary="With --tensor-parallel N larger than the KV heads h_kv, every rank keeps a whole "
            "copy of one KV head's cache and weights.",
    why="Column-wise TP hands each rank h_kv/N KV heads; below one, a head cannot be split, "
        "so it is replicated N/h_kv times. Each rank then holds and reads a full head of "
        "KV cache per token, and a GQA group's query heads are split over ranks that all "
        "carry the same K/V: the tensor-parallel group stores N − h_kv heads of copies.",
    known_problems="Counts the cache at the audited batch and key length, and the K/V "
                   "weights at the audited dtype. Latent attention, whose shared latent "
                   "every rank keeps whole by design, is not flagged; nor are degrees that "
                   "do not shard at all (MHA008).",
    example="h = 64, h_kv = 8 with --tensor-parallel 16.",
    fix="Make h_kv a multiple of the tensor-parallel degree, or run attention at a degree "
        "no larger than h_kv.",
    references=(MEGATRON, GQA),
    numbers=(
        NumberSpec("kv_heads", "count", "h_kv, the key/value heads"),
        NumberSpec("tensor_parallel", "count", "the tensor-parallel degree checked"),
        NumberSpec("copies", "count", "ranks holding each KV head (t / h_kv)"),
        NumberSpec("kv_bytes_per_rank", "bytes",
                   "one KV head's cache at the audited shape plus its W_K and W_V"),
        NumberSpec("replicated_bytes_per_rank", "bytes",
                   "kv_bytes_per_rank minus the even share h_kv / t of a head"),
        NumberSpec("group_copy_bytes", "bytes",
                   "bytes the t ranks hold beyond one copy of each head: (t − h_kv) heads"),
    ),
    check=_replicated_kv,
)

RULES = (HEADS_NOT_DIVISIBLE_BY_TENSOR_PARALLEL, KV_HEADS_REPLICATED_BY_TENSOR_PARALLEL)
"""The parallelism rules, in code order."""
