"""Whether an attention core's mask is one torch's flash backend refuses (an explicit mask)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import fx

from mhaudit.detect.cores import Core
from mhaudit.detect.patterns.masks import core_mask
from mhaudit.trace.ops import GATHER_OPS, PROJECTION_OPS, op_name
from mhaudit.trace.unread import value_inputs
from mhaudit.trace.walks import Walk

_MAX_NODES = 256
_FEATURE_OPS = GATHER_OPS | PROJECTION_OPS
"""Ops that make features from weights: the walk from a mask back to the inputs stops there."""


def reads_inputs(masks: Iterable[fx.Node], inputs: frozenset[str]) -> bool:
    """True when a mask's values derive from one of the graph's user inputs (a padding
    mask, the boundaries of packed sequences) rather than from positions and shapes alone:
    a buffer shaped like the hidden states, or a size read from them, reads no values, and
    features (an embedding lookup, a projection) are not a mask, however deep the model."""
    walk: Walk[fx.Node] = Walk(list(masks), _MAX_NODES)
    for node in walk:
        if node.op == "placeholder":
            if node.name in inputs:
                return True
            continue
        if op_name(node) not in _FEATURE_OPS:
            walk.push(value_inputs(node))
    return False


def explicit_mask(masks: tuple[fx.Node, ...], causal: bool, window: int | None, n_kv: int,
                  inputs: frozenset[str]) -> bool:
    """A mask tensor that cannot be replaced by ``is_causal``: it reads the inputs, holds
    something other than a causal triangle, or bounds a window shorter than the keys.

    A causal triangle from positions alone is what transformers drops for ``is_causal``
    on real inputs (``_ignore_causal_mask_sdpa``); on fake tensors it cannot tell and
    passes the tensor, which is why the graph alone would call every causal model masked.
    """
    if not masks:
        return False
    if not causal or (window is not None and window < n_kv):
        return True
    return reads_inputs(masks, inputs)


def call_facts(core: Core, user_inputs: Iterable[str]) -> dict[str, Any]:
    """What a core's mask and call say, as :class:`~mhaudit.data.Layout` fields: its
    window and causal alignment, whether the mask is explicit (torch's flash backend
    refuses it), the call's dropout and its grouped-query heads."""
    window, alignment = core_mask(core.output, core.masks, core.seq_len_q, core.seq_len_kv)
    return {
        "window": core.band or window, "causal_alignment": alignment,
        "explicit_mask": explicit_mask(core.masks, core.causal, window, core.seq_len_kv,
                                       frozenset(user_inputs)),
        "dropout_p": core.dropout_p, "sdpa_gqa": core.gqa,
    }
