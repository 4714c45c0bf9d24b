"""Learned transforms of the score map between QKᵀ and ·V: their parameters and FLOPs.

A head-mixing block (``Layout.head_mixing``) runs learned maps over its scores or
probabilities: an h×h matrix across the heads (re-attention's θ, talking heads), a
convolution over each head's (i, j) map (multi-token attention), a norm that keeps the
map's shape. Each such op is found by :func:`~mhaudit.detect.patterns.logits.head_mix_input`
on the path from Q and K to the context; its parameters are the placeholders it reads and
its FLOPs are counted from its own shapes:

- a product with a weight ``w`` (einsum, matmul, linear, convolution): 2·numel(out)·Π w[1:]
  (an h×h einsum: 2·b·h·h·n_q·n_kv; a k×k convolution: 2·b·c_out·(c_in/g)·k·k·n_q·n_kv);
- a norm: ``NORM_FLOPS_PER_ELEMENT`` per element, plus one per affine weight and bias.
"""

from __future__ import annotations

import math
from dataclasses import replace

from torch import fx

from mhaudit.data import Layout
from mhaudit.detect.cores import Core
from mhaudit.detect.patterns.logits import head_mix_input
from mhaudit.trace.graphs import numel, param_root, shape, tensor_inputs
from mhaudit.trace.ops import NORM_OPS, op_name

NORM_FLOPS_PER_ELEMENT = 5
"""A norm's own work per element: a sum for the mean, a subtract, a square and a sum for
the variance, a multiply by the reciprocal deviation (the one rsqrt per row ignored); an
affine weight and bias add one each."""


def op_flops(node: fx.Node, weights: list[fx.Node]) -> int:
    """FLOPs of one learned map of the scores (module docstring)."""
    out = numel(node)
    if op_name(node) in NORM_OPS:  # native_layer_norm returns a tuple: count its input
        return numel(node.args[0]) * (NORM_FLOPS_PER_ELEMENT + len(weights))
    weight = max(weights, key=lambda w: len(shape(w)), default=None)
    w = shape(weight) if weight is not None else ()
    if len(w) < 2:
        return 0
    if op_name(node) == "linear":  # (out, in): each output element sums over `in`
        return 2 * out * w[1]
    return 2 * out * math.prod(w[1:])


def map_costs(cores: list[Core], params: dict[str, str]) -> tuple[set[str], int]:
    """Parameter placeholders and FLOPs of the learned maps of the scores of ``cores``."""
    names: set[str] = set()
    flops = 0
    for core in cores:
        for node in _maps(core, params):
            weights = [t for t in tensor_inputs(node) if param_root(t, params) is not None]
            names.update(r for t in weights if (r := param_root(t, params)) is not None)
            flops += op_flops(node, weights)
    return names, flops


def _maps(core: Core, params: dict[str, str]) -> list[fx.Node]:
    """The core's ops that read as learned maps of its scores."""
    stop = {core.q, core.k, core.v}
    seen: set[fx.Node] = set()
    pending = [core.output]
    while pending:
        node = pending.pop()
        if node in seen or node in stop:
            continue
        seen.add(node)
        pending.extend(tensor_inputs(node))
    return [n for n in core.output.graph.nodes if n in seen and n.op == "call_function"
            and head_mix_input(n, params) is not None]


def with_score_maps(layouts: list[Layout], cores: list[list[Core]],
                    params: dict[str, str], sizes: dict[str, int]) -> list[Layout]:
    """Each head-mixing layout with the parameters and FLOPs of its learned score maps; a
    parameter several blocks read counts in the first one."""
    seen: set[str] = set()
    result = []
    for layout, own in zip(layouts, cores, strict=True):
        if not layout.head_mixing:
            result.append(layout)
            continue
        names, flops = map_costs(own, params)
        fresh = names - seen
        seen |= fresh
        scores = layout.batch_size * layout.num_heads * layout.seq_len_q * layout.seq_len_kv
        result.append(replace(layout, score_map_params=sum(sizes.get(n, 0) for n in fresh),
                              learned_map_ops=round(flops / scores) if scores else 0))
    return result
