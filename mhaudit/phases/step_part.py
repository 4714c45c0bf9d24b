"""The part of a traced forward that a generation step runs again, read from the graph.

A step feeds one new token to the generating input (the token ids the logits are
computed from: a decoder's ``decoder_input_ids``, a language model's ``input_ids``) and
runs what depends on it. What depends only on the other inputs (an encoder's audio
features, a vision tower's pixels) ran once, in prefill: its outputs stay cached
(cross-attention K/V) or already sit in the sequence (image tokens).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import fx

from mhaudit.assemble.expand import expand_names
from mhaudit.data import AttentionBlock
from mhaudit.flops.graph import graph_flops
from mhaudit.trace.export import TracedGraph
from mhaudit.trace.fold import FoldedList, node_weight
from mhaudit.trace.ops import EMBEDDING_OPS, POINTWISE_CONV_OPS, PROJECTION_OPS, op_name

_WEIGHT_OPS = PROJECTION_OPS | POINTWISE_CONV_OPS
"""Ops that apply a weight to activations: an input that feeds one outside the step has
a part of its own (an encoder, a tower), unlike a mask or position ids."""


@dataclass(frozen=True)
class StepPart:
    """What of the audited forward runs again for each generated token."""

    blocks: frozenset[str] | None
    """Names of the attention blocks a step runs; None when the whole model runs."""
    prefill_only_flops: int = 0
    """FLOPs of the ops that run once, in prefill, and never in a step (every layer of a
    folded list counted)."""
    prefill_only_params: frozenset[str] = frozenset()
    """Parameters only those ops read (qualified names, every layer of a folded list)."""

    def runs(self, block: AttentionBlock) -> bool:
        """Whether a step runs ``block``."""
        return self.blocks is None or block.name in self.blocks


WHOLE_MODEL = StepPart(None)
"""Every op runs each step: a decoder-only model, or one with no token input to follow."""


def _cone(starts: Iterable[fx.Node]) -> set[fx.Node]:
    """``starts`` and every node computed from them."""
    seen = set(starts)
    stack = list(seen)
    while stack:
        for user in stack.pop().users:
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return seen


def _indexes_a_table(node: fx.Node) -> bool:
    """``node`` holds token ids: integers that an embedding gather's index is computed
    from (directly, through views, or after image-token positions are masked out)."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.is_floating_point() or value.is_complex():
        return False
    cone = _cone([node])
    return any(op_name(n) in EMBEDDING_OPS and len(n.args) > 1 and n.args[1] in cone
               for n in cone)


def _cross_kv_users(traced: TracedGraph, blocks: Sequence[AttentionBlock]) -> set[fx.Node]:
    """Ops that read a cross-attention block's K or V projection weight."""
    weights = {p.weight for b in blocks if b.layout.kind == "cross"
               for p in (b.layout.k, b.layout.v) if p is not None}
    return {user for node in traced.graph.nodes
            if node.op == "placeholder" and traced.params.get(node.name) in weights
            for user in node.users}


def generating_inputs(traced: TracedGraph, blocks: Sequence[AttentionBlock]
                      ) -> list[fx.Node]:
    """Token inputs a step feeds: those that index an embedding table and do not feed a
    cross-attention block's K/V (those are an encoder's tokens)."""
    inputs = [n for n in traced.graph.nodes
              if n.op == "placeholder" and n.name in traced.user_inputs]
    memory = _cross_kv_users(traced, blocks)
    return [n for n in inputs if _indexes_a_table(n) and not (_cone([n]) & memory)]


def _applies_weights(nodes: Iterable[fx.Node], weights: set[fx.Node]) -> bool:
    return any(op_name(n) in _WEIGHT_OPS and any(a in weights for a in n.all_input_nodes)
               for n in nodes)


def prefill_only_nodes(traced: TracedGraph, step: set[fx.Node]) -> set[fx.Node]:
    """Nodes that run once: computed from an input with weights of its own (an encoder's,
    a tower's) and not from the step's inputs, or feeding only such nodes (their weights).

    ``step`` is the cone of the generating inputs. Masks and position ids feed the step
    without weights of their own, so they are not a prefill part.
    """
    nodes = list(traced.graph.nodes)
    params = {n for n in nodes if n.op == "placeholder" and n.name in traced.params}
    weights = _cone(params) - _cone(n for n in nodes if n.name in traced.user_inputs)
    once: set[fx.Node] = set()
    for node in nodes:
        if node.op == "placeholder" and node.name in traced.user_inputs and node not in step:
            part = _cone([node]) - step
            if _applies_weights(part, weights):
                once |= part
    for node in reversed(nodes):  # users before the nodes they use
        if node not in step and node.users and all(u in once for u in node.users):
            once.add(node)
    return once


def _paths(traced: TracedGraph, nodes: Iterable[fx.Node], plans: tuple[FoldedList, ...]
           ) -> set[str]:
    """Module paths of ``nodes`` and of every module above them, in every folded layer."""
    paths: set[str] = set()
    for node in nodes:
        if node.op == "call_function":
            parts = traced.module_path(node).split(".")
            paths.update(".".join(parts[:i]) for i in range(len(parts) + 1))
    return expand_names(paths, plans)


def step_part(traced: TracedGraph, blocks: Sequence[AttentionBlock],
              plans: tuple[FoldedList, ...] = ()) -> StepPart:
    """The part of ``traced`` a generation step runs (:data:`WHOLE_MODEL` when the graph
    has no token input to follow, or nothing that runs only once).

    ``blocks`` are the report's, their names expanded over ``plans``; what runs once is
    costed as the report's totals cost it (each node's FLOPs, once per folded layer).
    """
    generating = generating_inputs(traced, blocks)
    if not generating:
        return WHOLE_MODEL
    step = _cone(generating)
    once = prefill_only_nodes(traced, step)
    if not once:
        return WHOLE_MODEL
    weights = {n.name: node_weight(traced.module_path(n), plans) for n in once}
    costs = graph_flops(traced.graph)
    flops = sum(f * weights[name.split(".")[0]] for name, f in costs.node_flops.items()
                if name.split(".")[0] in weights)
    params = {traced.params[n.name] for n in once if n.name in traced.params}
    ran = _paths(traced, (n for n in traced.graph.nodes if n not in once), plans)
    seen = _paths(traced, traced.graph.nodes, plans)
    names = frozenset(b.name for b in blocks if b.name in ran or b.name not in seen)
    return StepPart(names, flops, frozenset(expand_names(params, plans)))
