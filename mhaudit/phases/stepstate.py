"""Where a training step runs: on fake tensors (nothing allocated), or for real on CPU.

The fake state swaps a model's parameters, buffers and tensor attributes for fake CPU
tensors at the training precision. The real state swaps them for real CPU copies at that
precision: the rung for a model whose shapes depend on the data (``nonzero`` routing),
which fake tensors cannot hold. Either way the originals are put back on exit, so the
audited model never gets a gradient or a cast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map_only

from mhaudit.fake.mode import FakeMode
from mhaudit.fake.run import fake_inputs, fake_state
from mhaudit.fake.swap import Role, swapped_state
from mhaudit.phases.indices import RealIndices
from mhaudit.trace.recorder import BOUND_NOTES, UPPER_BOUNDS

RUNGS = {
    "fake": "on fake tensors (nothing allocated)",
    "real-cpu": "for real on a CPU build (seeded), as the inference's real forward",
    "fake-bounded": "on fake tensors, data-dependent sizes at their upper bound",
}
"""Where a training step can run, tried in this order, and what each means."""


@dataclass(frozen=True)
class StepState:
    """A model's state swapped for the step's tensors, and how its inputs are made."""

    param_bytes: int
    buffer_bytes: int
    params: dict[int, nn.Parameter]
    """Each original parameter's stand-in, by the original's ``id``."""
    inputs: Callable[[Any], Any]
    """Turns the example inputs into the step's tensors (floats at the step's dtype)."""
    modes: Callable[[], contextlib.AbstractContextManager[Any]]
    """The modes the step runs under (the fake mode and real index arithmetic; none for
    a real step)."""


class UpperBounds(TorchDispatchMode):  # type: ignore[no-untyped-call,misc]
    """Ops whose output size depends on the values (``nonzero``, ``masked_select``) at the
    largest size their fake inputs allow, as the inference's bounded rung reads them;
    ``bounded`` counts the calls by op name. Enter it above the fake mode."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bounded: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in UPPER_BOUNDS and any(isinstance(t, FakeTensor)
                                        for t in tree_leaves((args, kwargs))):
            self.bounded[func.name()] = self.bounded.get(func.name(), 0) + 1
            return UPPER_BOUNDS[func](*args, **kwargs)
        return func(*args, **kwargs)

    def notes(self) -> tuple[str, ...]:
        """Each bounded op's calls and what its bound assumes, for the report."""
        return tuple(f"{count} {op} call(s) at their upper bound: {BOUND_NOTES.get(op, op)}"
                     for op, count in sorted(self.bounded.items()))


def _real_like(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """A real CPU copy of ``t``; floats at ``dtype`` (None: ``t``'s own)."""
    target = dtype if dtype is not None and t.is_floating_point() else t.dtype
    return t.detach().to(device="cpu", dtype=target, copy=True)


@contextlib.contextmanager
def _real_state(model: nn.Module, dtype: torch.dtype) -> Iterator[StepState]:
    def make(t: torch.Tensor, role: Role) -> torch.Tensor:
        return _real_like(t, None if role == "attr" else dtype)

    def inputs(value: Any) -> Any:
        return tree_map_only(torch.Tensor, lambda t: _real_like(t, dtype), value)

    with swapped_state(model, make) as swapped:
        yield StepState(sum(p.numel() * p.element_size() for p in swapped.params.values()),
                        sum(b.numel() * b.element_size() for b in swapped.buffers),
                        swapped.params, inputs, contextlib.nullcontext)


@contextlib.contextmanager
def _fake_state(model: nn.Module, dtype: torch.dtype, bounds: UpperBounds | None
                ) -> Iterator[StepState]:
    mode = FakeMode(allow_non_fake_inputs=True)  # real index arithmetic meets fakes

    @contextlib.contextmanager
    def modes() -> Iterator[None]:
        with mode, RealIndices(), bounds or contextlib.nullcontext():
            yield

    with fake_state(model, mode, dtype) as (param_bytes, buffer_bytes, fakes):
        yield StepState(param_bytes, buffer_bytes, fakes,
                        lambda value: fake_inputs(value, mode, dtype), modes)


def step_state(model: nn.Module, dtype: torch.dtype, rung: str,
               bounds: UpperBounds | None = None
               ) -> contextlib.AbstractContextManager[StepState]:
    """``model``'s state for a step at ``dtype`` on ``rung`` (:data:`RUNGS`): real CPU
    copies, or fake tensors (with ``bounds``, data-dependent sizes at their bound)."""
    if rung == "real-cpu":
        return _real_state(model, dtype)
    return _fake_state(model, dtype, bounds)
