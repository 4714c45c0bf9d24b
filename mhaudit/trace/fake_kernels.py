"""Ops whose fake-tensor kernel refuses inputs their CPU kernel takes, run at a dtype it takes.

torch's shape function for ``aten._grouped_mm`` holds every input to the CUDA kernel's
bf16 rule, while the CPU kernel multiplies fp32 and fp16 too; transformers' grouped-mm
experts call it at the model's dtype on CPU. Under fake tensors such a call runs on bf16
copies and its output is cast back, so its shape, dtype and place in the record are the
real call's (the copies are made below the recorder and are not recorded).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._guards import detect_fake_mode

_GROUPED_MM = torch.ops.aten._grouped_mm.default


def _refused_dtype(func: Any, args: tuple[Any, ...]) -> torch.dtype | None:
    """The dtype of a ``_grouped_mm`` call on fake or meta tensors that their kernel would
    refuse, else None."""
    if func is not _GROUPED_MM or len(args) < 2:
        return None
    a, b = args[0], args[1]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    if a.dtype == b.dtype == torch.bfloat16 or not a.dtype.is_floating_point:
        return None
    shapes_only = a.is_meta or detect_fake_mode(args) is not None
    return a.dtype if shapes_only else None


def call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)``, with a refused fake ``_grouped_mm`` run in bf16 and cast back."""
    dtype = _refused_dtype(func, args)
    if dtype is None:
        return func(*args, **kwargs)
    out_dtype = kwargs.get("out_dtype") or dtype
    cast = [t.to(torch.bfloat16) if isinstance(t, torch.Tensor) and t.is_floating_point()
            else t for t in args]
    rest = {k: v for k, v in kwargs.items() if k != "out_dtype"}
    if isinstance(rest.get("bias"), torch.Tensor):
        rest["bias"] = rest["bias"].to(torch.bfloat16)
    return func(*cast, **rest).to(out_dtype)
