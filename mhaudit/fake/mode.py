"""mhaudit's fake-tensor mode: torch's, with shape functions that take what CPU kernels take.

torch's shape function for ``aten._grouped_mm`` holds every input to the CUDA kernel's
bf16 rule, while the CPU kernel multiplies fp32 and fp16 too, and transformers'
grouped-mm experts call it at the model's dtype on CPU. In :class:`FakeMode` such a call
runs on bf16 copies and its output is cast back, inside the fake mode: a recorder, a
FLOP counter or a memory tracker above it sees the one call, at its real shapes and dtype.

Small integer tensors whose values their maker chose (a patch grid, placed tokens:
:func:`mark_known`) stay real in a mode that allows real inputs: an op over such tensors
only, each of at most :data:`KNOWN_LIMIT` elements, runs for real (its outputs are known
too), and so does a factory op that makes a small integer tensor, so that a
model's reads of their values (``.tolist()``, ``repeat_interleave`` by a grid) see the
values, while everything that touches a fake tensor stays fake.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._mode_utils import no_dispatch
from torch.utils._pytree import tree_leaves

_GROUPED_MM = torch.ops.aten._grouped_mm.default
_TO_COPY = torch.ops.aten._to_copy.default
_LIFTS = (torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default)

KNOWN_LIMIT = 1 << 16
"""Most elements of a real CPU tensor a fake pass computes for real (index arithmetic on
known values: grids, token ids, positions); larger ones, and every float made from
nothing, stay fake."""


def known(t: Any) -> bool:
    """A plain (not fake) CPU tensor of at most :data:`KNOWN_LIMIT` elements."""
    return type(t) is torch.Tensor and _small_cpu(t)


def _small_cpu(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and t.numel() <= KNOWN_LIMIT


def _index_like(t: Any) -> bool:
    """A small integer or boolean CPU tensor, fake or not."""
    return isinstance(t, torch.Tensor) and _small_cpu(t) and not t.is_floating_point() \
        and not t.is_complex()


_MADE: dict[int, weakref.ref[torch.Tensor]] = {}
"""Inputs whose values their maker chose, by ``id`` (see :func:`mark_known`)."""


def mark_known(t: torch.Tensor) -> torch.Tensor:
    """Mark an input whose values its maker chose (a patch grid, placed tokens): a fake
    pass keeps it real where :func:`known_int` holds. Returns ``t``."""
    key = id(t)

    def forget(_: Any) -> None:
        _MADE.pop(key, None)

    _MADE[key] = weakref.ref(t, forget)
    return t


def _real(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``func`` run for real, its tensor outputs marked known."""
    with no_dispatch():
        out = func(*args, **kwargs)
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor):
            mark_known(t)
    return out


def known_int(t: Any) -> bool:
    """A :func:`known` integer or boolean tensor marked by :func:`mark_known`: values a
    fake pass keeps real."""
    return _index_like(t) and _marked(t)


def _marked(t: Any) -> bool:
    """A :func:`known` tensor marked by :func:`mark_known` (or made from such ones)."""
    ref = _MADE.get(id(t)) if known(t) else None
    return ref is not None and ref() is t


def _refused(func: Any, args: tuple[Any, ...]) -> bool:
    """A ``_grouped_mm`` of floating tensors that are not both bf16."""
    if func is not _GROUPED_MM or len(args) < 2:
        return False
    a, b = args[0], args[1]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return a.dtype.is_floating_point and not a.dtype == b.dtype == torch.bfloat16


class FakeMode(FakeTensorMode):  # type: ignore[no-untyped-call]
    """``FakeTensorMode`` that runs a refused ``_grouped_mm`` on bf16 copies.

    Higher-order ops (``flex_attention``) reach its ``__torch_dispatch__``, which runs their
    fake rules: torch looks those up by the mode's exact type, which a subclass is not."""

    supports_higher_order_operators = True

    def dispatch(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if not self.allow_non_fake_inputs:
            return self._unrefused(func, types, args, kwargs)
        if func in _LIFTS and all(_index_like(t) for t in tensors):
            return _real(func, args, kwargs)  # torch.tensor(...) of the code's own values
        if tensors and all(_marked(t) for t in tensors):
            return _real(func, args, kwargs)  # known values only: computed for real
        if not tensors:
            out = self._unrefused(func, types, args, kwargs)
            if not _index_like(out) or "empty" in func.__name__:  # values left unset
                return out
            return _real(func, args, kwargs)  # an index tensor made from nothing (arange)
        return self._unrefused(func, types, args, kwargs)

    def _unrefused(self, func: Any, types: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """The fake dispatch, with a refused ``_grouped_mm`` run on bf16 copies."""
        if not _refused(func, tuple(args)):
            return super().dispatch(func, types, args, kwargs)

        def cast(value: Any, dtype: torch.dtype) -> Any:
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return super(FakeMode, self).dispatch(_TO_COPY, types, (value,),
                                                      {"dtype": dtype})
            return value

        out_dtype = kwargs.pop("out_dtype", None) or args[0].dtype
        if "bias" in kwargs:
            kwargs["bias"] = cast(kwargs["bias"], torch.bfloat16)
        out = super().dispatch(func, types, tuple(cast(a, torch.bfloat16) for a in args),
                               kwargs)
        return cast(out, out_dtype)
