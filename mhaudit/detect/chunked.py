"""Attention computed chunk by chunk over the keys and the queries, by hand, read as one
softmax core.

Memory-efficient attention loops over key chunks: per chunk the scores ``s_c = Q·K_cᵀ``,
their exponential against a normaliser shared across the chunks (a running max, or a
``logsumexp`` of every chunk's scores), ``exp(s_c − m)·V_c`` added into an accumulator
that is rescaled at the end. Each chunk alone looks like a ``kernel`` core (an ``exp`` map
and a product with V) over its own keys. Sibling kernel cores whose Q operands are one
tensor or derive from one by copies, casts, whole slices and elementwise rescales
(``q.clone()``, ``q[:, :, :]``, ``q * scale`` in the loop), whose normalisers together
read at least two of their score products, and whose contexts meet in one sum are one
softmax core over the concatenated keys: n_kv is the sum of the chunks' keys, whatever
their count or sizes.

The loop may also run over query chunks, each a slice of one Q along its query axis:
cores of one form over the same K and V whose Q operands tile that axis and whose
contexts are joined by one ``cat`` along it are one core over all the queries.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from torch import fx

from mhaudit.detect.cores import Core
from mhaudit.detect.operands import is_activation_matmul, matmul_operands
from mhaudit.trace.graphs import arg, shape, tensor_inputs
from mhaudit.trace.ops import (
    CHUNK_JOIN_OPS,
    COPY_VIEW_OPS,
    PROJECTION_OPS,
    RESCALE_OPS,
    SAME_VALUE_OPS,
    SPLIT_OPS,
    op_name,
)
from mhaudit.trace.walks import Walk

_NORMALISER_NODES = 256
"""Nodes walked back from a chunk's normaliser to the score products it reads."""
_VALUE_STEPS = 16
"""Ops walked back from an operand to the tensor it is a copy or rescale of."""


def merge_chunks(cores: list[Core], params: dict[str, str]) -> list[Core]:
    """``cores`` with each set of chunk cores (see the module) replaced by one core over
    all their keys and queries, in graph order."""
    by_q: dict[fx.Node, list[Core]] = defaultdict(list)
    for core in cores:
        if core.form == "kernel":
            by_q[value_root(core.q, views=True)].append(core)
    merged: dict[fx.Node, Core] = {}
    for siblings in by_q.values():
        if len(siblings) > 1:
            one, chunks = _merged(siblings, params)
            merged.update({c.output: one for c in chunks if one is not None})
    return _merge_query_chunks(_replaced(cores, merged))


def _replaced(cores: list[Core], merged: dict[fx.Node, Core]) -> list[Core]:
    """``cores`` with each core whose output ``merged`` maps replaced by that core, once."""
    result: list[Core] = []
    for core in cores:
        one = merged.get(core.output)
        if one is None:
            result.append(core)
        elif not any(r is one for r in result):
            result.append(one)
    return result


def _merged(siblings: list[Core], params: dict[str, str]) -> tuple[Core | None, list[Core]]:
    """One core over the chunks among ``siblings`` that a shared normaliser joins, and
    those chunks (None and no chunks when there is no such core)."""
    scores = {_scores(c, params): c for c in siblings}
    read: set[fx.Node] = set()
    for core in siblings:
        read |= _scores_read(core.masks, set(scores), params)
    chunks = [scores[s] for s in scores if s in read]
    output = _join([c.output for c in chunks]) if len(chunks) > 1 else None
    if output is None:
        return None, []
    first = chunks[0]
    parts = _kv_parts(chunks)
    return replace(first, output=output, form="softmax", map_ops=0, causal=False,
                   seq_len_kv=sum(c.seq_len_kv for c in chunks),
                   masks=tuple(dict.fromkeys(m for c in chunks for m in c.masks)),
                   parts=parts), chunks


def _scores(core: Core, params: dict[str, str]) -> fx.Node | None:
    """The product of ``core.q`` and ``core.k`` (the chunk's scores)."""
    for user in core.q.users:
        if is_activation_matmul(user, params) and core.k in matmul_operands(user):
            return user
    return None


def _scores_read(masks: tuple[fx.Node, ...], scores: set[fx.Node | None],
                 params: dict[str, str]) -> set[fx.Node]:
    """The score products among ``scores`` that the tensors combined with a chunk's scores
    (its normaliser) are computed from."""
    found: set[fx.Node] = set()
    walk: Walk[fx.Node] = Walk(list(masks), _NORMALISER_NODES)
    for node in walk:
        if node in scores:
            found.add(node)
        elif _inside(node, params):
            walk.push(tensor_inputs(node))
    return found


def _inside(node: fx.Node, params: dict[str, str]) -> bool:
    """True for an op that is no input and no projection (the walk from a normaliser
    stays inside the attention)."""
    return node.op == "call_function" and (
        op_name(node) not in PROJECTION_OPS or is_activation_matmul(node, params))


def _join(contexts: list[fx.Node]) -> fx.Node | None:
    """The first node that sums every chunk's context (through adds and rescales, or a
    ``stack`` then a ``sum`` over the stacked axis), then the rescales applied to it;
    None when the contexts never meet."""
    order = {node: i for i, node in enumerate(contexts[0].graph.nodes)}
    reached: list[set[fx.Node]] = []
    for context in contexts:
        walk: Walk[fx.Node] = Walk([context], 16 * len(contexts) + 64)
        for node in walk:
            walk.push(u for u in node.users if op_name(u) in CHUNK_JOIN_OPS | {"stack"})
        reached.append(walk.seen)  # type: ignore[arg-type]
    common = set.intersection(*reached)
    if not common:
        return None
    join: fx.Node | None = min(common, key=order.__getitem__)
    if join is not None and op_name(join) == "stack":
        join = _summed_stack(join)
    while join is not None and len(join.users) == 1 \
            and op_name(next(iter(join.users))) in RESCALE_OPS:
        join = next(iter(join.users))
    return join


def _summed_stack(stack: fx.Node) -> fx.Node | None:
    """The ``sum`` over the stacked axis that ``stack``'s chunks reach through rescales
    (each chunk's context scaled by its share of the normaliser, then summed); None when
    the stack is not summed so."""
    rank = len(shape(stack))
    dim = arg(stack, 1, "dim", 0)
    node = stack
    for _ in range(4):
        users = list(node.users)
        if len(users) != 1 or not rank or not isinstance(dim, int):
            return None
        node = users[0]
        if op_name(node) == "sum":
            summed = arg(node, 1, "dim")
            summed = [summed] if isinstance(summed, int) else list(summed or [])
            return node if [d % rank for d in summed] == [dim % rank] else None
        if op_name(node) not in RESCALE_OPS:
            return None
    return None


def value_root(node: fx.Node, views: bool = False) -> fx.Node:
    """The tensor ``node`` is a copy, cast, whole slice or elementwise rescale of (ops of
    ``SAME_VALUE_OPS`` that keep the shape, following the input of that shape); with
    ``views`` also through views and permutes of the whole tensor."""
    for _ in range(_VALUE_STEPS):
        if node.op != "call_function":
            break
        name = op_name(node)
        same = [i for i in tensor_inputs(node) if shape(i) == shape(node)] \
            if name in SAME_VALUE_OPS else []
        if not same and views and name in COPY_VIEW_OPS:
            same = [i for i in tensor_inputs(node)][:1]
        if not same:
            break
        node = same[0]
    return node


def _kv_parts(cores: list[Core]) -> tuple[fx.Node, ...]:
    """Every K and V node the ``cores`` read (their chunks' when merged), once each."""
    return tuple(dict.fromkeys(n for c in cores for n in (c.parts or (c.k, c.v))))


_Cut = tuple[fx.Node, int, int, int]
"""The tensor a chunk is cut from, the axis it is cut along, the chunk's start and size."""


def _merge_query_chunks(cores: list[Core]) -> list[Core]:
    """``cores`` with each set of query chunks (see the module) replaced by one core."""
    groups: dict[tuple[fx.Node, int, str, frozenset[tuple[object, ...]]],
                 list[tuple[int, Core]]] = defaultdict(list)
    for core in cores:
        rows = _query_rows(core)
        if rows is not None:
            source, axis, start, _ = rows
            kv = frozenset(_region(n) for n in _kv_parts([core]))
            groups[(source, axis, core.form, kv)].append((start, core))
    merged: dict[fx.Node, Core] = {}
    for (source, axis, _, _), chunks in groups.items():
        ordered = [c for _, c in sorted(chunks, key=lambda s: s[0])]
        one = _over_queries(ordered, source, axis) if len(ordered) > 1 else None
        merged.update({c.output: one for c in ordered if one is not None})
    return _replaced(cores, merged)


def _query_rows(core: Core) -> _Cut | None:
    """Where ``core``'s Q is cut from a larger tensor along Q's query axis; None
    otherwise (a cut of the head dim, as per-head slices are, is no query chunk)."""
    cut = _cut(core.q)
    if cut is None:
        return None
    dims = shape(value_root(core.q, views=True))
    head = core.axes[0] % len(dims) if len(shape(core.q)) == len(dims) else None
    source, axis = cut[0], cut[1]
    if cut[3] != core.seq_len_q or axis == head or shape(source)[:axis] != dims[:axis]:
        return None
    return cut


def _cut(node: fx.Node) -> _Cut | None:
    """Where ``node`` is, through copies and views, a ``split``/``chunk`` part or a
    ``slice`` of a larger tensor; None otherwise."""
    cut = value_root(node, views=True)
    name = op_name(cut)
    whole = cut.args[0] if cut.args else None
    if name == "getitem" and isinstance(whole, fx.Node) and op_name(whole) in SPLIT_OPS:
        source, axis, index = whole.args[0], arg(whole, 2, "dim", 0), cut.args[1]
        if not isinstance(source, fx.Node) or not isinstance(index, int) \
                or not isinstance(axis, int):
            return None
        start = sum(shape(p)[axis] for p in _split_parts(whole)[:index])
    elif name in ("slice", "narrow") and isinstance(whole, fx.Node):
        source, axis, start = whole, arg(cut, 1, "dim", 0), arg(cut, 2, "start", 0) or 0
    else:
        return None
    dims = shape(cut)
    if not isinstance(axis, int) or not isinstance(start, int) or not dims:
        return None
    return source, axis % len(dims), start, dims[axis % len(dims)]


def _region(node: fx.Node) -> tuple[object, ...]:
    """What a K or V operand reads: the tensor it copies or views, or the part of one it
    is cut from (the same key chunk split again in each query chunk's loop is one)."""
    cut = _cut(node)
    if cut is None:
        return (value_root(node, views=True),)
    return (value_root(cut[0], views=True), *cut[1:])


def _split_parts(split: fx.Node) -> list[fx.Node]:
    """The ``getitem`` parts of a split, by index."""
    parts = {u.args[1]: u for u in split.users if op_name(u) == "getitem"}
    return [parts[i] for i in sorted(p for p in parts if isinstance(p, int))]


def _over_queries(chunks: list[Core], source: fx.Node, axis: int) -> Core | None:
    """One core over the query chunks ``chunks`` (in order) when they tile ``source``'s
    ``axis`` and one ``cat`` joins their contexts, in that order, along the queries."""
    n_q = sum(c.seq_len_q for c in chunks)
    if shape(source)[axis] != n_q:
        return None
    join = next(iter(chunks[0].output.users), None)
    if join is None or op_name(join) != "cat" or list(tensor_inputs(join)) != [
            c.output for c in chunks]:
        return None
    dims = shape(join)
    dim = arg(join, 1, "dim", 0)
    if not isinstance(dim, int) or not dims or dims[dim % len(dims)] != n_q \
            or dim % len(dims) == chunks[0].axes[2] % len(dims):
        return None  # contexts joined along their head dim are heads, not queries
    return replace(chunks[0], output=join, q=source, seq_len_q=n_q, causal=False,
                   masks=tuple(dict.fromkeys(m for c in chunks for m in c.masks)),
                   parts=_kv_parts(chunks))
