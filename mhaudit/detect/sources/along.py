"""Projections along the sequence axis: a weight that maps positions, not features."""

from __future__ import annotations

from collections.abc import Callable

from torch import fx

from mhaudit.detect.sources.features import axis_groups, backward_axis
from mhaudit.detect.sources.projections import ProjectionOp, per_head
from mhaudit.trace.graphs import innermost_module, shape, tensor_inputs
from mhaudit.trace.ops import REGROUP_OPS, RESHAPE_OPS, op_name

_MAX_REGROUPS = 16


def along_sequence(proj: ProjectionOp, axis: int | None) -> bool:
    """The operand's head-dim axis is not among the projection's output features: the
    weight maps another axis (Linformer's learned n→k map of the keys' positions, when a
    feature projection of the same block lies below it; channel attention's QKV, whose
    tokens are the head dim, when none does)."""
    rank = len(shape(proj.node))
    if axis is None or not rank or proj.activation is proj.node:
        return False
    features = {a % rank for a in proj.feature_axes} or {rank - 1}
    return axis % rank not in features


def maps_positions_of(positions: ProjectionOp, features: ProjectionOp) -> bool:
    """``positions`` maps the positions ``features`` projected: it reads as many inputs
    as ``features`` has rows per sequence, inside the same block."""
    dims = shape(features.node)
    return _inside(positions, features) and len(dims) >= 2 and dims[-2] == positions.in_width


def _inside(later: ProjectionOp, earlier: ProjectionOp) -> bool:
    """``earlier`` ran inside the module that holds ``later``'s module."""
    parent = innermost_module(later.matmul).rpartition(".")[0]
    return not parent or innermost_module(earlier.matmul).startswith(parent + ".")


def position_map(
    proj: ProjectionOp, axis: int | None, projection: Callable[[fx.Node], ProjectionOp | None]
) -> Callable[[ProjectionOp], bool] | None:
    """When ``proj`` maps positions after another projection of the block (a K/V
    transform, not the K/V projection), the test a projection below it must pass to be
    the feature projection it reads; None when ``proj`` maps features alone.

    Three kinds: a map along the sequence (:func:`along_sequence`, Linformer's n→k), a
    map of blocks of positions flattened with their features (:func:`blocked_source`: a
    compressor of each block of ``l`` positions, ``Linear(l·d_k, d_k)``), and a per-head
    map of another projection's heads (:func:`head_map_source`: latent attention's W_UK
    absorbed into the query).
    """
    if along_sequence(proj, axis):
        return lambda features: maps_positions_of(proj, features)
    below = blocked_source(proj, projection) or head_map_source(proj, projection)
    if below is None:
        return None
    return lambda features: features.node is below.node


def blocked_source(
    proj: ProjectionOp, projection: Callable[[fx.Node], ProjectionOp | None]
) -> ProjectionOp | None:
    """The projection whose positions and features ``proj`` reads merged on its input
    feature axis, in the same block: its output regrouped (views, transposes, copies
    only) so that one input vector of ``proj`` holds several positions' features.

    The input axes are followed back op by op; a reshape that merges axes adds each axis
    it merges. At a projection, a followed axis that is not one of its feature axes (and
    is longer than 1) is a token axis: ``proj`` mixes positions. None otherwise.
    """
    if proj.feature_axes or op_name(proj.matmul) != "linear":
        return None
    node, axes = proj.activation, frozenset({len(shape(proj.activation)) - 1})
    for _ in range(_MAX_REGROUPS):
        below = projection(node)
        if below is not None:
            return below if _mixed(below, axes) and _inside(proj, below) else None
        if op_name(node) not in REGROUP_OPS:
            return None
        inputs = list(tensor_inputs(node))
        if len(inputs) != 1:
            return None
        moved = _back(node, inputs[0], axes)
        if moved is None:
            return None
        node, axes = inputs[0], moved
    return None


def head_map_source(
    proj: ProjectionOp, projection: Callable[[fx.Node], ProjectionOp | None]
) -> ProjectionOp | None:
    """The projection whose heads ``proj`` maps one matrix per head (:func:`per_head`),
    reached back from its input through views, splits and copies, in the same block."""
    if not per_head(proj):
        return None
    node = proj.activation
    for _ in range(_MAX_REGROUPS):
        below = projection(node)
        if below is not None:
            return below if _inside(proj, below) else None
        inputs = list(tensor_inputs(node))
        if op_name(node) not in REGROUP_OPS or len(inputs) != 1:
            return None
        node = inputs[0]
    return None


def _mixed(below: ProjectionOp, axes: frozenset[int]) -> bool:
    """``axes`` of ``below``'s output hold some of its features and a token axis."""
    dims = shape(below.node)
    if not dims:
        return False
    features = {a % len(dims) for a in below.feature_axes} or {len(dims) - 1}
    tokens = {a for a in axes - features if dims[a] > 1}
    return bool(axes & features) and bool(tokens)


def _back(node: fx.Node, source: fx.Node, axes: frozenset[int]) -> frozenset[int] | None:
    """The axes of ``source`` that ``axes`` of ``node`` are made of (every axis a
    reshape merges into one of them)."""
    before, after = shape(source), shape(node)
    if op_name(node) in RESHAPE_OPS and before != after:
        groups = axis_groups(before, after)
        found = frozenset(i for ins, outs in groups if set(outs) & axes for i in ins)
        return found or None
    mapped = {backward_axis(node, source, a) for a in axes}
    return None if None in mapped else frozenset(a for a in mapped if a is not None)
