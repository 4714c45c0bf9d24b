"""The real-forward rung: values read from the data come from a small real forward on CPU.

A model built on meta has no values, so an op whose output shape depends on them
(``nonzero`` in MoE routing, ``.item()`` sizing a padding, a branch on ``mask.any()``)
cannot be traced on fake tensors. When the model's constructor is known (a model file or
a ``config.json``), it is built again on CPU at the same size, seeded, and recorded over a
real forward with the real example inputs: every shape is the one that forward had. The
build runs only when its weights fit :func:`forward_limit`; the decision and its reason go
on the report (``coverage.data_dependent.real_forward``).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from mhaudit.data.tracing import RealForward
from mhaudit.errors import TraceError, first_line
from mhaudit.load.target import model_tensors
from mhaudit.trace.graphs import KNOWN_INPUT, KNOWN_VALUE
from mhaudit.trace.recorder import record
from mhaudit.trace.traced import TracedGraph

REAL_FORWARD_MAX_BYTES = 2 * 1024**3
"""The most parameter and buffer bytes built on CPU for a real forward."""

SEED = 0
"""The random seed the CPU build is made and run under: its weights, the draws its forward
makes (a sampled duration), and so every routing or length they decide, are the same on
every run, and in any reference built and run under the same seed."""

MEMORY_SHARE = 4
"""A real forward may use weights of at most 1/MEMORY_SHARE of the available memory (the
record keeps every activation alive until the graph is read)."""

Built = tuple[nn.Module, tuple[Any, ...], dict[str, Any]]
"""A model and its example inputs: ``(module, args, kwargs)``."""


@dataclass(frozen=True)
class CpuTwin:
    """How to build the audited model again on CPU, from the same constructor and size."""

    build: Callable[[], contextlib.AbstractContextManager[Built]]
    """Builds the CPU model and its inputs for the duration of the ``with`` block."""
    weights_bytes: int
    """Parameter and buffer bytes of the model it builds."""


@contextlib.contextmanager
def seeded() -> Iterator[None]:
    """Run a build under :data:`SEED`, leaving the caller's random state as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        yield


def weights_bytes(model: nn.Module) -> int:
    """Bytes of every distinct parameter and buffer (meta tensors count at their dtype)."""
    seen: dict[int, int] = {}
    for tensor in model_tensors(model):  # no recursion: a 3000-deep stack is walked too
        seen[id(tensor)] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def available_memory_bytes() -> int:
    """Memory the system can still give (``MemAvailable``), else all physical memory."""
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as info:
        for line in info:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(AttributeError, ValueError, OSError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return REAL_FORWARD_MAX_BYTES * MEMORY_SHARE


def forward_limit() -> int:
    """The most weight bytes a real forward may build: REAL_FORWARD_MAX_BYTES, or less
    where the machine has less than MEMORY_SHARE times that available."""
    return min(REAL_FORWARD_MAX_BYTES, available_memory_bytes() // MEMORY_SHARE)


def on_meta(model: nn.Module) -> bool:
    """Whether any of the model's tensors is on the meta device."""
    return any(t.device.type == "meta" for t in model_tensors(model))


def plan_real_forward(model: nn.Module, twin: CpuTwin | None) -> RealForward:
    """Whether the real rung can run, and why (or why not)."""
    limit = forward_limit()
    if not on_meta(model):
        return RealForward(True, "the model holds real weights; its own forward ran",
                           weights_bytes(model), limit)
    if twin is None:
        return RealForward(False, "the model is on meta and mhaudit does not know its "
                           "constructor (audit its file or config, or build it on CPU)",
                           weights_bytes(model), limit)
    if twin.weights_bytes > limit:
        return RealForward(False, f"its weights ({twin.weights_bytes:,} B) exceed the "
                           f"real-forward limit ({limit:,} B)", twin.weights_bytes, limit)
    return RealForward(True, "built on CPU from the same constructor at the given size "
                       "(seeded) and run on the example inputs; its weights fit the limit",
                       twin.weights_bytes, limit)


@contextlib.contextmanager
def _same(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[Built]:
    yield model, args, kwargs


def real_record(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                twin: CpuTwin | None) -> tuple[TracedGraph, RealForward]:
    """The record of a real forward (the model's own, or its CPU twin's) and the decision.

    Raises TraceError with the decision's reason when no real forward may run.
    """
    decision = plan_real_forward(model, twin)
    if not decision.ran:
        raise TraceError(f"no real forward: {decision.reason}",
                         "Build the model with --device cpu, or audit its file or config.")
    source = _same(model, args, kwargs) if twin is None or not on_meta(model) else twin.build()
    with source as (built, built_args, built_kwargs):
        built.eval()
        traced = record(built, built_args, built_kwargs, fake=False)
    return traced, decision


STATE_MAX_ELEMENTS = 1 << 24
"""The most elements of a buffer or input whose values are kept to be read (a causal mask
of 4096 × 4096 positions is 2²⁴); larger ones stay on meta."""

_NO_CONSTRUCTOR = ("the model is on meta and mhaudit does not know its constructor "
                   "(audit its file or config, or build it on CPU)")


@contextlib.contextmanager
def weights_on_meta(max_elements: int = STATE_MAX_ELEMENTS) -> Iterator[None]:
    """Build with every parameter moved to meta as it is registered (its initialisation
    then runs on meta), and every buffer above ``max_elements``: what the constructor
    computes into its small buffers (a causal mask) is real, at the cost of those alone."""
    def parameter(_module: nn.Module, _name: str, param: Any) -> Any:
        if isinstance(param, nn.Parameter) and param.device.type != "meta":
            return nn.Parameter(param.to("meta"), param.requires_grad)
        return None

    def buffer(_module: nn.Module, _name: str, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.numel() > max_elements:
            return value.to("meta")
        return None

    hooks = (nn.modules.module.register_module_parameter_registration_hook(parameter),
             nn.modules.module.register_module_buffer_registration_hook(buffer))
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


class StateValues:
    """The values the audited model's buffers and example inputs were made with, on CPU.

    A model on meta holds none: where its constructor is known (``twin``), it is built
    again on CPU with its weights on meta (:func:`weights_on_meta`), once, when a value is
    first asked for. Each answer is the tensor or why it cannot be known."""

    def __init__(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                 twin: CpuTwin | None) -> None:
        self.twin = twin
        self.state: tuple[dict[str, torch.Tensor], list[Any]] | str | None = None
        if not on_meta(model):
            self.state = (dict(model.named_buffers()), _tensor_leaves(args, kwargs))
        elif twin is None:
            self.state = _NO_CONSTRUCTOR

    def buffer(self, name: str) -> torch.Tensor | str:
        """The value buffer ``name`` was built with, or why it is not known."""
        state = self._state()
        if isinstance(state, str):
            return f"buffer {name}: {state}"
        value = state[0].get(name)
        if value is None or value.device.type == "meta":
            return (f"buffer {name} has more than {STATE_MAX_ELEMENTS:,} elements"
                    if value is not None else f"the CPU build has no buffer {name}")
        return value

    def input(self, position: int) -> torch.Tensor | None:
        """The value of the ``position``-th tensor among the example inputs; None when not
        known (a mask read from an input is the caller's, not a buffer left unread)."""
        state = self._state()
        if isinstance(state, str) or position >= len(state[1]):
            return None
        value = state[1][position]
        return None if value.device.type == "meta" else value

    def _state(self) -> tuple[dict[str, torch.Tensor], list[Any]] | str:
        if self.state is None:
            self.state = self._build()
        return self.state

    def _build(self) -> tuple[dict[str, torch.Tensor], list[Any]] | str:
        """The constructor's buffers and inputs, with its weights on meta; where its code
        refuses meta weights (an initialisation meta has no kernel for), built whole on
        CPU when its weights fit :func:`forward_limit`."""
        twin = self.twin
        assert twin is not None
        try:
            with weights_on_meta(), twin.build() as (built, args, kwargs):
                return dict(built.named_buffers()), _tensor_leaves(args, kwargs)
        except Exception as exc:  # any failure of the model's code: the values are unknown
            failed = f"building its buffers on CPU failed ({first_line(exc, 120)})"
        if twin.weights_bytes > forward_limit():
            return failed
        try:
            with twin.build() as (built, args, kwargs):
                return dict(built.named_buffers()), _tensor_leaves(args, kwargs)
        except Exception:  # the whole build fails too: the first failure says why
            return failed


def _tensor_leaves(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The example inputs' tensors, in the order the tracers make their placeholders."""
    return [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]


def attach_values(traced: TracedGraph, values: StateValues) -> None:
    """Offer each buffer and input placeholder its value (:data:`KNOWN_VALUE`,
    :data:`KNOWN_INPUT`), asked for only by a reader that needs it."""
    inputs = {name: position for position, name in enumerate(traced.user_inputs)}
    for node in traced.graph.nodes:
        if node.op != "placeholder":
            continue
        if node.name in traced.buffers:
            node.meta[KNOWN_VALUE] = functools.partial(values.buffer, traced.buffers[node.name])
        elif node.name in inputs:
            node.meta[KNOWN_INPUT] = functools.partial(values.input, inputs[node.name])
