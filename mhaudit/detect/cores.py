"""Find attention cores in a graph: SDPA calls and explicit softmax(QKᵀ)·V chains."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import fx

from mhaudit.detect.composed import composed_map
from mhaudit.detect.flex import flex_core
from mhaudit.detect.operands import (
    Product,
    context_value,
    is_activation_matmul,
    joined_products,
    matmul_operands,
    scores_operands,
    summed_rows,
)
from mhaudit.detect.patterns.bands import chunked_band
from mhaudit.detect.patterns.buffers import written_buffer, written_values
from mhaudit.detect.patterns.logits import extra_columns, head_mix_input
from mhaudit.detect.patterns.masks import masks_causal
from mhaudit.detect.patterns.normalised import key_axis
from mhaudit.detect.patterns.padding import head_dims
from mhaudit.detect.query_axis import query_positions
from mhaudit.trace.flex import FLEX_OP
from mhaudit.trace.graphs import arg, numel, shape, tensor_inputs, val
from mhaudit.trace.ops import (
    BAND_MOVE_OPS,
    LOGIT_MOVE_OPS,
    MAP_COMBINE_OPS,
    PROB_CHUNK_OPS,
    PROB_OPS,
    PROB_RENORM_OPS,
    SCORE_OPS,
    SDPA_OPS,
    SDPA_VARIANTS,
    SOFTMAX_OPS,
    op_name,
)


@dataclass(frozen=True)
class Core:
    """The heart of one attention computation, before projections are resolved."""

    output: fx.Node
    """The context tensor, (…, n_q, d_v) per head."""
    q: fx.Node
    k: fx.Node
    v: fx.Node
    head_dim: int
    v_head_dim: int
    seq_len_q: int
    seq_len_kv: int
    implementation: str
    causal: bool | None
    """True for a causal mask, False for none, None when a mask could not be read."""
    scale: float | None
    masks: tuple[fx.Node, ...]
    """Other tensors combined with the scores (masks, biases, scale tensors)."""
    axes: tuple[int, int, int] = (-1, -1, -1)
    """The head-dim axis of the q, k and v operands (-2 for k when it is Kᵀ)."""
    sinks: int = 0
    """Extra logit columns the softmax runs over (attention sinks)."""
    head_mixing: bool = False
    """True when a head-axis linear map mixes the logits or probabilities."""
    padded_head_dim: int | None = None
    """Head dim the kernel runs at when Q/K/V are zero-padded to it."""
    maps: int = 1
    """Softmax maps combined (picked apart and subtracted) into each map V meets
    (differential attention: 2)."""
    form: str = "softmax"
    """The score form (``mhaudit.data.SCORE_FORMS``)."""
    map_ops: int = 0
    """Elementwise ops per score of a ``kernel`` core's map."""
    global_keys: int = 0
    """Logit columns from another scores product beside the band, read by V (Longformer's
    global tokens as keys); 0 when none."""
    dropout_p: float = 0.0
    """Dropout on the attention weights an SDPA call applies (its ``dropout_p``)."""
    gqa: bool = False
    """SDPA called with ``enable_gqa`` and fewer K/V heads than query heads."""
    band: int | None = None
    """Chunk length 2w when the scores are a band computed over overlapping chunks of 2w
    (stride w, :mod:`~mhaudit.detect.patterns.bands`); ``seq_len_q`` and ``seq_len_kv``
    are then the whole sequence. None for a dense core."""
    window: int | None = None
    """Keys each query sees at most, when the call itself bounds them (a flex_attention
    sliding-window mask); None otherwise (masks are read apart)."""
    visited_fraction: float | None = None
    """Share of the score tiles a block mask visits (flex_attention); None without one."""
    block_mask_read: str | None = None
    """How ``visited_fraction`` was found (:class:`~mhaudit.trace.flex.FlexFacts`)."""
    tied_rows: int = 1
    """Query sequences an einsum's scores also sum over into one map (tied rows)."""
    parts: tuple[fx.Node, ...] = ()
    """Each chunk's K and V when the core is merged from chunks over its keys
    (:mod:`~mhaudit.detect.chunked`); empty otherwise."""
    joined: tuple[Product, ...] = ()
    """Other products added to the scores with their own share of the head dim (Q, K, d_k,
    axes; ``head_dim`` counts them): QKᵀ = q₁k₁ᵀ + q₂k₂ᵀ; empty for one product."""


def find_cores(graph: fx.Graph, params: dict[str, str]) -> list[Core]:
    """Every attention core in graph order; a softmax map composed with another softmax
    map (:mod:`~mhaudit.detect.composed`) is none."""
    cores: list[Core] = []
    for node in graph.nodes:
        name = op_name(node)
        if name in SDPA_OPS:
            core = _sdpa_core(node, name)
        elif name in SOFTMAX_OPS:
            core = _eager_core(node, params)
            core = None if core is None or composed_map(node, params) else core
        elif name == FLEX_OP:
            fields = flex_core(node)
            core = None if fields is None else Core(**fields)
        else:
            continue
        if core is not None:
            cores.append(core)
    return cores


def _sdpa_core(node: fx.Node, name: str) -> Core | None:
    q, k, v = (arg(node, i, n) for i, n in enumerate(("query", "key", "value")))
    if not all(isinstance(t, fx.Node) for t in (q, k, v)):
        return None
    assert isinstance(q, fx.Node) and isinstance(k, fx.Node) and isinstance(v, fx.Node)
    output = node
    if val(node) is None:
        picks = [u for u in node.users if op_name(u) == "getitem" and u.args[1] == 0]
        if not picks:
            return None
        output = picks[0]
    variant = SDPA_VARIANTS[name]
    mask = arg(node, variant.mask_index, "attn_mask") if variant.mask_index is not None else None
    mask = mask if mask is not None else node.kwargs.get("attn_bias", node.kwargs.get("attn_mask"))
    is_causal = bool(arg(node, variant.causal_index, "is_causal", False))
    masks = (mask,) if isinstance(mask, fx.Node) else ()
    dropout = arg(node, variant.dropout_index, "dropout_p", 0.0)
    q_dims, k_dims = shape(q), shape(k)
    gqa = bool(node.kwargs.get("enable_gqa")) and len(q_dims) > 2 and len(k_dims) > 2 \
        and k_dims[-3] != q_dims[-3]
    d_k, d_v, padded = head_dims(q, v)
    scale = node.kwargs.get("scale")
    return Core(
        output=output,
        q=q,
        k=k,
        v=v,
        head_dim=d_k,
        v_head_dim=d_v,
        seq_len_q=shape(q)[-2],
        seq_len_kv=shape(k)[-2],
        implementation="sdpa",
        causal=is_causal or masks_causal(masks, shape(q)[-2], shape(k)[-2]),
        scale=float(scale) if isinstance(scale, (int, float)) else 1.0 / math.sqrt(
            padded or d_k),
        masks=masks,
        padded_head_dim=padded,
        dropout_p=float(dropout) if isinstance(dropout, (int, float)) else 0.0,
        gqa=gqa,
    )


def _eager_core(softmax: fx.Node, params: dict[str, str]) -> Core | None:
    """softmax(QKᵀ)·V over the keys, or over the queries (an assignment of each key to the
    queries, as GroupViT assigns image tokens to group tokens: softmax over dim -2, then
    the weights of each query renormalised over the keys before V)."""
    dims = shape(softmax)
    dim = arg(softmax, 1, "dim", -1)
    if len(dims) < 2 or dim not in (-1, len(dims) - 1, -2, len(dims) - 2):
        return None
    found = _find_scores(softmax.args[0], params)
    if found is None:
        return None
    scores, masks, scale, sinks, mixed, keyed = found
    context, probs, mixed_after, picked = _find_context(softmax, params, widest=bool(keyed))
    if context is None or probs is None:
        return None
    q, k, d_k, qk_axes = scores_operands(scores)
    joined = joined_products(scores, masks, params)
    masks = [m for m in masks if m not in joined]
    d_k += sum(j[2] for j in joined.values())
    v, d_v, v_axis = context_value(context, probs)
    if q is None or k is None or v is None:
        return None
    band = chunked_band(softmax, scores, probs, sinks + keyed)
    if keyed and band is None:  # two scores products side by side are read only for a band
        return None
    n_q, n_kv = (band.queries, band.queries) if band else (dims[-2], dims[-1] - sinks)
    n_q = query_positions(scores, q, params) or n_q  # 'bshc,btc->bsht': s, not h
    keys = key_axis(softmax, probs, context, matmul_operands(context))
    keys = len(dims) - 1 if keys is None or band or sinks else keys
    if keys == len(dims) - 2:  # K·Qᵀ: the queries are the columns, Pᵀ meets V
        q, k, qk_axes, n_q, n_kv = k, q, (qk_axes[1], qk_axes[0]), n_kv, n_q
    return Core(
        output=context,
        q=q,
        k=k,
        v=v,
        head_dim=d_k,
        v_head_dim=d_v,
        seq_len_q=n_q,
        seq_len_kv=n_kv,
        implementation="eager",
        causal=masks_causal(masks, n_q, n_kv),
        scale=scale,
        masks=tuple(masks),
        axes=(*qk_axes, v_axis),
        sinks=sinks,
        head_mixing=mixed or mixed_after,
        maps=_maps(softmax, probs) if picked else 1,
        global_keys=keyed,
        band=band.chunk if band else None,
        form="softmax" if dim % len(dims) == keys else "query_softmax",
        tied_rows=summed_rows(scores),
        joined=tuple(joined.values()),
    )


def _maps(softmax: fx.Node, probs: fx.Node) -> int:
    """Softmax maps per map that meets V, when maps were picked apart and combined."""
    ratio, rest = divmod(numel(softmax), numel(probs) or 1)
    return ratio if ratio > 1 and not rest else 1


_Scores = tuple[fx.Node, list[fx.Node], float | None, int, bool, int]
"""The scores op, masks, scale, extra logit columns, whether heads are mixed, and the
columns of another scores product joined beside it."""


def _find_scores(start: object, params: dict[str, str]) -> _Scores | None:
    """Walk back from softmax's input to an activation matmul (the scores op).

    A buffer the scores are written into is followed to the values written; past it,
    the pads, slices and strided views that move chunked scores into a band are too.
    """
    masks: list[fx.Node] = []
    scale: float | None = None
    sinks, mixed, moved, keyed = 0, False, False, 0
    current = start
    for _ in range(24):
        if not isinstance(current, fx.Node):
            return None
        if is_activation_matmul(current, params):
            return current, masks, scale, sinks, mixed, keyed
        name = op_name(current)
        written = written_values(current)
        if written is not None:
            found = _branch_to_matmul(written, params, moved=True)
            if found is None:
                return None
            current, moved = found, True
            continue
        if moved and name in BAND_MOVE_OPS:
            current = current.args[0]
            continue
        mixing = head_mix_input(current, params)
        if mixing is not None or name in LOGIT_MOVE_OPS:
            mixed = mixed or mixing is not None
            current = mixing if mixing is not None else current.args[0]
            continue
        if name == "cat":
            joined = _cat_branch(current, params)
            if joined is None:
                return None
            current, more_sinks, more_keyed = joined
            sinks, keyed = sinks + more_sinks, keyed + more_keyed
            continue
        if name not in SCORE_OPS:
            return None
        inputs = list(tensor_inputs(current))
        scalars = [a for a in current.args[1:] if isinstance(a, (int, float))]
        if name == "mul" and scalars:
            scale = (scale or 1.0) * float(scalars[0])
        elif name == "div" and scalars and scalars[0]:
            scale = (scale or 1.0) / float(scalars[0])
        nxt = _branch_to_matmul(inputs, params)
        if nxt is None:
            return None
        masks.extend(i for i in inputs if i is not nxt)
        current = nxt
    return None


def _cat_branch(cat: fx.Node, params: dict[str, str]) -> tuple[fx.Node, int, int] | None:
    """The scores part of a last-axis ``cat`` of logits, the columns joined beside it that
    no product scored (sinks), and those another product scored (global keys: then the
    widest part is the scores'); None when no part is scores."""
    parts = list(tensor_inputs(cat))
    scored = [p for p in parts if _reaches_matmul(p, params, 10)]
    if len(scored) > 1:
        widest = max(scored, key=lambda p: (shape(p) or (0,))[-1])
        keyed = extra_columns(cat, widest)
        return (widest, 0, keyed) if keyed else None
    extra = extra_columns(cat, scored[0]) if scored else 0
    return (scored[0], extra, 0) if extra else None


def _branch_to_matmul(inputs: list[fx.Node], params: dict[str, str],
                      moved: bool = False) -> fx.Node | None:
    """The input whose ancestry reaches an activation matmul through score ops (and,
    when ``moved``, the ops that move written scores into a band)."""
    for candidate in inputs:
        if _reaches_matmul(candidate, params, 10, moved):
            return candidate
    return None


def _reaches_matmul(node: fx.Node, params: dict[str, str], depth: int,
                    moved: bool = False) -> bool:
    if is_activation_matmul(node, params):
        return True
    if depth == 0:
        return False
    mixing = head_mix_input(node, params)
    if mixing is not None:
        return _reaches_matmul(mixing, params, depth - 1, moved)
    written = written_values(node)
    if written is not None:
        return any(_reaches_matmul(w, params, depth - 1, True) for w in written)
    if moved and op_name(node) in BAND_MOVE_OPS and isinstance(node.args[0], fx.Node):
        return _reaches_matmul(node.args[0], params, depth - 1, moved)
    if op_name(node) not in SCORE_OPS | LOGIT_MOVE_OPS | {"cat"}:
        return False
    return any(_reaches_matmul(i, params, depth - 1, moved) for i in tensor_inputs(node))


def _find_context(
    softmax: fx.Node, params: dict[str, str], widest: bool = False
) -> tuple[fx.Node | None, fx.Node | None, bool, bool]:
    """Walk forward from softmax to the matmul that applies the probabilities to V.

    Also says whether a head-axis map mixes the probabilities on the way, and whether
    maps are picked apart (``select``) and combined (``sub``) before V. Pads and strided
    views (probabilities moved from a band back into chunks) are followed, and so are
    writes of the probabilities into a buffer, to the buffer's readers. The nearest
    such matmul is taken, or with ``widest`` the one that reads the most probabilities
    (the band's, beside the global keys' columns).
    """
    found: list[tuple[fx.Node, fx.Node, bool, bool]] = []
    frontier = [(softmax, False, False)]
    for _ in range(12):
        nxt: list[tuple[fx.Node, bool, bool]] = []
        for node, mixed, picked in frontier:
            for user in node.users:
                if is_activation_matmul(user, params):
                    operands = matmul_operands(user)
                    if (operands and operands[0] is node) or (
                            len(operands) == 2 and operands[1] is node
                            and (swaps_last_two(node)  # V·Pᵀ: channels-first heads
                                 or op_name(user) == "einsum")):
                        found.append((user, node, mixed, picked))
                        if not widest:
                            return found[0]
                elif head_mix_input(user, params) is node:
                    nxt.append((user, True, picked))
                elif op_name(user) in PROB_OPS | LOGIT_MOVE_OPS | PROB_RENORM_OPS | PROB_CHUNK_OPS:
                    nxt.append((user, mixed, picked))
                elif (buffer := written_buffer(user, node)) is not None:
                    nxt.append((buffer, mixed, picked))
                elif op_name(user) in MAP_COMBINE_OPS:
                    nxt.append((user, mixed, True))
        frontier = nxt
    if found:
        return max(found, key=lambda f: numel(f[1]))
    return None, None, False, False


def swaps_last_two(node: fx.Node) -> bool:
    """``node`` is ``x.transpose(-1, -2)`` of a rank-≥2 tensor, or a ``permute`` that swaps
    its last two axes and keeps the others (``x.permute(0, 2, 1)``)."""
    rank = len(shape(node))
    if op_name(node) == "permute" and len(node.args) >= 2 and rank >= 2:
        order = [d % rank for d in node.args[1] if isinstance(d, int)] \
            if isinstance(node.args[1], (list, tuple)) else []
        return order == [*range(rank - 2), rank - 1, rank - 2]
    if op_name(node) != "transpose" or len(node.args) < 3:
        return False
    dims = {d % rank for d in node.args[1:3] if isinstance(d, int)} if rank >= 2 else set()
    return dims == {rank - 1, rank - 2}
