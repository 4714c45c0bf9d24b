"""Cores whose scores are no n×n softmax: kernel maps, linear states, pooled scores, channels."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from torch import fx

from mhaudit.detect.cores import Core, find_cores, swaps_last_two
from mhaudit.detect.operands import (
    context_value,
    is_activation_matmul,
    matmul_operands,
    scores_operands,
)
from mhaudit.detect.patterns.masks import masks_causal
from mhaudit.detect.sources.walker import Source
from mhaudit.detect.summed import summed_core
from mhaudit.trace.graphs import arg, param_root, shape, tensor_inputs
from mhaudit.trace.ops import (
    KERNEL_MAP_OPS,
    KERNEL_PATH_OPS,
    POOLED_PASS_OPS,
    SOFTMAX_OPS,
    op_name,
)

_MAX_STEPS = 16


def find_all_cores(graph: fx.Graph, params: dict[str, str]) -> list[Core]:
    """Every attention core in graph order: softmax cores, then the other score forms."""
    cores = find_cores(graph, params)
    taken = {c.output for c in cores}
    for node in graph.nodes:
        found = (_separable_core(node, params) or summed_core(node, params)) \
            if op_name(node) in SOFTMAX_OPS else (
            _kernel_core(node, params) or _linear_core(node, params)
            if is_activation_matmul(node, params) else None)
        if found is not None and found.output not in taken:
            taken.add(found.output)
            cores.append(found)
    order = {node: index for index, node in enumerate(graph.nodes)}
    return sorted(cores, key=lambda c: order[c.output])


def over_channels(core: Core, sources: dict[str, tuple[Source, ...]]) -> Core:
    """``core`` as channel attention when Q's and K's head-dim axis is their projections'
    token axis: the scores are d_k×d_k per head, contracted over the n tokens.

    The core read the token axis as its head dim and the channels as its positions; the
    layout swaps them back (channels per head become the head dim, tokens the lengths).
    """
    projected = [s for role in ("q", "k") for s in sources[role] if s.projection is not None]
    if not projected or not all(s.over_tokens for s in projected):
        return core
    return replace(core, form="channel", head_dim=core.seq_len_q, v_head_dim=core.seq_len_kv,
                   seq_len_q=core.v_head_dim, seq_len_kv=core.head_dim, causal=False,
                   padded_head_dim=None)


def _kernel_core(context: fx.Node, params: dict[str, str]) -> Core | None:
    """P·V where P is QKᵀ through elementwise maps, one of them nonlinear or a product
    with an n_q×n_kv matrix of the positions, and no softmax (YOSO's (1 − acos(q·k)/π)^τ,
    sigmoid or ReLU attention, retention's decay mask D); P·V may be an einsum whose
    first operand is P."""
    operands = matmul_operands(context)
    if op_name(context) not in ("matmul", "bmm", "einsum") or len(operands) != 2:
        return None
    current, masks, maps, nonlinear = operands[0], [], 0, False
    for _ in range(_MAX_STEPS):
        if is_activation_matmul(current, params):
            break
        name = op_name(current)
        if name not in KERNEL_PATH_OPS:
            return None
        inputs = [i for i in tensor_inputs(current) if param_root(i, params) is None]
        branch = next((i for i in inputs if _reaches(i, params, _MAX_STEPS)), None)
        if branch is None:
            return None
        others = [i for i in inputs if i is not branch]
        masks.extend(others)
        if name in KERNEL_MAP_OPS or (not others and name in ("div", "mul", "add", "sub", "rsub",
                                                            "neg", "reciprocal")):
            maps += 1  # one op per score; masks multiplied in are not the map
        nonlinear = nonlinear or name in KERNEL_MAP_OPS or (name == "mul" and any(
            shape(o)[-2:] == shape(current)[-2:] and len(shape(o)) >= 2 for o in others))
        current = branch
    else:
        return None
    dims = shape(current)
    if not nonlinear or len(dims) < 2:
        return None
    q, k, d_k, axes = scores_operands(current)
    v, d_v, v_axis = context_value(context, operands[0])
    if q is None or k is None or v is None:
        return None
    return Core(output=context, q=q, k=k, v=v, head_dim=d_k, v_head_dim=d_v,
                seq_len_q=dims[-2], seq_len_kv=dims[-1], implementation="eager",
                causal=masks_causal(masks, dims[-2], dims[-1]), scale=None,
                masks=tuple(masks),
                axes=(*axes, v_axis), form="kernel", map_ops=maps)


def _linear_core(context: fx.Node, params: dict[str, str]) -> Core | None:
    """φ(Q)·S where the state S = φ(K)ᵀV is a product over the tokens, computed first
    (linear attention). Row-major, K enters S transposed: (…, d_k, n) @ (…, n, d_v), and
    the context is Q @ S. Channels-first (Q, K, V as (…, d, n)), V enters S transposed:
    S = K @ Vᵀ, and the context is Sᵀ @ Q, (…, d_v, n) (efficient attention).
    """
    operands = [a for a in context.args[:2] if isinstance(a, fx.Node)]
    if op_name(context) not in ("matmul", "bmm") or len(operands) != 2:
        return None
    rows = _state(operands[1], params)
    cols = _state(operands[0].args[0], params) if swaps_last_two(operands[0]) else None
    if rows is not None and op_name(rows[0]) in ("transpose", "permute"):
        q, (k, v), axes = operands[0], rows, (-1, -2, -1)
    elif cols is not None and swaps_last_two(cols[1]):
        q, (k, v), axes = operands[1], cols, (-2, -2, -1)
    else:
        return None
    q_dims, k_dims, v_dims = shape(q), shape(k), shape(v)
    if len(q_dims) < 2 or len(k_dims) < 2 or len(v_dims) < 2 or k_dims[-1] != v_dims[-2]:
        return None
    return Core(output=context, q=q, k=k, v=v, head_dim=q_dims[axes[0]], v_head_dim=v_dims[-1],
                seq_len_q=q_dims[-2 if axes[0] == -1 else -1], seq_len_kv=v_dims[-2],
                implementation="eager", causal=False, scale=None, masks=(), axes=axes,
                form="linear")


def _state(node: object, params: dict[str, str]) -> tuple[fx.Node, fx.Node] | None:
    """The two operands of the activation product ``node`` is, through pass-through ops."""
    state = node
    for _ in range(_MAX_STEPS):
        if not isinstance(state, fx.Node) or is_activation_matmul(state, params) \
                or op_name(state) not in POOLED_PASS_OPS:
            break
        state = state.all_input_nodes[0]
    if not isinstance(state, fx.Node) or not is_activation_matmul(state, params) \
            or op_name(state) not in ("matmul", "bmm"):
        return None
    pair = [a for a in state.args[:2] if isinstance(a, fx.Node)]
    return (pair[0], pair[1]) if len(pair) == 2 else None


def _reaches(node: fx.Node, params: dict[str, str], depth: int) -> bool:
    if is_activation_matmul(node, params):
        return True
    if depth == 0 or op_name(node) not in KERNEL_PATH_OPS:
        return False
    return any(_reaches(i, params, depth - 1) for i in tensor_inputs(node)
               if param_root(i, params) is None)


def _separable_core(softmax: fx.Node, params: dict[str, str]) -> Core | None:
    """One score per token: softmax(s) (s has a size-1 feature axis f) times an activation X
    wider along f, summed over the token axis t into a context vector that multiplies
    another activation Y: separable (MobileViTv2) and additive (SwiftFormer) attention."""
    scores, logits = shape(softmax), softmax.args[0]
    weighted = _pass_to(softmax, "mul")
    if weighted is None or not scores or not isinstance(logits, fx.Node):
        return None
    keys = _other_operand(weighted[0], weighted[1], params)
    rank = len(scores)
    width_axes = [f for f in range(rank) if scores[f] == 1 and len(shape(keys)) == rank
                  and shape(keys)[f] > 1] if keys is not None else []
    pooled = _pass_to(weighted[0], "sum")
    if keys is None or not width_axes or pooled is None:
        return None
    token = _summed_axis(pooled[0], rank)
    f = width_axes[0]
    if token is None or token == f or shape(keys)[token] != scores[token]:
        return None
    dim = arg(softmax, 1, "dim", -1)
    if isinstance(dim, int) and dim % rank not in (token, f):
        return None
    combined = _pass_to(pooled[0], "mul")
    values = _other_operand(combined[0], combined[1], params) if combined else None
    if combined is None or values is None or len(shape(values)) != rank:
        return None
    k_dims, v_dims = shape(keys), shape(values)
    return Core(output=combined[0], q=logits, k=keys, v=values,
                head_dim=k_dims[f], v_head_dim=v_dims[f], seq_len_q=v_dims[token],
                seq_len_kv=k_dims[token], implementation="eager", causal=False, scale=None,
                masks=(), axes=(f - rank, f - rank, f - rank), form="separable")


def _pass_to(start: fx.Node, name: str) -> tuple[fx.Node, fx.Node] | None:
    """The first ``name`` op ``start`` reaches through pass-through ops, and its operand
    on that path."""
    frontier = [start]
    for _ in range(_MAX_STEPS):
        nxt: list[fx.Node] = []
        for node in frontier:
            for user in node.users:
                if op_name(user) == name:
                    return user, node
                if op_name(user) in POOLED_PASS_OPS:
                    nxt.append(user)
        frontier = nxt
    return None


def _other_operand(node: fx.Node, mine: fx.Node, params: dict[str, str]) -> fx.Node | None:
    """The other tensor operand of a binary op: an activation, not a parameter."""
    others: Iterable[fx.Node] = (i for i in tensor_inputs(node) if i is not mine)
    found = next(iter(others), None)
    return found if found is not None and param_root(found, params) is None else None


def _summed_axis(node: fx.Node, rank: int) -> int | None:
    """The one axis a ``sum`` reduces (None for several or for all)."""
    dims = arg(node, 1, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    return dims[0] % rank if len(dims) == 1 and isinstance(dims[0], int) else None
