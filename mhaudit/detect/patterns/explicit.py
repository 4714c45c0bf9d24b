"""Whether an attention core's mask is one torch's flash backend refuses (an explicit mask)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from torch import fx

from mhaudit.detect.cores import Core
from mhaudit.detect.patterns.masks import core_mask, read_masks
from mhaudit.trace.ops import GATHER_OPS, PROJECTION_OPS, op_name
from mhaudit.trace.unread import value_inputs
from mhaudit.trace.walks import Walk

_MAX_NODES = 256
_FEATURE_OPS = GATHER_OPS | PROJECTION_OPS
"""Ops that make features from weights: the walk from a mask back to the inputs stops there."""


def _reaches(masks: Iterable[fx.Node], found: Callable[[fx.Node], bool]) -> bool:
    """Whether the walk from the masks through the values they read meets a node for which
    ``found`` holds. A buffer shaped like the hidden states, or a size read from them,
    reads no values, and features (an embedding lookup, a projection) are not a mask: the
    walk stops there, however deep the model."""
    walk: Walk[fx.Node] = Walk(list(masks), _MAX_NODES)
    for node in walk:
        if found(node):
            return True
        if node.op != "placeholder" and op_name(node) not in _FEATURE_OPS:
            walk.push(value_inputs(node))
    return False


def reads_inputs(masks: Iterable[fx.Node], inputs: frozenset[str]) -> bool:
    """True when a mask's values derive from one of the graph's user inputs (a padding
    mask, the boundaries of packed sequences) rather than from positions and shapes alone."""
    return _reaches(masks, lambda node: node.op == "placeholder" and node.name in inputs)


def explicit_mask(masks: tuple[fx.Node, ...], window: int | None, n_kv: int,
                  inputs: frozenset[str]) -> bool:
    """A mask tensor that cannot be replaced by ``is_causal`` or by no mask: it reads the
    inputs or bounds a window shorter than the keys.

    A causal triangle from positions alone, and a mask made from positions and shapes
    alone for an encoder called without a padding mask (all ones), are what transformers
    drops on real inputs (``_ignore_causal_mask_sdpa``, ``_prepare_4d_attention_mask_for_sdpa``);
    on fake tensors it cannot tell and passes the tensor, which is why the graph alone
    would call every model masked, and one tracer rung another than the next.
    """
    if not masks:
        return False
    if window is not None and window < n_kv:
        return True
    return reads_inputs(masks, inputs)
def call_facts(core: Core, user_inputs: Iterable[str]) -> dict[str, Any]:
    """What a core's mask and call say, as :class:`~mhaudit.data.Layout` fields: its
    window and causal alignment, whether the mask is explicit (torch's flash backend
    refuses it), the call's dropout and its grouped-query heads, and why an unread mask
    left causality unknown."""
    window, alignment = core_mask(core.output, core.masks, core.seq_len_q, core.seq_len_kv)
    return {
        "window": core.band or core.window or window, "causal_alignment": alignment,
        "explicit_mask": explicit_mask(core.masks, window, core.seq_len_kv,
                                       frozenset(user_inputs)),
        "dropout_p": core.dropout_p, "sdpa_gqa": core.gqa,
        "mask_unknown": read_masks(core.masks).unknown if core.causal is None else None,
    }
