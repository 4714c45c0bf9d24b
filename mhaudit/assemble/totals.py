"""Whole-model totals: parameters, FLOPs by family, memory, with folded layers counted each."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from mhaudit.cost.devices import dtype_bytes
from mhaudit.data import AttentionBlock, ExpertLayer, Totals
from mhaudit.fake.run import run_dtype
from mhaudit.flops.graph import GraphFlops, tensor_outputs
from mhaudit.flops.moe import expert_tensor_numel, inactive_fraction
from mhaudit.load.packed import packed_count
from mhaudit.memory.lifetimes import peak_activation_bytes
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.fold import FoldedList, node_weight


def model_totals(
    model: nn.Module, traced: TracedGraph, costs: GraphFlops, blocks: Sequence[AttentionBlock],
    dtype: str, plans: tuple[FoldedList, ...], experts: Sequence[ExpertLayer],
    activation_peak: int | None = None,
) -> Totals:
    """The ``totals`` of the report.

    ``activation_peak`` is the fake-tensor forward's peak, run at ``dtype`` where the CPU
    computes in it (:func:`~mhaudit.fake.run.run_dtype`) and then taken as counted;
    at the model's own dtypes otherwise (fp8), and then scaled by element size, as the
    graph's tensor-lifetime estimate is, which stands in when there is no such peak.
    """
    params_total = sum(p.numel() for p in model.parameters()) + packed_count(model)
    param_bytes = params_total * dtype_bytes(dtype)
    weights = node_weights(traced, plans)
    excluded = set(traced.params) | set(traced.buffers)
    graph_peak = peak_activation_bytes(traced.graph, excluded)
    if activation_peak is not None and run_dtype(dtype) is not None:
        activations = activation_peak  # counted at the audited dtype, upcasts included
    else:
        activations = _scale_bytes(
            activation_peak if activation_peak is not None else graph_peak, traced, dtype)
    activations = max(activations, _scale_bytes(output_bytes(traced), traced, dtype))
    buffer_bytes = sum(
        b.numel() * (dtype_bytes(dtype) if b.is_floating_point() else b.element_size())
        for b in model.buffers()
    )
    attention_params = attention_params_of(blocks)
    return Totals(
        num_blocks=len(blocks),
        attention_params=attention_params,
        params_total=params_total,
        attention_params_share=attention_params / params_total if params_total else 0.0,
        flops=sum(f * weights(name) for name, f in costs.node_flops.items()),
        attention_flops=sum(b.flops.total for b in blocks),
        kv_cache_bytes_per_token=sum(b.memory.kv_cache_bytes_per_token for b in blocks),
        param_bytes=param_bytes,
        peak_activation_bytes=activations,
        buffer_bytes=buffer_bytes,
        peak_memory_bytes=param_bytes + buffer_bytes + activations,
        peak_activation_is_lower_bound=activation_peak is None,
        flops_by_family=costs.by_family(weights),
        params_active=params_total - _inactive_params(model, experts),
    )


def node_weights(traced: TracedGraph, plans: tuple[FoldedList, ...]) -> Callable[[str], int]:
    """Node name to how many layers it stands for (folded layers count once per layer)."""
    weights: dict[str, int] = {}
    for node in traced.graph.nodes if plans else ():
        weight = node_weight(traced.module_path(node), plans)
        weights[node.name] = weight
        for arg in node.args:  # a wrapped submodule graph is costed under its get_attr name
            if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
                weights[arg.name] = weight
    return lambda name: weights.get(name.split(".")[0], 1)


def _inactive_params(model: nn.Module, experts: Sequence[ExpertLayer]) -> int:
    """Expert parameters a token does not touch, (E − k)/E of each layer (folded layers
    already expanded to every layer)."""
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    return sum(round(expert_tensor_numel(shapes, layer) * inactive_fraction(layer))
               for layer in experts)


def attention_params_of(blocks: Sequence[AttentionBlock]) -> int:
    """Block parameters with weights shared between blocks counted once: Q, K, V and O,
    and the maps on their way (K/V transforms, absorbed per-head maps), which each block
    already counts once."""
    seen: dict[tuple[str, str, int], int] = {}
    for block in blocks:
        for role in ("q", "k", "v", "o"):
            proj = getattr(block.layout, role)
            if proj is not None:
                seen[(proj.weight, role, proj.out_features)] = proj.params
    maps = sum(b.layout.kv_transform_params + b.layout.absorbed_params for b in blocks)
    return sum(seen.values()) + maps


def output_bytes(traced: TracedGraph) -> int:
    """Bytes of the tensors the forward returns (each output node once), at the traced
    dtypes."""
    returned = {leaf for node in traced.graph.nodes if node.op == "output"
                for leaf in tree_leaves(node.args) if isinstance(leaf, torch.fx.Node)}
    return sum(t.numel() * t.element_size() for leaf in returned
               for t in tensor_outputs(leaf.meta.get("val")) if t is not None)


def _scale_bytes(graph_bytes: int, traced: TracedGraph, dtype: str) -> int:
    """Convert activation bytes traced at the model's dtype to the audited dtype."""
    traced_bytes = _traced_element_bytes(traced)
    return graph_bytes * dtype_bytes(dtype) // traced_bytes if traced_bytes else graph_bytes


def _traced_element_bytes(traced: TracedGraph) -> int:
    for node in traced.graph.nodes:
        if node.name in traced.params:
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return int(value.element_size())
    return 0
