"""An output projection shared with another branch: the slice that reads the context.

Parallel blocks may concatenate the attention context with another branch's features
along the feature axis and project both with one matrix (Flux's single-stream block:
``proj_out(cat([context, mlp_hidden]))``). The block's output projection is then the
columns of that weight that read the context; the rest belongs to the other branch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from torch import fx

from mhaudit.detect.sources.projections import ProjectionOp, canonical_input
from mhaudit.trace.graphs import arg, op_name, shape

_DEPTH = 16
"""Ops a walk back from a concatenated input to a context goes through at most."""


def context_slice(op: ProjectionOp, contexts: Iterable[fx.Node]) -> ProjectionOp:
    """``op`` with only the weight columns that read one of ``contexts``, when its input
    is a concatenation along the feature axis of contexts and other features; else ``op``.

    The bias is added once to the whole output and stays with the block.
    """
    x = canonical_input(op.activation)
    if op_name(x) != "cat" or not x.args or not isinstance(x.args[0], (list, tuple)):
        return op
    rank = len(shape(x))
    dim = arg(x, 1, "dim", 0)
    if not rank or not isinstance(dim, int) or dim % rank != rank - 1:
        return op
    parts = [p for p in x.args[0] if isinstance(p, fx.Node)]
    targets = set(contexts)
    total = sum(shape(p)[-1] for p in parts if shape(p))
    read = sum(shape(p)[-1] for p in parts if shape(p) and _reaches(p, targets))
    if not read or read >= total or op.weight_numel % total:
        return op
    return replace(op, weight_numel=op.weight_numel // total * read)


def _reaches(node: fx.Node, targets: set[fx.Node]) -> bool:
    """True when ``node`` is computed from one of ``targets`` within a few ops."""
    frontier, seen = [node], {node}
    for _ in range(_DEPTH):
        nxt = []
        for current in frontier:
            if current in targets:
                return True
            for source in current.all_input_nodes:
                if source not in seen:
                    seen.add(source)
                    nxt.append(source)
        frontier = nxt
    return any(n in targets for n in frontier)
