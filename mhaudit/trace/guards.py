"""What the model must not do while it is traced: mix devices, or autocast on meta.

- Legacy constructors (``torch.FloatTensor(d, h, k)``) ignore the default device, so a
  model built under ``torch.device("meta")`` can hold a few CPU parameters beside its
  meta ones. They are moved to meta before tracing (their values are never read).
- ``torch.autocast(x.device.type)`` fails on meta, and a traced autocast region becomes a
  wrapped sub-graph. The audit costs shapes at its own dtype, so autocast regions run as
  plain code while tracing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten


def stray_tensors(model: nn.Module, inputs: Any = ()) -> list[str]:
    """Parameters and buffers off the meta device in a model built on meta.

    The model was built on meta when any of its tensors or of its ``inputs`` is.
    """
    tensors = [*model.named_parameters(remove_duplicate=False),
               *model.named_buffers(remove_duplicate=False)]
    leaves = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)]
    on_meta = any(t.device.type == "meta" for t in [*(t for _, t in tensors), *leaves])
    return [name for name, t in tensors if t.device.type != "meta"] if on_meta else []


def move_stray_tensors(model: nn.Module, inputs: Any = ()) -> list[str]:
    """Move the stray non-meta parameters and buffers to meta; returns their names."""
    stray = set(stray_tensors(model, inputs))
    if not stray:
        return []
    for prefix, module in model.named_modules(remove_duplicate=False):
        for name, param in list(module._parameters.items()):
            if param is not None and _qualified(prefix, name) in stray:
                module._parameters[name] = nn.Parameter(param.to("meta"), param.requires_grad)
        for name, buf in list(module._buffers.items()):
            if buf is not None and _qualified(prefix, name) in stray:
                module._buffers[name] = buf.to("meta")
    return sorted(stray)


def _qualified(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


@contextlib.contextmanager
def plain_autocast() -> Iterator[None]:
    """Run ``torch.autocast`` regions (``with`` blocks and decorators) as plain code."""
    cls = torch.amp.autocast_mode.autocast
    saved = cls.__init__, cls.__enter__, cls.__exit__

    def init(self: Any, device_type: str = "cpu", *args: Any, **kwargs: Any) -> None:
        self.device = device_type
        self.fast_dtype = kwargs.get("dtype")

    def enter(self: Any) -> None:
        return None

    def exit(self: Any, *exc: object) -> None:
        return None

    cls.__init__, cls.__enter__, cls.__exit__ = init, enter, exit  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        cls.__init__, cls.__enter__, cls.__exit__ = saved  # type: ignore[method-assign]
