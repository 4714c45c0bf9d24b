"""Rule of thumb for joint attention: streams projected apart, joined along the sequence.

MM-DiT blocks project image and text tokens with their own Q/K/V weights, join each of
Q, K and V along the sequence, run one attention over both, then split the context
back and give each stream its own output projection.
"""

from __future__ import annotations

from torch import fx

from mhaudit.detect.sources.projections import ProjectionOp, projections_after
from mhaudit.trace.graphs import arg, shape
from mhaudit.trace.ops import PAD_OPS, VIEW_OPS, op_name


def stream_outputs(
    output: fx.Node, params: dict[str, str], cache: dict[fx.Node, ProjectionOp | None]
) -> list[ProjectionOp]:
    """Every projection that reads a slice of the context along views and splits, and
    along the pads and joins of a per-sample loop (Mochi attends each sample's valid
    tokens alone, pads each context back to full length and joins them along the batch)."""
    def follow(user: fx.Node) -> bool:
        name = op_name(user)
        return name in VIEW_OPS or name in PAD_OPS or (name == "cat" and _batch_axis(user))

    return list(projections_after(output, params, cache, follow))


def _batch_axis(node: fx.Node) -> bool:
    """A ``cat`` along the first axis (the batch of the context it joins)."""
    dim = arg(node, 1, "dim", 0)
    return isinstance(dim, int) and dim % max(len(shape(node)), 1) == 0
