"""Fake CPU stand-ins for a model's state and inputs, whatever device they were built on.

A model built on the meta device runs its ops on meta, where PyTorch has no fused
attention kernels: ``scaled_dot_product_attention`` falls back to its math form and
keeps the b·h·n² scores a CPU or GPU kernel never materialises. Swapped for fake CPU
tensors, the same model runs the kernels a real run does, with nothing allocated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode


def _fake_like(mode: FakeTensorMode, t: torch.Tensor, dtype: torch.dtype | None
               ) -> torch.Tensor:
    """A fake CPU tensor shaped like ``t``; floats at ``dtype`` (None: ``t``'s own)."""
    target = dtype if dtype is not None and t.is_floating_point() else t.dtype
    with mode:
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=target, device="cpu")


@contextlib.contextmanager
def fake_state(model: nn.Module, mode: FakeTensorMode, dtype: torch.dtype | None
               ) -> Iterator[tuple[int, int, dict[int, nn.Parameter]]]:
    """Swap parameters, buffers and tensor attributes for fake CPU tensors (floats at
    ``dtype``; None keeps each one's own), whatever device they were built on.

    Yields the parameter and buffer bytes and each original parameter's fake one by ``id``.
    """
    swapped: list[tuple[dict[str, Any], str, Any]] = []
    made: dict[int, Any] = {}
    param_bytes = buffer_bytes = 0
    try:
        for module in model.modules():
            for table, is_param in ((module._parameters, True), (module._buffers, False)):
                for name, value in list(table.items()):
                    if value is None:
                        continue
                    if id(value) not in made:
                        fake = _fake_like(mode, value, dtype)
                        if is_param:
                            fake = nn.Parameter(fake, requires_grad=value.requires_grad)
                            param_bytes += fake.numel() * fake.element_size()
                        else:
                            buffer_bytes += fake.numel() * fake.element_size()
                        made[id(value)] = fake
                    swapped.append((table, name, value))
                    table[name] = made[id(value)]
            for name, value in list(vars(module).items()):
                if isinstance(value, torch.Tensor) and not name.startswith("_"):
                    swapped.append((vars(module), name, value))
                    vars(module)[name] = made.setdefault(id(value), _fake_like(mode, value,
                                                                               value.dtype))
        fakes = {key: value for key, value in made.items() if isinstance(value, nn.Parameter)}
        yield param_bytes, buffer_bytes, fakes
    finally:
        for table, name, value in reversed(swapped):
            table[name] = value


def fake_inputs(value: Any, mode: FakeTensorMode, dtype: torch.dtype | None) -> Any:
    """Inputs with every tensor replaced by a fake CPU one (floats at ``dtype``)."""
    if isinstance(value, torch.Tensor):
        return _fake_like(mode, value, dtype)
    if isinstance(value, dict):
        return {k: fake_inputs(v, mode, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(fake_inputs(v, mode, dtype) for v in value)
    return value
