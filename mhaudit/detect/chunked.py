"""Attention computed chunk by chunk over the keys, by hand, read as one softmax core.

Memory-efficient attention loops over key chunks: per chunk the scores ``s_c = Q·K_cᵀ``,
their exponential against a normaliser shared across the chunks (a running max, or a
``logsumexp`` of every chunk's scores), ``exp(s_c − m)·V_c`` added into an accumulator
that is rescaled at the end. Each chunk alone looks like a ``kernel`` core (an ``exp`` map
and a product with V) over its own keys. Sibling kernel cores that read the same Q node,
whose normalisers together read at least two of their score products, and whose
contexts meet in one sum are one softmax core over the concatenated keys: n_kv is the
sum of the chunks' keys, whatever their count or sizes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from torch import fx

from mhaudit.detect.cores import Core
from mhaudit.detect.operands import is_activation_matmul, matmul_operands
from mhaudit.trace.graphs import tensor_inputs
from mhaudit.trace.ops import CHUNK_JOIN_OPS, PROJECTION_OPS, RESCALE_OPS, op_name
from mhaudit.trace.walks import Walk

_NORMALISER_NODES = 256
"""Nodes walked back from a chunk's normaliser to the score products it reads."""


def merge_chunks(cores: list[Core], params: dict[str, str]) -> list[Core]:
    """``cores`` with each set of chunk cores (see the module) replaced by one softmax
    core over all their keys, in graph order."""
    by_q: dict[fx.Node, list[Core]] = defaultdict(list)
    for core in cores:
        if core.form == "kernel":
            by_q[core.q].append(core)
    merged: dict[fx.Node, Core] = {}
    for siblings in by_q.values():
        if len(siblings) > 1:
            one, chunks = _merged(siblings, params)
            merged.update({c.output: one for c in chunks if one is not None})
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
    parts = tuple(dict.fromkeys(n for c in chunks for n in (c.k, c.v)))
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
    """The first node that sums every chunk's context (through adds and rescales), then
    the rescales applied to it; None when the contexts never meet."""
    order = {node: i for i, node in enumerate(contexts[0].graph.nodes)}
    reached: list[set[fx.Node]] = []
    for context in contexts:
        walk: Walk[fx.Node] = Walk([context], 16 * len(contexts) + 64)
        for node in walk:
            walk.push(u for u in node.users if op_name(u) in CHUNK_JOIN_OPS)
        reached.append(walk.seen)  # type: ignore[arg-type]
    common = set.intersection(*reached)
    if not common:
        return None
    join = min(common, key=order.__getitem__)
    while len(join.users) == 1 and op_name(next(iter(join.users))) in RESCALE_OPS:
        join = next(iter(join.users))
    return join
