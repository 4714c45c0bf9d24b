"""The width the graph computes attention scores at: softmax's explicit dtype, if any."""

from __future__ import annotations

import torch
from torch import fx

from mhaudit.trace.ops import SOFTMAX_OPS, SOFTMAX_TO_CONTEXT_OPS, op_name


def _named_dtype(softmax: fx.Node) -> torch.dtype | None:
    """The dtype a softmax call names: ``softmax(x, dim, dtype)``; ``_softmax``'s
    half_to_float flag means float32."""
    name = op_name(softmax)
    if name == "_softmax":
        flag = softmax.args[2] if len(softmax.args) > 2 else False
        return torch.float32 if flag else None
    value = softmax.args[2] if len(softmax.args) > 2 else softmax.kwargs.get("dtype")
    return value if isinstance(value, torch.dtype) else None


def score_dtype(probs_user: fx.Node) -> str | None:
    """Dtype name (``float32``) the softmax feeding an eager context op is computed in,
    when the code names one (HF upcasts scores to fp32); None when it follows its input.

    Walks back from the context op's operands through casts and dropout to the softmax.
    """
    stack = [a for a in probs_user.all_input_nodes]
    for _ in range(16):
        if not stack:
            return None
        node = stack.pop()
        if op_name(node) in SOFTMAX_OPS:
            named = _named_dtype(node)
            return str(named).removeprefix("torch.") if named is not None else None
        if op_name(node) in SOFTMAX_TO_CONTEXT_OPS:
            stack.extend(node.all_input_nodes[:1])
    return None
