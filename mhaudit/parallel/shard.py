"""Shard arithmetic: elements each rank holds of one tensor under TP and FSDP2."""

from __future__ import annotations

from collections.abc import Sequence

from mhaudit.parallel.roles import COLWISE, EMBEDDING, ROWWISE, TpModule


def ceil_div(a: int, b: int) -> int:
    """⌈a / b⌉ for non-negative a and positive b."""
    return -(-a // b)


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads each TP rank holds: h_kv / t when they split, one full (replicated) head
    once t > h_kv, ⌈h_kv / t⌉ when t does not divide h_kv (an upper bound)."""
    return max(1, ceil_div(kv_heads, tp))


def tp_local_shape(shape: Sequence[int], is_bias: bool, module: TpModule | None,
                   tp: int) -> tuple[int, ...]:
    """Local shape of a weight (out, in) or bias (out,) of ``module`` on one TP rank.

    Column-wise modules split the output dim (⌈out/t⌉ rows, as torch's Shard(0) chunks it;
    K and V keep at least one whole head, replicated, once t > h_kv); row-wise modules
    split the weight's input dim and replicate the bias; anything else is replicated. A
    weight stored (in, out) (``transposed``) has its dims the other way round.
    """
    local = list(shape)
    if module is None or module.replicated or tp == 1 or not local:
        return tuple(local)
    matrix = len(local) == 2 and not is_bias
    if module.role == COLWISE:
        axis = 1 if matrix and module.transposed else 0
        if module.kv_heads and tp > module.kv_heads:
            local[axis] = local[axis] // module.kv_heads * kv_heads_per_rank(module.kv_heads, tp)
        else:
            local[axis] = ceil_div(local[axis], tp)
    elif module.role in (ROWWISE, EMBEDDING) and matrix:
        axis = 0 if module.transposed else 1
        local[axis] = ceil_div(local[axis], tp)
    return tuple(local)


def fsdp_shard_elements(shape: Sequence[int], fsdp: int) -> int:
    """Elements of one rank's FSDP2 shard: dim 0 padded to a multiple of the world size,
    then split evenly (⌈d0 / f⌉ · the other dims); a 0-dim tensor counts as one row."""
    dims = tuple(shape) or (1,)
    rest = 1
    for d in dims[1:]:
        rest *= d
    return ceil_div(dims[0], fsdp) * rest


def elements(shape: Sequence[int]) -> int:
    """Product of the dims (1 for a scalar)."""
    n = 1
    for d in shape:
        n *= d
    return n
