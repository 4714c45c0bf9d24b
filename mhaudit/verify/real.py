"""Real CPU copies of a model's state and inputs, for a step that runs for real."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from mhaudit.fake.swap import Role, swapped_state


def _real_like(t: torch.Tensor, dtype: torch.dtype, generator: torch.Generator,
               is_param: bool) -> torch.Tensor:
    """A CPU copy of ``t`` (floats at ``dtype``); a meta tensor has no values, so a
    parameter gets N(0, 0.02) draws and a buffer zeros (an input mask: ones)."""
    target = dtype if t.is_floating_point() else t.dtype
    if t.device.type != "meta":
        return t.detach().to(device="cpu", dtype=target, copy=True)
    if is_param and t.is_floating_point():
        made = torch.empty(tuple(t.shape), dtype=torch.float32)
        return made.normal_(0.0, 0.02, generator=generator).to(target)
    fill = 1 if t.dtype == torch.bool else 0
    return torch.full(tuple(t.shape), fill, dtype=target)


@contextlib.contextmanager
def real_state(model: nn.Module, dtype: torch.dtype) -> Iterator[bool]:
    """Swap parameters, buffers and tensor attributes for real CPU copies (floats at
    ``dtype``); tied tensors stay tied. The originals are untouched and put back
    afterwards. Yields True when some state was on meta and its values were made up."""
    generator = torch.Generator().manual_seed(0)
    invented = False

    def make(t: torch.Tensor, role: Role) -> torch.Tensor:
        nonlocal invented
        if role != "attr":
            invented |= t.device.type == "meta"
            return _real_like(t, dtype, generator, role == "param")
        return _real_like(t, t.dtype, generator, False)

    with swapped_state(model, make):
        yield invented


def real_inputs(value: Any, dtype: torch.dtype, name: str = "") -> Any:
    """Inputs with every tensor replaced by a real CPU one (floats at ``dtype``). A meta
    tensor's values are made up: floats N(0, 1), a ``*mask*`` argument all ones (nothing
    masked), other integers 0 (token ids, labels)."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "meta":
            return _real_like(value, dtype, torch.Generator(), False)
        shape = tuple(value.shape)
        if value.is_floating_point():
            return torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
        return torch.full(shape, 1 if "mask" in name or value.dtype == torch.bool else 0,
                          dtype=value.dtype)
    if isinstance(value, dict):
        return {k: real_inputs(v, dtype, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(real_inputs(v, dtype, name) for v in value)
    return value
