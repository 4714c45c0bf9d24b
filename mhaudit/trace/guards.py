"""What the model must not do while it is traced: mix devices, or autocast on meta.

- Legacy constructors (``torch.FloatTensor(d, h, k)``) ignore the default device, so a
  model built under ``torch.device("meta")`` can hold a few CPU parameters beside its
  meta ones. They are moved to meta before tracing (their values are never read).
- Nested (jagged) tensors carry their ragged lengths as symbolic sizes that neither fake
  tensors nor the graph readers hold, and CPU SDPA has no kernel for them: they are refused
  with one line that says so.
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


NESTED_LIMITATION = (
    "nested (jagged) tensors are not traced: their ragged lengths are symbolic sizes the "
    "tracer cannot cost, and CPU SDPA has no kernel for them"
)
NESTED_TIP = ("Pass padded tensors with an attention mask (torch.nested.to_padded_tensor) "
              "in example_inputs(), and pad inside forward() for the audit.")


def nested_inputs(inputs: Any) -> bool:
    """True when any input tensor is a nested (jagged or strided) tensor."""
    return any(isinstance(t, torch.Tensor) and t.is_nested for t in tree_flatten(inputs)[0])


def nested_failure(failures: list[tuple[str, BaseException]]) -> bool:
    """True when a rung failed on a nested tensor's ragged size (made inside forward)."""
    return any(word in f"{exc}" for _, exc in failures
               for word in ("NestedIntNode", "NestedTensor("))


@contextlib.contextmanager
def plain_causal_bias() -> Iterator[None]:
    """Make torch's ``CausalBias`` (``causal_lower_right``, ``causal_upper_left``) outside
    the record's modes: a tensor subclass made under a fake or recording mode is refused
    ("already associated to a python object"). It holds no values, only its variant."""
    from torch.nn.attention.bias import CausalBias
    from torch.utils._python_dispatch import _disable_current_modes

    own = CausalBias.__dict__.get("__new__")
    made = CausalBias.__new__

    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            return made(cls, *args, **kwargs)

    CausalBias.__new__ = new  # type: ignore[assignment]
    try:
        yield
    finally:
        if own is None:
            del CausalBias.__new__
        else:
            CausalBias.__new__ = own  # type: ignore[method-assign]


def unbiased_sdpa(args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """An SDPA call with a ``CausalBias`` mask as torch runs it where no fused kernel takes
    it: ``is_causal`` for an upper-left (or square) one, else the lower-right triangle
    ``tril(ones(n_q, n_kv), n_kv − n_q)`` made here, so that the record holds it."""
    from torch.nn.attention.bias import CausalBias, CausalVariant

    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    if not isinstance(mask, CausalBias):
        return args, kwargs
    kwargs = {k: v for k, v in kwargs.items() if k != "attn_mask"}
    args = args[:3]
    if mask.seq_len_q == mask.seq_len_kv or mask.variant == CausalVariant.UPPER_LEFT:
        return args, {**kwargs, "is_causal": True}
    offset = mask.seq_len_kv - mask.seq_len_q
    triangle = torch.ones(mask.seq_len_q, mask.seq_len_kv, dtype=torch.bool,
                          device=args[0].device).tril(offset)  # (n_q, n_kv)
    return args, {**kwargs, "attn_mask": triangle}
