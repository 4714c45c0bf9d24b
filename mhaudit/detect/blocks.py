"""Detect stage: an fx graph becomes attention-block layouts, by what the graph computes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from torch import fx, nn

from mhaudit.data import Layout, Projection
from mhaudit.detect.chunked import merge_chunks
from mhaudit.detect.cores import Core
from mhaudit.detect.forms import find_all_cores, over_channels
from mhaudit.detect.kv_transforms import with_kv_transforms
from mhaudit.detect.patterns.explicit import call_facts
from mhaudit.detect.patterns.kv_cache import (
    cached_elements_per_position,
    latent_elements_per_position,
)
from mhaudit.detect.patterns.routed import routed_query_heads
from mhaudit.detect.patterns.score_bias import score_bias_names
from mhaudit.detect.patterns.scores import score_dtype
from mhaudit.detect.patterns.streams import stream_outputs
from mhaudit.detect.patterns.windows import chunk_count
from mhaudit.detect.score_maps import with_score_maps
from mhaudit.detect.sources.joined import reads_apart, role_sources
from mhaudit.detect.sources.projections import ProjectionOp, canonical_input, find_output_projection
from mhaudit.detect.sources.sequence import derived_copy, one_sequence
from mhaudit.detect.sources.shared_output import context_slice
from mhaudit.detect.sources.walker import Source, SourceWalker
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.graphs import numel, shape, submodule, tokens

_ROLES = ("q", "k", "v")


@dataclass(frozen=True)
class _Draft:
    core: Core
    sources: dict[str, tuple[Source, ...]]
    """Each role's parts, widest first."""
    o: ProjectionOp | None
    outputs: tuple[ProjectionOp, ...] = ()
    """Every output projection (one per stream for joint attention)."""


def detect(traced: TracedGraph, model: nn.Module, read: list[Core] | None = None
           ) -> list[Layout]:
    """Every attention block in the graph, in graph order; ``read`` gets the cores they
    are made of (:mod:`mhaudit.detect.unread` lists the others)."""
    params = traced.params
    walker = SourceWalker(params, frozenset(traced.user_inputs))
    groups: dict[object, list[_Draft]] = defaultdict(list)
    for found in merge_chunks(find_all_cores(traced.graph, params), params):
        sources = {
            role: role_sources(walker, found, role, axis)
            for role, axis in zip(_ROLES, found.axes, strict=True)
        }
        core = over_channels(found, sources)
        joint = any(s.stream for parts in sources.values() for s in parts)
        outs = tuple(stream_outputs(core.output, params, walker.cache)) if joint else ()
        o = outs[0] if outs else find_output_projection(core.output, params, walker.cache)
        groups[o.node if o is not None else core.output].append(
            _Draft(core, sources, o, outs or ((o,) if o else ())))
    layouts = [_layout(_context_columns(drafts), traced, model) for drafts in groups.values()]
    layouts = _with_score_biases(layouts, list(groups.values()), traced, walker)
    sizes = {n.name: numel(n) for n in traced.graph.nodes if n.op == "placeholder"}
    layouts = with_score_maps(layouts, [[d.core for d in ds] for ds in groups.values()],
                              params, sizes)
    layouts = with_kv_transforms(layouts, [[(d.core, d.sources, d.o) for d in ds]
                                           for ds in groups.values()], walker.projection)
    kept = [(lay, drafts) for lay, drafts in zip(layouts, groups.values(), strict=True)
            if _readable(lay)]
    if read is not None:
        read.extend(d.core for _, drafts in kept for d in drafts)
    return _unique_names([lay for lay, _ in kept])


def _query_rows(draft: _Draft) -> int:
    """Token rows the queries are projected from: the first source's, summed over the
    streams of joint attention (each stream projects its own tokens, so one stream's rows
    over the joint sequence would undercount the batch)."""
    first: dict[object, Source] = {}
    for source in draft.sources["q"]:
        first.setdefault(source.stream, source)
    return sum(s.projection.rows if s.projection else tokens(s.root) for s in first.values())


def _context_columns(drafts: list[_Draft]) -> list[_Draft]:
    """Output projections shared with another branch keep the columns that read a context."""
    contexts = [d.core.output for d in drafts]
    return [replace(d, o=context_slice(d.o, contexts) if d.o else None,
                    outputs=tuple(context_slice(p, contexts) for p in d.outputs))
            for d in drafts]


def _with_score_biases(layouts: list[Layout], groups: list[list[_Draft]],
                       traced: TracedGraph, walker: SourceWalker) -> list[Layout]:
    """Each layout with the elements of its score-bias parameters; a table that several
    blocks read (T5's layer-0 bias, DeBERTa's shared relative embeddings) counts in the
    first block that reads it."""
    sizes = {n.name: numel(n) for n in traced.graph.nodes if n.op == "placeholder"}
    seen: set[str] = set()
    result = []
    for layout, drafts in zip(layouts, groups, strict=True):
        ops = [op for d in drafts for op in _own_projections(d)]
        cores = [(d.core.q, d.core.k, d.core.masks) for d in drafts]
        read = score_bias_names(cores, ops, traced.params, walker.cache)
        fresh = read - seen
        seen |= fresh
        tables = tuple(sorted((traced.params.get(n, n), sizes.get(n, 0)) for n in read))
        result.append(replace(layout, score_bias_params=sum(sizes.get(n, 0) for n in fresh),
                              score_bias_tables=tables))
    return result


def _own_projections(draft: _Draft) -> list[ProjectionOp]:
    """Every projection the draft's roles read (down-projections included) and its O."""
    ops = list(draft.outputs)
    pending = [s for parts in draft.sources.values() for s in parts]
    while pending:
        source = pending.pop()
        if source.projection is not None:
            ops.append(source.projection)
        pending.extend(source.upstream)
    return ops


def _readable(layout: Layout) -> bool:
    """A layout whose heads and widths were all read (a size the graph left unknown, as
    for a data-dependent shape, reads as 0): the others are not reported as blocks."""
    return min(layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.v_head_dim,
               layout.d_model, layout.seq_len_q, layout.seq_len_kv, layout.batch_size) >= 1


def _heads(parts: tuple[Source, ...], head_dim: int) -> int:
    """Distinct heads of one operand.

    Parts joined along the head dim each have their own heads (DeepSeek's k_nope
    has h, its shared rope part 1): the operand has the most of them. Streams joined
    along the sequence (joint attention) share the heads.
    """
    streams = {p.stream for p in parts}
    if len(streams) > 1:
        return max(_heads(tuple(p for p in parts if p.stream == s), head_dim) for s in streams)
    if len(parts) > 1 and all(p.part_dim for p in parts):
        return max(p.heads for p in parts)
    return sum(p.width for p in parts) // head_dim if head_dim else 0


def _layout(drafts: list[_Draft], traced: TracedGraph, model: nn.Module) -> Layout:
    """Merge the cores that share one output projection (per-head modules) into a block."""
    first = drafts[0].core
    d_k, d_v = first.head_dim, first.v_head_dim
    roles, kv_shared = _attribute(drafts, traced)
    o = drafts[0].o
    o_role = _merge([(_projection(p, p.out_width, traced, p.weight_numel, p.bias_numel), True)
                     for p in drafts[0].outputs])
    q_source = drafts[0].sources["q"][0]
    d_model = roles["q"].in_features if roles["q"] else (shape(q_source.root) or (0,))[-1]
    rows = _query_rows(drafts[0])
    windows = chunk_count([(s.projection.weight, s.projection.node) for d in drafts
                           for s in d.sources["q"] if s.projection is not None])
    batch = (max(1, rows // first.seq_len_q) if first.seq_len_q else 1) * windows
    streams = max(len({s.stream for s in d.sources[r]}) for d in drafts for r in _ROLES)
    owners = [p.module for p in (*roles.values(), o_role) if p is not None]
    name = _common_module(owners) if owners else traced.module_path(first.output)
    return Layout(
        name=name,
        module_type=_module_type(model, name),
        kind=_kind(drafts[0], traced),
        implementation=first.implementation,
        d_model=d_model,
        num_heads=_role_heads(drafts, "k", d_k) if first.form == "separable" else (
            _query_heads(drafts, d_k)),
        num_kv_heads=_role_heads(drafts, "k", d_k) // first.maps,
        head_dim=d_k,
        v_head_dim=d_v,
        batch_size=batch,
        seq_len_q=first.seq_len_q,
        seq_len_kv=first.seq_len_kv,
        d_out=o.out_width if o else d_model,
        causal=first.causal,
        scale=first.scale,
        q=roles["q"],
        k=roles["k"],
        v=roles["v"],
        o=o_role,
        kv_shared=kv_shared,
        core_count=len(drafts),
        cached_width=cached_elements_per_position(
            (first.k, first.v), traced.params, batch * first.seq_len_kv
        ),
        sinks=max(d.core.sinks for d in drafts),
        head_mixing=any(d.core.head_mixing for d in drafts),
        padded_head_dim=first.padded_head_dim,
        windowed=first.seq_len_q if windows > 1 else None,
        streams=streams,
        window_chunk=first.band,
        global_keys=first.global_keys,
        score_dtype=score_dtype(first.output) if first.implementation == "eager" else None,
        latent_width=latent_elements_per_position(
            (first.k, first.v), traced.params, batch * first.seq_len_kv, first.q
        ),
        score_form=first.form, score_map_ops=first.map_ops,
        tied_rows=first.tied_rows,
        visited_fraction=first.visited_fraction, block_mask_read=first.block_mask_read,
        **call_facts(first, traced.user_inputs),
    )


_Claim = tuple[str, Source, object]
"""(role, source, key): key is None for a direct read, else the up-projection a
down-projection feeds (one claim however many roles read through that chain)."""


def _claims(drafts: list[_Draft]) -> dict[fx.Node, list[_Claim]]:
    """Who reads each projection. A role that reads one projection in several cores
    (block-sparse attention split into pieces) makes one claim, its widest read; reads
    cut apart by different ops (two halves of each head) are claims of their own. The
    same weight called again for the same role (one call per window) is one claim."""
    uses: dict[fx.Node, dict[tuple[str, object, frozenset[fx.Node]], _Claim]] = defaultdict(
        dict)
    called: dict[tuple[str, str, int], fx.Node] = {}

    def claim(node: fx.Node, role: str, source: Source, key: object) -> None:
        assert source.projection is not None
        again = called.setdefault((source.projection.weight, role, source.width), node)
        if again is not node and key is None:
            return
        held = uses[node].get((role, key, source.cuts))
        if held is None or source.width > held[1].width:
            uses[node][(role, key, source.cuts)] = (role, source, key)

    for draft in drafts:
        for role in _ROLES:
            for source in draft.sources[role]:
                if source.projection is None:
                    continue
                claim(source.projection.node, role, source, None)
                down = source
                while down.upstream and down.projection is not None:
                    up = down.upstream[0]
                    if up.projection is not None:
                        claim(up.projection.node, role, up, down.projection.node)
                    down = up
    return {node: list(held.values()) for node, held in uses.items()}


def _query_heads(drafts: list[_Draft], head_dim: int) -> int:
    """Heads of Q: its projections' heads, or those routed experts lay side by side."""
    first = drafts[0]
    routed = routed_query_heads(first.core.q, first.sources["q"], first.sources["k"], head_dim,
                                first.core.seq_len_q == first.core.seq_len_kv)
    if len(drafts) == 1 and routed is not None:
        return routed // first.core.maps
    return _role_heads(drafts, "q", head_dim) // first.core.maps


def _role_heads(drafts: list[_Draft], role: str, head_dim: int) -> int:
    """Heads of a role over merged cores: cores reading distinct projections, or distinct
    spans of one (a loop over head slices), add up; others are pieces of one read."""
    by_source: dict[tuple[object, ...], int] = {}
    for draft in drafts:
        parts = draft.sources[role]
        key = tuple((p.projection.weight if p.projection else p.root, p.span) for p in parts)
        by_source[key] = max(by_source.get(key, 0), _heads(parts, head_dim))
    return sum(by_source.values())


def _attribute(
    drafts: list[_Draft], traced: TracedGraph
) -> tuple[dict[str, Projection | None], bool]:
    """Split each projection's weight among the roles that read it, each weight once.

    A fused QKV weight is shared out by the width each role uses. When the roles
    reading one projection use more than its width, they read the same values
    (e.g. K and V from one projection), and the weight is counted for the first.
    A down-projection that feeds an up-projection read by several roles (DeepSeek's
    kv_a feeding kv_b, read by K and V) is one claim, counted for the first role.
    """
    parts: dict[str, list[tuple[Projection, bool]]] = defaultdict(list)
    shared_roles: set[str] = set()
    for claims in _claims(drafts).values():
        op = claims[0][1].projection
        assert op is not None
        repeats = [key is not None and key in {c[2] for c in claims[:index]}
                   for index, (_, _, key) in enumerate(claims)]
        overlapping = sum(src.width for (_, src, _), rep in zip(claims, repeats, strict=True)
                          if not rep) > op.out_width
        for index, ((role, src, key), repeat) in enumerate(zip(claims, repeats, strict=True)):
            shared = repeat or (overlapping and index > 0
                                and not reads_apart(src, [c[1] for c in claims[:index]]))
            if shared and key is None:
                shared_roles.add(role)
            weight = 0 if shared else op.weight_numel * src.width // op.out_width
            bias = 0 if shared else op.bias_of(src.span, src.width) + src.extra_bias
            rank = src.upstream[0].width if src.upstream and key is None else 0
            in_width = src.chain_in_width if key is None else op.in_width
            parts[role].append((_projection(op, src.width, traced, weight, bias, in_width, rank),
                                key is None))
    merged = {role: _merge(parts[role]) for role in _ROLES}
    return merged, "v" in shared_roles


def _projection(
    op: ProjectionOp, width: int, traced: TracedGraph, weight: int, bias: int,
    in_width: int | None = None, rank: int = 0,
) -> Projection:
    """The role's projection; its module is the one that ran the matmul.

    A weight tied between two modules has one parameter name, but each module
    that uses it is its own place in the model.
    """
    fqn = traced.params.get(op.weight, op.weight)
    known = bool(op.matmul.meta.get("nn_module_stack"))
    return Projection(
        module=traced.module_path(op.matmul) if known else fqn.rpartition(".")[0],
        weight=fqn,
        in_features=op.in_width if in_width is None else in_width,
        out_features=width,
        fused_width=op.out_width,
        weight_params=weight,
        bias_params=bias,
        low_rank_width=rank,
        groups=op.groups,
    )


def _merge(parts: list[tuple[Projection, bool]]) -> Projection | None:
    """One role's projection from its parts; down-projections add only their params."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0][0]
    every = [p for p, _ in parts]
    main = [p for p, direct in parts if direct] or every
    weights = sorted(dict.fromkeys(p.weight for p in every))
    label = weights[0] if len(weights) == 1 else f"{weights[0]} (+{len(weights) - 1} more)"
    return Projection(
        module=_common_module([p.module for p in every]),
        weight=label,
        in_features=main[0].in_features,
        out_features=sum(p.out_features for p in main),
        fused_width=sum(p.fused_width for p in main),
        weight_params=sum(p.weight_params for p in every),
        bias_params=sum(p.bias_params for p in every),
        low_rank_width=max(p.low_rank_width for p in main),
        groups=max(p.groups for p in main),
    )


def _kind(draft: _Draft, traced: TracedGraph) -> str:
    """Self when Q and K read one sequence's tokens (:func:`one_sequence`); a factorised
    projection reads its chain's root input; K projected in parts joined along the
    positions (a cache before the new keys) reads Q's input when one part does. A
    separable core's Q scores its K (a learned vector over the queries): K and V decide."""
    first, second = ("k", "v") if draft.core.form == "separable" else ("q", "k")
    q_in = canonical_input(_chain_input(draft.sources[first]))
    k_in = canonical_input(_chain_input(draft.sources[second]))
    inputs = frozenset(traced.user_inputs)
    same = one_sequence(q_in, k_in, traced.params, inputs) or derived_copy(
        getattr(draft.core, second), q_in, traced.params, inputs)
    return "self" if same else "cross"


def _chain_input(parts: tuple[Source, ...]) -> fx.Node:
    """The input the widest part's chain reads."""
    return parts[0].chain_input


def _common_module(paths: list[str]) -> str:
    split = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if all(part == parts[0] for part in parts):
            common.append(parts[0])
        else:
            break
    return ".".join(common)


def _module_type(model: nn.Module, name: str) -> str:
    """The class name of the module at ``name`` (a ScriptModule's: the scripted class)."""
    module = submodule(model, name)
    return "?" if module is None else getattr(module, "original_name", type(module).__name__)


def _unique_names(layouts: list[Layout]) -> list[Layout]:
    """Blocks that share a module (one module running attention twice) get #2, #3, …"""
    counts: dict[str, int] = defaultdict(int)
    result = []
    for layout in layouts:
        counts[layout.name] += 1
        n = counts[layout.name]
        result.append(layout if n == 1 else replace(layout, name=f"{layout.name}#{n}"))
    return result
