"""Values written into a buffer: in-place writes into its views, and functional scatters.

Code that builds a tensor piece by piece (Longformer copies the diagonals of its chunked
scores into slices of a ``new_zeros`` buffer) computes the buffer's contents in the
writes, not in the op that allocated it. A walk back from a reader of the buffer goes on
through the values written into it.
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.ops import (
    FRESH_OPS,
    SCATTERED_VALUE_ARG,
    WRITE_TARGET_OPS,
    WRITTEN_VALUE_ARG,
    is_in_place,
    op_name,
)
from mhaudit.trace.walks import chain

_VIEW_DEPTH = 8
"""Views of views a write may go through to reach the buffer."""


def written_values(node: fx.Node) -> list[fx.Node] | None:
    """Where the contents of ``node`` come from when they are written, not computed.

    A fresh buffer (``new_zeros``, ``empty``, …): the values written in place into it or
    into any view of it (``copy_``, ``index_put_``, ``masked_scatter_``, …), in graph
    order. A functional scatter (``slice_scatter``, ``index_put``, …): the values it
    writes, then the tensor it writes them into. None for any other op.
    """
    name = op_name(node)
    if name in SCATTERED_VALUE_ARG and node.op == "call_function":
        values = _arg(node, SCATTERED_VALUE_ARG[name])
        base = _arg(node, 0)
        return [n for n in (values, base) if n is not None]
    if name not in FRESH_OPS:
        return None
    found: list[fx.Node] = []
    frontier = [node]
    for _ in range(_VIEW_DEPTH):
        nxt: list[fx.Node] = []
        for view in frontier:
            for user in view.users:
                if not user.args or user.args[0] is not view:
                    continue
                value = _written_by(user)
                if value is not None:
                    found.append(value)
                elif op_name(user) in WRITE_TARGET_OPS:
                    nxt.append(user)
        frontier = nxt
    return found


def written_buffer(user: fx.Node, value: fx.Node) -> fx.Node | None:
    """The buffer ``user`` writes ``value`` into in place (the root of the view it writes
    through), or None when ``user`` does not write ``value``."""
    if _written_by(user) is not value or not isinstance(user.args[0], fx.Node):
        return None
    return chain(user.args[0], WRITE_TARGET_OPS, _VIEW_DEPTH)[-1]


def _written_by(user: fx.Node) -> fx.Node | None:
    """The values an in-place write op writes into its first argument."""
    name = op_name(user)
    if name not in WRITTEN_VALUE_ARG or not is_in_place(user):
        return None
    return _arg(user, WRITTEN_VALUE_ARG[name])


def _arg(node: fx.Node, index: int) -> fx.Node | None:
    value = node.args[index] if len(node.args) > index else None
    return value if isinstance(value, fx.Node) else None
