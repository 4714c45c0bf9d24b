"""Rules of thumb for what sits between QKᵀ and probs·V: extra logit columns, head mixing.

- **Extra logit columns (attention sinks).** The softmax runs over
  ``cat([scores, extra], dim=-1)`` and the extra columns are sliced off before the
  probabilities meet V: each extra column is a logit with no value behind it.
- **Head-axis linear maps (talking heads).** A square learned matrix of size h applied
  across the head axis of the logits or probabilities (a Linear on the permuted scores,
  a 1×1 convolution over heads, an einsum with an h×h weight) mixes the heads' maps; so
  does a convolution over the score map (over (i, j), its kernel wider than 1×1) and a
  norm that keeps the map's shape (a LayerNorm over the heads).
"""

from __future__ import annotations

from torch import fx

from mhaudit.trace.graphs import param_root, shape
from mhaudit.trace.ops import HEAD_MIX_OPS, NORM_OPS, POINTWISE_CONV_OPS, op_name


def head_mix_input(node: fx.Node, params: dict[str, str]) -> fx.Node | None:
    """The logits a head-axis linear map reads, or None when ``node`` is not one.

    The map keeps the tensor's shape and its weight is a square g×g parameter (or
    g×g×1×1 for a 1×1 convolution) whose g is one of the tensor's axes.
    """
    if op_name(node) in NORM_OPS:
        return _normed_map(node, params)
    if op_name(node) not in HEAD_MIX_OPS:
        return None
    operands = node.args[1] if op_name(node) == "einsum" else node.args[:2]
    if not isinstance(operands, (list, tuple)) or len(operands) != 2:
        return None
    tensors = [o for o in operands if isinstance(o, fx.Node)]
    if len(tensors) != 2:
        return None
    weights = [t for t in tensors if param_root(t, params) is not None]
    acts = [t for t in tensors if param_root(t, params) is None]
    if len(weights) != 1 or len(acts) != 1:
        return None
    w, x = shape(weights[0]), shape(acts[0])
    square = len(w) >= 2 and w[0] == w[1] and all(s == 1 for s in w[2:])
    spatial = op_name(node) in POINTWISE_CONV_OPS and len(w) > 2  # a conv over (i, j)
    if not (square or spatial) or shape(node) != x or len(x) < 3 or w[0] not in x:
        return None
    return acts[0]


def _normed_map(node: fx.Node, params: dict[str, str]) -> fx.Node | None:
    """The map a norm reads when it keeps the map's shape (a LayerNorm over the heads of
    permuted probabilities: re-attention); None for a norm over features."""
    source = node.args[0] if node.args else None
    if not isinstance(source, fx.Node) or param_root(source, params) is not None:
        return None
    dims = shape(source)
    if len(dims) < 4 or (shape(node) or dims) != dims:
        return None
    return source


def extra_columns(node: fx.Node, scores_branch: fx.Node) -> int:
    """Logit columns a last-axis ``cat`` adds beside ``scores_branch`` (0 when not one)."""
    if op_name(node) != "cat" or not node.args or not isinstance(node.args[0], (list, tuple)):
        return 0
    dims = shape(node)
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if not dims or not isinstance(dim, int) or dim % len(dims) != len(dims) - 1:
        return 0
    return sum(shape(p)[-1] for p in node.args[0]
               if isinstance(p, fx.Node) and p is not scores_branch and shape(p))
