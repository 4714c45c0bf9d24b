"""Index arithmetic on real values inside a fake step, so the model takes the path a real run takes.

A fake tensor holds no values, and model code that would read one takes its general
path instead: transformers, with the cache off (as when it checkpoints), cannot tell
from fake position ids that the sequences are not packed, so it builds the full causal
mask and repeats K/V for it, where a real run reads the positions, passes no mask and
lets SDPA handle the grouped heads. :class:`RealIndices` runs the integer arithmetic
that only sizes feed (positions from ``arange``, offsets, comparisons of them) on real
CPU tensors: an op whose tensor inputs are all real, which is neither random nor in
place, and whose outputs are integer or boolean tensors of at most ``MAX_REAL_NUMEL``
elements, runs for real; every other op stays fake. Floats never become real, so
nothing the model computes with its weights is allocated.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

from mhaudit.trace.ops import UNSET_OPS, qualified_name

MAX_REAL_NUMEL = 2**22
"""Largest integer or boolean result (elements) computed for real: position ids of a
4M-token batch, a causal mask of 2048 × 2048."""


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _small_indices(out: Any) -> bool:
    """Integer or boolean tensors only, of at most ``MAX_REAL_NUMEL`` elements in all."""
    tensors = _tensors(out)
    if not tensors or any(t.is_floating_point() or t.is_complex() for t in tensors):
        return False
    return sum(math.prod(t.shape) for t in tensors) <= MAX_REAL_NUMEL


def _stays_fake(func: Any, inputs: list[torch.Tensor]) -> bool:
    """An op that runs on fake tensors whatever its inputs: a higher-order op (the fake
    mode below runs its fake rule), one fed by a fake tensor, one that writes, draws random
    values or leaves its values unset (torch's flex_attention backward makes its
    example indices with ``empty_strided`` and wants them fake)."""
    if isinstance(func, torch._ops.HigherOrderOperator):
        return True
    return any(isinstance(t, FakeTensor) for t in inputs) or func._schema.is_mutable \
        or torch.Tag.nondeterministic_seeded in func.tags \
        or qualified_name(func).rpartition(".")[2] in UNSET_OPS


class RealIndices(TorchDispatchMode):  # type: ignore[no-untyped-call,misc]
    """Runs size-fed integer arithmetic for real; enter it above the ``FakeTensorMode``
    (which must allow non-fake inputs) and below any counter, which sees both kinds.
    Higher-order ops (``flex_attention``) pass through whole."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inputs = _tensors((args, kwargs))
        if _stays_fake(func, inputs):
            return func(*args, **kwargs)
        try:
            out = func(*args, **kwargs)  # on fake tensors: the result's shapes, no values
        except Exception:
            if not _small_indices(inputs):
                raise
            out = None  # a value read (.item(), bool()): fake tensors hold none
        if out is None or _small_indices(out):
            with _disable_current_modes():
                return func(*args, **kwargs)
        return out
