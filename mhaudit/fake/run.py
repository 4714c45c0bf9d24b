"""Fake CPU stand-ins for a model's state and inputs, whatever device they were built on.

A model built on the meta device runs its ops on meta, where PyTorch has no fused
attention kernels: ``scaled_dot_product_attention`` falls back to its math form and
keeps the b·h·n² scores a CPU or GPU kernel never materialises. Swapped for fake CPU
tensors, the same model runs the kernels a real run does, with nothing allocated.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves, tree_map_only

from mhaudit.fake.mode import FakeMode, known_int
from mhaudit.fake.swap import Role, swapped_state

RUN_DTYPES: frozenset[str] = frozenset({"float64", "float32", "bfloat16", "float16"})
"""Audited dtypes (canonical names) the fake passes run at: CPU kernels compute in them."""


def run_dtype(name: str) -> torch.dtype | None:
    """The dtype a fake pass gives floating parameters, buffers and inputs for an audit at
    ``name`` (a canonical dtype name), so that upcasts in the model's code (``.float()``
    logits, an fp32 softmax) make the copies they make on the target. None for a dtype
    the CPU kernels do not compute in (fp8, int8): those passes keep the model's own
    dtypes and the bytes they count are scaled to the audited element size."""
    return getattr(torch, name) if name in RUN_DTYPES else None


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
    def make(t: torch.Tensor, role: Role) -> torch.Tensor:
        return _fake_like(mode, t, t.dtype if role == "attr" else dtype)

    with swapped_state(model, make) as swapped:
        params = swapped.params.values()
        yield (sum(p.numel() * p.element_size() for p in params),
               sum(b.numel() * b.element_size() for b in swapped.buffers), swapped.params)


def fake_inputs(value: Any, mode: FakeTensorMode, dtype: torch.dtype | None,
                made: dict[int, torch.Tensor] | None = None) -> Any:
    """Inputs with every tensor replaced by a fake CPU one (floats at ``dtype``), in
    containers of their own types (dicts, lists, tuples, named tuples, model outputs).

    With ``made`` (fakes by the ``id`` of the tensor they stand for), a tensor given
    twice (``(x, x, x)`` as query, key and value) gets one fake; without, each place
    gets its own, as inputs made one by one for a reference step are.

    Small integer CPU tensors their maker marked (:func:`~mhaudit.fake.mode.known_int`: a patch
    grid) stay real: their values are known, and the model may read them.
    """
    def fake(t: torch.Tensor) -> torch.Tensor:
        if known_int(t):
            return t
        if made is None:
            return _fake_like(mode, t, dtype)
        if id(t) not in made:
            made[id(t)] = _fake_like(mode, t, dtype)
        return made[id(t)]

    return tree_map_only(torch.Tensor, fake, value)


@dataclass(frozen=True)
class FakeForward:
    """A model whose state is swapped for fake CPU tensors, and its fake inputs."""

    model: nn.Module
    mode: FakeTensorMode
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def tensors(self) -> list[torch.Tensor]:
        """The fake parameters, buffers and input tensors: what the forward is given."""
        given = tree_leaves((self.args, self.kwargs))
        return [t for t in (*self.model.parameters(), *self.model.buffers(), *given)
                if isinstance(t, torch.Tensor)]

    def __call__(self, *contexts: contextlib.AbstractContextManager[Any]) -> Any:
        """One no_grad forward under the fake mode and ``contexts`` (counters, hooks)."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            stack.enter_context(self.mode)
            for context in contexts:
                stack.enter_context(context)
            return self.model(*self.args, **self.kwargs)


@contextlib.contextmanager
def fake_forward(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 dtype: torch.dtype | None = None) -> Iterator[FakeForward]:
    """``model`` in eval mode on fake CPU copies of its state and inputs (floats at
    ``dtype``; None keeps their own), ready for a no_grad inference forward; its state and
    mode are put back afterwards. Fake-tensor warnings are silenced: an op without a fake
    kernel raises, and the caller reports it."""
    mode = FakeMode(allow_non_fake_inputs=True)
    was_training = model.training
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    model.eval()
    try:
        with fake_state(model, mode, dtype):
            f_args, f_kwargs = fake_inputs((args, dict(kwargs)), mode, dtype, {})
            yield FakeForward(model, mode, f_args, f_kwargs)
    finally:
        quiet.setLevel(level)
        model.train(was_training)
