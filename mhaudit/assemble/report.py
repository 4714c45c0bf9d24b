"""The report put together: model facts, blocks in groups, totals, coverage, folding."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from mhaudit.assemble.expand import expand_experts, expand_names, expand_unread
from mhaudit.assemble.grouping import group_blocks
from mhaudit.assemble.totals import model_totals, node_weights
from mhaudit.assemble.unreached import untraced_attention
from mhaudit.cost.devices import dtype_bytes
from mhaudit.data import (
    AttentionBlock,
    Coverage,
    DeclaredMismatch,
    ModelInfo,
    Report,
    SourceLocation,
    UnreadCore,
)
from mhaudit.data.schema import FLEX_CONVENTION
from mhaudit.flops.graph import graph_flops
from mhaudit.flops.moe import routed_experts
from mhaudit.load.describe import describe_inputs
from mhaudit.load.packed import packed_note
from mhaudit.load.target import LoadedModel
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.fold import FoldedList, describe
from mhaudit.trace.unread import unread_projections


def build_report(
    loaded: LoadedModel,
    traced: TracedGraph,
    blocks: Sequence[AttentionBlock],
    dtype: str,
    device: str,
    plans: tuple[FoldedList, ...] = (),
    activation_peak: int | None = None,
    location: SourceLocation | None = None,
    unread: tuple[UnreadCore, ...] = (),
    declared: tuple[DeclaredMismatch, ...] = (),
) -> Report:
    """Put the model facts, blocks, totals and coverage together.

    ``activation_peak`` is the fake-tensor forward's peak at the model's dtypes; without
    it the graph's tensor-lifetime estimate is used. ``location`` is where the model is
    built or its class defined; ``unread`` the ops that can be a core and are in no block;
    ``declared`` the module attributes that disagree with their block's layout.
    """
    model = loaded.module
    costs = graph_flops(traced.graph)
    experts = expand_experts(
        routed_experts(traced.graph, traced.params, traced.module_path), plans)
    totals = model_totals(model, traced, costs, blocks, dtype, plans, experts, activation_peak)
    info = ModelInfo(
        source=loaded.source,
        class_name=type(model).__name__,
        params_total=totals.params_total,
        trace_method=traced.method,
        device=loaded.device or device,
        dtype=dtype,
        inputs=describe_inputs(model, loaded.args, loaded.kwargs),
        param_bytes=totals.params_total * dtype_bytes(dtype),
        inputs_inferred=loaded.inputs_inferred,
        location=location,
        note="; ".join(n for n in (loaded.note, packed_note(model)) if n),
    )
    used = used_parameters(model, traced, plans)
    untraced = untraced_modules(model, used)
    coverage = Coverage(
        ops_without_formula=costs.without_formula(node_weights(traced, plans)),
        untraced_modules=untraced,
        untraced_attention=untraced_attention(model, untraced),
        unread_projections=tuple(sorted(expand_names(set(unread_projections(traced)), plans))),
        untraced_towers=untraced_towers(model, used),
        data_dependent=traced.data_dependent,
        unread_cores=expand_unread(unread, plans),
        declared_mismatch=declared,
        inputs_left_out=loaded.inputs_left_out,
    )
    flags = tuple(f for b in blocks for f in b.findings)
    extras = {"folded_layers": describe(plans)} if plans else {}
    flex = any(b.layout.visited_fraction is not None for b in blocks)
    return Report(info, tuple(blocks), totals, flags, coverage, group_blocks(blocks),
                  experts=experts, extras=extras,
                  conventions={"flex_attention": FLEX_CONVENTION} if flex else {})


def used_parameters(model: nn.Module, traced: TracedGraph,
                    plans: tuple[FoldedList, ...]) -> set[int]:
    """``id`` of each parameter the forward read."""
    read = {
        traced.params[node.name] for node in traced.graph.nodes
        if node.op == "placeholder" and node.name in traced.params and node.users
    }
    by_name = dict(model.named_parameters(remove_duplicate=False))  # ScriptModules too
    return {id(by_name[name]) for name in expand_names(read, plans) if name in by_name}


def untraced_modules(model: nn.Module, used: set[int]) -> tuple[str, ...]:
    """Modules holding parameters the forward never used (their costs are not counted);
    ``used`` is :func:`used_parameters`."""
    owners = {
        name.rpartition(".")[0] for name, p in model.named_parameters() if id(p) not in used
    }
    return tuple(sorted(owners))


def untraced_towers(model: nn.Module, used: set[int]) -> tuple[str, ...]:
    """The outermost submodules that hold parameters, none of which the forward used
    (``used`` is :func:`used_parameters`)."""
    towers: list[str] = []
    for name, module in model.named_modules():
        params = [id(p) for p in module.parameters()]
        inside = any(name.startswith(f"{t}.") for t in towers)
        if name and params and not inside and used.isdisjoint(params):
            towers.append(name)
    return tuple(towers)
