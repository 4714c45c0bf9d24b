"""Attention the forward never reached: untraced modules laid out as Q, K and V."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from torch import nn

MIN_PROJECTIONS = 3
"""Projections of one input or one output width a module needs to read as attention
(Q, K and V read one input, or, in cross-attention, write one width)."""


def _widths(module: nn.Module) -> tuple[int, int] | None:
    """(input, output) features of a per-token projection: a Linear, a 1×1 convolution;
    None for any other module."""
    if isinstance(module, nn.Linear):
        return int(module.in_features), int(module.out_features)
    if isinstance(module, (nn.Conv1d, nn.Conv2d)) and all(k == 1 for k in module.kernel_size):
        return int(module.in_channels), int(module.out_channels)
    return None


def untraced_attention(model: nn.Module, untraced: Sequence[str]) -> tuple[str, ...]:
    """Modules that hold at least three untraced projections of one input or one output
    width (a Q, K, V layout the forward never ran: a decoder or a tower no input selects),
    by name.

    Read from the module tree alone: which of them is softmax attention is not known,
    since the graph never saw them; an MLP (gate and up read one width, write another,
    down reads that) is not listed.
    """
    by_parent: dict[str, dict[tuple[str, int], int]] = defaultdict(lambda: defaultdict(int))
    for name in untraced:
        try:
            module = model.get_submodule(name)
        except AttributeError:
            continue
        widths = _widths(module)
        if widths is not None and name:
            counts = by_parent[name.rpartition(".")[0]]
            counts[("in", widths[0])] += 1
            counts[("out", widths[1])] += 1
    return tuple(sorted(parent for parent, counts in by_parent.items()
                        if max(counts.values()) >= MIN_PROJECTIONS))
