"""Rule of thumb for joint attention: streams projected apart, joined along the sequence.

MM-DiT blocks project image and text tokens with their own Q/K/V weights, join each of
Q, K and V along the sequence, run one attention over both, then split the context
back and give each stream its own output projection.
"""

from __future__ import annotations

from torch import fx

from mhaudit.detect.sources.projections import ProjectionOp, projections_after
from mhaudit.trace.ops import VIEW_OPS, op_name


def stream_outputs(
    output: fx.Node, params: dict[str, str], cache: dict[fx.Node, ProjectionOp | None]
) -> list[ProjectionOp]:
    """Every projection that reads a slice of the context along views and splits only."""
    return list(projections_after(output, params, cache, lambda user: op_name(user) in VIEW_OPS))
