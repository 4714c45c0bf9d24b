"""mhaudit's fake-tensor mode: torch's, with shape functions that take what CPU kernels take.

torch's shape function for ``aten._grouped_mm`` holds every input to the CUDA kernel's
bf16 rule, while the CPU kernel multiplies fp32 and fp16 too, and transformers'
grouped-mm experts call it at the model's dtype on CPU. In :class:`FakeMode` such a call
runs on bf16 copies and its output is cast back, inside the fake mode: a recorder, a
FLOP counter or a memory tracker above it sees the one call, at its real shapes and dtype.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

_GROUPED_MM = torch.ops.aten._grouped_mm.default
_TO_COPY = torch.ops.aten._to_copy.default


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
