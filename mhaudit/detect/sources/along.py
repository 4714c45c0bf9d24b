"""Projections along the sequence axis: a weight that maps positions, not features."""

from __future__ import annotations

from mhaudit.detect.sources.projections import ProjectionOp
from mhaudit.trace.graphs import innermost_module, shape


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
    parent = innermost_module(positions.matmul).rpartition(".")[0]
    inside = not parent or innermost_module(features.matmul).startswith(parent + ".")
    return inside and len(dims) >= 2 and dims[-2] == positions.in_width
