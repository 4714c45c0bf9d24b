"""Detect stage: an fx graph becomes attention-block layouts, by what the graph computes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from torch import fx, nn

from mhaudit.cores import Core, find_cores
from mhaudit.data import Layout, Projection
from mhaudit.graphs import shape
from mhaudit.projections import (
    ProjectionOp,
    Source,
    canonical_input,
    find_output_projection,
    trace_source,
)
from mhaudit.trace import TracedGraph

_ROLES = ("q", "k", "v")


@dataclass(frozen=True)
class _Draft:
    core: Core
    sources: dict[str, Source]
    o: ProjectionOp | None


def detect(traced: TracedGraph, model: nn.Module) -> list[Layout]:
    """Every attention block in the graph, in graph order."""
    params = traced.params
    inputs = frozenset(traced.user_inputs)
    cache: dict[fx.Node, ProjectionOp | None] = {}
    groups: dict[object, list[_Draft]] = defaultdict(list)
    for core in find_cores(traced.graph, params):
        sources = {
            role: trace_source(getattr(core, role), params, cache, inputs) for role in _ROLES
        }
        o = find_output_projection(core.output, params, cache)
        groups[o.node if o is not None else core.output].append(_Draft(core, sources, o))
    layouts = [_layout(drafts, traced, model) for drafts in groups.values()]
    return _unique_names(layouts)


def _layout(drafts: list[_Draft], traced: TracedGraph, model: nn.Module) -> Layout:
    """Merge the cores that share one output projection (per-head modules) into a block."""
    first = drafts[0].core
    d_k, d_v = first.head_dim, first.v_head_dim
    widths = {r: sum(d.sources[r].width for d in drafts) for r in _ROLES}
    roles, kv_shared = _attribute(drafts, traced)
    o = drafts[0].o
    o_role = _projection(o, o.out_width, traced, o.weight_numel, o.bias_numel) if o else None
    q_source = drafts[0].sources["q"]
    d_model = roles["q"].in_features if roles["q"] else (shape(q_source.root) or (0,))[-1]
    rows = q_source.projection.rows if q_source.projection else _rows(q_source.root)
    batch = max(1, rows // first.seq_len_q) if first.seq_len_q else 1
    owners = [p.module for p in (*roles.values(), o_role) if p is not None]
    name = _common_module(owners) if owners else traced.module_path(first.output)
    return Layout(
        name=name,
        module_type=_module_type(model, name),
        kind=_kind(drafts[0]),
        implementation=first.implementation,
        d_model=d_model,
        num_heads=widths["q"] // d_k if d_k else 0,
        num_kv_heads=widths["k"] // d_k if d_k else 0,
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
    )


def _attribute(
    drafts: list[_Draft], traced: TracedGraph
) -> tuple[dict[str, Projection | None], bool]:
    """Split each projection's weight among the roles that read it.

    A fused QKV weight is shared out by the width each role uses. When the roles
    reading one projection use more than its width, they read the same values
    (e.g. K and V from one projection), and the weight is counted for the first.
    """
    uses: dict[fx.Node, list[tuple[str, Source]]] = defaultdict(list)
    ops: dict[fx.Node, ProjectionOp] = {}
    for draft in drafts:
        for role in _ROLES:
            source = draft.sources[role]
            if source.projection is not None:
                uses[source.projection.node].append((role, source))
                ops[source.projection.node] = source.projection
    parts: dict[str, list[Projection]] = defaultdict(list)
    shared_roles: set[str] = set()
    for node, role_sources in uses.items():
        op = ops[node]
        overlapping = sum(src.width for _, src in role_sources) > op.out_width
        for index, (role, src) in enumerate(role_sources):
            shared = overlapping and index > 0
            if shared:
                shared_roles.add(role)
            weight = 0 if shared else op.weight_numel * src.width // op.out_width
            bias = 0 if shared else op.bias_numel * src.width // op.out_width + src.extra_bias
            parts[role].append(_projection(op, src.width, traced, weight, bias))
    merged = {role: _merge(parts[role]) for role in _ROLES}
    return merged, "v" in shared_roles


def _projection(
    op: ProjectionOp, width: int, traced: TracedGraph, weight: int, bias: int
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
        in_features=op.in_width,
        out_features=width,
        fused_width=op.out_width,
        weight_params=weight,
        bias_params=bias,
    )


def _merge(parts: list[Projection]) -> Projection | None:
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    weights = sorted({p.weight for p in parts})
    label = weights[0] if len(weights) == 1 else f"{weights[0]} (+{len(weights) - 1} more)"
    return Projection(
        module=_common_module([p.module for p in parts]),
        weight=label,
        in_features=parts[0].in_features,
        out_features=sum(p.out_features for p in parts),
        fused_width=sum(p.fused_width for p in parts),
        weight_params=sum(p.weight_params for p in parts),
        bias_params=sum(p.bias_params for p in parts),
    )


def _kind(draft: _Draft) -> str:
    q, k = draft.sources["q"], draft.sources["k"]
    q_in = q.projection.activation if q.projection else q.root
    k_in = k.projection.activation if k.projection else k.root
    return "self" if canonical_input(q_in) is canonical_input(k_in) else "cross"


def _rows(node: fx.Node) -> int:
    dims = shape(node)
    total = 1
    for d in dims[:-1]:
        total *= d
    return total


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
    try:
        return type(model.get_submodule(name)).__name__
    except AttributeError:
        return "?"


def _unique_names(layouts: list[Layout]) -> list[Layout]:
    """Blocks that share a module (one module running attention twice) get #2, #3, …"""
    from dataclasses import replace

    counts: dict[str, int] = defaultdict(int)
    result = []
    for layout in layouts:
        counts[layout.name] += 1
        n = counts[layout.name]
        result.append(layout if n == 1 else replace(layout, name=f"{layout.name}#{n}"))
    return result
