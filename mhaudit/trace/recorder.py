"""The first and the last rungs of the tracer ladder: record every dispatched op as it runs.

A ``TorchDispatchMode`` writes each aten call into an fx graph shaped like an exported
one (placeholders for parameters, buffers and inputs; ``meta["val"]`` and
``meta["nn_module_stack"]`` on every node), while global module hooks keep the stack of
modules that are running. It runs over fake tensors (no memory, no compute) or, as the
last resort on a real device, over a real forward. The composites of ``WHOLE_OPS`` are
recorded whole, as export keeps them, also when a ``torch.nn.functional`` function calls
them (SDPA inside ``multi_head_attention_forward``); other composite ops arrive decomposed
(``reshape`` as ``clone`` + ``_unsafe_view``), which detection reads too.

Over fake tensors the same run counts the storages each op makes and Python frees
(:mod:`mhaudit.fake.counter`), so it also answers the inference peak; the graph then
holds stand-ins for the values (:mod:`mhaudit.trace.stand_ins`), which keep no storage
alive.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import FunctionType
from typing import Any

import torch
from torch import fx, nn
from torch._higher_order_ops.flex_attention import flex_attention as flex_attention_hop
from torch.overrides import TorchFunctionMode, redispatch_function
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from mhaudit.data.tracing import DataDependence
from mhaudit.fake.counter import ForwardCounter, ForwardStorages
from mhaudit.fake.mode import FakeMode
from mhaudit.fake.run import FakeForward, fake_forward
from mhaudit.load.packed import as_linear, packed_weights
from mhaudit.trace.flex import eager_flex, flex_facts
from mhaudit.trace.guards import plain_causal_bias, unbiased_sdpa
from mhaudit.trace.ops import WHOLE_OPS
from mhaudit.trace.stand_ins import StandIns
from mhaudit.trace.traced import WRAPPER, TracedGraph, output_tensors

_IGNORED = frozenset({torch.ops.aten._local_scalar_dense.default, torch.ops.prim.device.default})


def _nonzero_bound(tensor: torch.Tensor) -> torch.Tensor:
    """``nonzero`` at its largest size: one (all-zero) index row per element of the input."""
    return torch.zeros(tensor.numel(), tensor.dim(), dtype=torch.long,
                       device=tensor.device)  # (numel, ndim)


def _masked_select_bound(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``masked_select`` at its largest size: every element of the broadcast input."""
    size = torch.broadcast_shapes(tensor.shape, mask.shape).numel()  # type: ignore[no-untyped-call]
    return tensor.new_zeros(size)  # (numel,)


UPPER_BOUNDS: dict[Any, Any] = {
    torch.ops.aten.nonzero.default: _nonzero_bound,
    torch.ops.aten.masked_select.default: _masked_select_bound,
}
"""Ops whose output size depends on the values, with the largest output their inputs allow;
used only where a real forward cannot run (the bound is stated on the report)."""

BOUND_NOTES = {
    "aten::nonzero": "as many index rows as its input has elements",
    "aten::masked_select": "every element of its input",
}
"""What each bound assumes, for the report."""


class _Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call,misc]
    """Appends one node per dispatched op; tensors are matched to nodes by identity.

    Higher-order ops (``flex_attention``) come here too, and are recorded whole: the modes
    below (the fake one) run them, and their pieces are not seen."""

    supports_higher_order_operators = True

    def __init__(self, graph: fx.Graph, stack: list[tuple[str, str]], guess: bool,
                 values: StandIns | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.graph = graph
        self.guess = guess
        """Read data-dependent scalars (``.item()``, ``bool(t)``) as 0: fake tensors hold none."""
        self.guesses = 0
        self.bounded: dict[str, int] = {}
        """Op name to calls whose data-dependent output size was set at its upper bound."""
        self.stack = stack
        self.values = values
        """Where node values wait for the end of the forward (None: held as they are)."""
        self.nodes: dict[int, tuple[weakref.ref[torch.Tensor], fx.Node]] = {}
        self.constants = 0
        self.fast_path_checks = 0
        """Times a module's forward asked whether its tensors are overridden (see
        :func:`_fast_path_checks`)."""
        self.paused = 0
        """Above zero while a composite op recorded whole runs its pieces."""
        self.packed: dict[str, tuple[object, object]] = {}
        """A packed object's name (quantized weights) to the nodes of its weight and bias."""

    def bind(self, tensor: torch.Tensor, node: fx.Node) -> None:
        """``tensor`` is now what ``node`` computes (held weakly: Python frees it as the
        eager code would; a dead tensor's id is matched to nothing)."""
        self.nodes[id(tensor)] = (weakref.ref(tensor), node)
        self.value(node, tensor)

    def value(self, node: fx.Node, value: Any) -> None:
        """``node``'s ``meta["val"]``, now or, with stand-ins, once the forward is done."""
        if self.values is None:
            node.meta["val"] = value
        else:
            self.values.note(node, value)

    def node_of(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        held = self.nodes.get(id(value))
        if held is not None and held[0]() is value:
            return held[1]
        self.constants += 1  # a tensor made outside any op we saw (a literal, a constant)
        node = self.graph.create_node("get_attr", f"_constant_{self.constants}")
        self.bind(value, node)
        return node

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and self.guess:
            self.guesses += 1
            dtype = args[0].dtype
            return False if dtype == torch.bool else 0.0 if dtype.is_floating_point else 0
        if func in UPPER_BOUNDS and self.guess:
            self.bounded[func.name()] = self.bounded.get(func.name(), 0) + 1
            out = UPPER_BOUNDS[func](*args, **kwargs)
        else:
            out = func(*args, **kwargs)
        if func in _IGNORED or self.paused:
            return out
        node = self.add(func, tuple(args), dict(kwargs), out)
        if func is flex_attention_hop:
            with self:  # score_mod runs once on one score, recorded: a learned bias it reads
                node.meta["flex"] = flex_facts(tuple(args))  # counts as used
        return out

    def add(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
            ) -> fx.Node:
        """One node for ``func(*args, **kwargs) -> out``; its tensors become its values."""
        owner = self.stack[-1][0].removeprefix(WRAPPER).lstrip(".") if self.stack else ""
        owner = owner + "." if owner else ""
        owned = [nodes for name, nodes in self.packed.items() if name.startswith(owner)]
        linear = as_linear(func, args, owned) if self.packed else None
        if linear is not None:  # a packed quantized linear: a linear on its weight and bias
            func, args = linear
        node = self.graph.call_function(func, tree_map(self.node_of, args),
                                        tree_map(self.node_of, kwargs))
        node.meta["nn_module_stack"] = {
            f"L__{i}": (path, kind) for i, (path, kind) in enumerate(self.stack)
        }
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        elif isinstance(out, (list, tuple)):
            self.value(node, out)
            for index, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    pick = self.graph.call_function(operator.getitem, (node, index))
                    pick.meta["nn_module_stack"] = node.meta["nn_module_stack"]
                    self.bind(item, pick)
        return node


@contextlib.contextmanager
def _fast_path_checks(recorder: _Recorder) -> Iterator[None]:
    """Count the calls a module's ``forward`` makes to ``torch.overrides.has_torch_function``.

    Torch's fused fast paths (``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``)
    ask it to choose between one fused kernel and its pieces. Under the record's function
    mode the answer is yes, so the record runs the pieces where the model alone runs the
    kernel: the graph is the one export sees, but the storages are not the model's own.
    """
    asked = torch.overrides.has_torch_function

    def ask(args: Iterable[Any]) -> bool:
        caller = sys._getframe(1)
        if caller.f_code.co_name == "forward" and isinstance(caller.f_locals.get("self"),
                                                             nn.Module):
            recorder.fast_path_checks += 1
        return bool(asked(args))

    torch.overrides.has_torch_function = ask
    try:
        yield
    finally:
        torch.overrides.has_torch_function = asked


def _composite_function(func: Any) -> bool:
    """A Python function of ``torch.nn.functional``: the torch functions it calls are seen."""
    return isinstance(func, FunctionType) and func.__module__ == "torch.nn.functional"


class _Composites(TorchFunctionMode):
    """Records the composite ops of ``WHOLE_OPS`` whole and hides their pieces."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if self.recorder.paused:
            return func(*args, **kwargs)
        if name not in WHOLE_OPS:
            if not _composite_function(func):
                return func(*args, **kwargs)
            with self:  # see what it calls (F.linear inside F.multi_head_attention_forward)
                return redispatch_function(func, types, args, kwargs)  # type: ignore[no-untyped-call]
        if name == "scaled_dot_product_attention":
            args, kwargs = unbiased_sdpa(tuple(args), kwargs)
        self.recorder.paused += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self.recorder.paused -= 1
        if not isinstance(out, torch.Tensor):
            return out
        aten_args = tuple(args)
        if name == "einsum":  # torch.einsum(eq, a, b) -> aten.einsum(eq, [a, b])
            packed = len(args) == 2 and isinstance(args[1], (list, tuple))
            operands = args[1] if packed else args[1:]
            aten_args = (args[0], list(operands))
        if name == "softmax":  # F.softmax's keyword-only extras are not aten arguments
            kwargs = {k: v for k, v in kwargs.items() if k in ("dim", "dtype")}
        target = torch.ops.aten.matmul if name == "__matmul__" else getattr(torch.ops.aten, name)
        self.recorder.add(target.default if name != "softmax" else target.int, aten_args,
                          kwargs, out)
        return out


@contextlib.contextmanager
def _module_stack(model: nn.Module, stack: list[tuple[str, str]]) -> Iterator[None]:
    """Keep ``stack`` equal to the (path, class) of the modules running, outermost first."""
    names: dict[int, str] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        names.setdefault(id(module), f"{WRAPPER}.{name}" if name else WRAPPER)

    def push(module: nn.Module, _args: Any) -> None:
        path = names.get(id(module))
        if path is not None:
            stack.append((path, type(module).__qualname__))

    def pop(module: nn.Module, _args: Any, _out: Any) -> None:
        if id(module) in names and stack:
            stack.pop()

    pre = nn.modules.module.register_module_forward_pre_hook(push)
    post = nn.modules.module.register_module_forward_hook(pop)
    try:
        yield
    finally:
        pre.remove()
        post.remove()


@dataclass(frozen=True)
class RecordedGraph(TracedGraph):
    """A graph from the record, with what the storages of its forward did."""

    storages: ForwardStorages | None = None
    """The fake forward's storages, counted while it was recorded (None for a real forward,
    one that read data-dependent values as 0, or one that chose a fast path by whether its
    tensors are overridden: their storages are not the model's own)."""


def record(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], *, fake: bool,
           guess: bool = False, method: str = "", dtype: torch.dtype | None = None
           ) -> RecordedGraph:
    """Run ``model`` once (over fake tensors when ``fake``) and return the recorded graph.

    A fake forward runs on fake CPU copies of the model's state and inputs, whatever
    device they were built on (the kernels a real run picks), floats at ``dtype`` (the
    audited one; None keeps their own), and counts its storages as it goes: one run
    answers the graph and the inference peak at that dtype, upcasts in the model's code
    included. With ``guess`` (a model on
    meta that cannot run for real), data-dependent scalars read as 0 and data-dependent
    sizes (``nonzero``) at their upper bound instead of failing; the method says how many,
    and ``data_dependent`` states each bound.
    """
    if not fake:
        return _record(model, args, kwargs, None, False, method or "dispatch-real")
    try:
        with fake_forward(model, args, kwargs, dtype) as forward:
            return _record(model, forward.args, forward.kwargs, forward, guess,
                           method or "dispatch-fake")
    except RuntimeError as exc:
        if not _swap_refused(exc):
            raise
    # module.to() in the forward: torch swaps a fake parameter for a new one and refuses,
    # as the fake mode holds both weakly. Record over the model's own tensors instead (the
    # peak then comes from a pass of its own).
    with FakeMode(allow_non_fake_inputs=True):
        return _record(model, args, kwargs, None, guess, method or "dispatch-fake")


def _swap_refused(exc: RuntimeError) -> bool:
    """``module.to()`` / ``_apply`` could not swap a fake parameter (its weak references)."""
    cause = exc.__cause__
    return str(exc).startswith("_apply(): Couldn't swap") and "weakref" in str(cause)


def _placeholders(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                  recorder: _Recorder) -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    """Placeholders for the parameters, buffers and input tensors; their names by kind."""
    graph = recorder.graph
    params: dict[str, str] = {}
    buffers: dict[str, str] = {}
    for kind, table, items in (("p", params, model.named_parameters()),
                               ("b", buffers, model.named_buffers())):
        for name, tensor in items:
            node = graph.placeholder(f"{kind}_{name.replace('.', '_')}")
            table[node.name] = name
            recorder.bind(tensor, node)
    for packed in packed_weights(model):
        parts = {p: t for p, t in (("weight", packed.weight), ("bias", packed.bias))
                 if t is not None}
        nodes = {part: graph.placeholder(f"p_{packed.name.replace('.', '_')}_{part}")
                 for part in parts}
        for part, node in nodes.items():
            params[node.name] = f"{packed.name}.{part}"
            value = parts[part]
            recorder.value(node, value.int_repr() if value.is_quantized else value)
        recorder.packed[packed.name] = (nodes["weight"], nodes.get("bias"))
    leaves, _ = tree_flatten((args, kwargs))
    inputs: list[str] = []
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            node = graph.placeholder(f"input_{index}")
            inputs.append(node.name)
            recorder.bind(leaf, node)
    return params, buffers, tuple(inputs)


def _record(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
            forward: FakeForward | None, guess: bool, method: str) -> RecordedGraph:
    """Record one forward: a real one, or ``forward`` (fake) with its storages counted."""
    counter = ForwardCounter() if forward is not None else None
    stack: list[tuple[str, str]] = []
    recorder = _Recorder(fx.Graph(), stack, guess,
                         StandIns(counter.storage_index) if counter is not None else None)
    params, buffers, inputs = _placeholders(model, args, kwargs, recorder)
    watch = (_module_stack(model, stack), _fast_path_checks(recorder), eager_flex(),
             plain_causal_bias(), recorder, _Composites(recorder))
    if forward is None or counter is None:
        with contextlib.ExitStack() as scope:
            for context in (torch.no_grad(), *watch):
                scope.enter_context(context)
            result = model(*args, **kwargs)
    else:
        counter.known(forward.tensors())
        result = forward(counter, counter.layers(model), *watch)
    recorder.graph.output(tuple(recorder.node_of(t) for t in output_tensors(result)))
    counted = counter is not None and not (recorder.guesses or recorder.bounded
                                           or recorder.fast_path_checks)
    storages = counter.result() if counter is not None and counted else None
    del result
    if recorder.values is not None:
        recorder.values.fill()
    notes = _bound_notes(recorder)
    if notes:
        method += f" ({'; '.join(notes)})"
    bounds = tuple(f"{count} {op} call(s) at their upper bound: {BOUND_NOTES.get(op, op)}"
                   for op, count in sorted(recorder.bounded.items()))
    if recorder.guesses:
        bounds += (f"{recorder.guesses} scalar(s) read from tensor values (.item(), "
                   "bool(tensor)) taken as 0: fake tensors hold no values",)
    dependence = DataDependence(method, (), None, bounds) if bounds else None
    return RecordedGraph(graph=recorder.graph, method=method, params=params, buffers=buffers,
                         user_inputs=inputs, data_dependent=dependence, storages=storages)


def _bound_notes(recorder: _Recorder) -> list[str]:
    notes = []
    if recorder.guesses:
        notes.append(f"{recorder.guesses} data-dependent value(s) read as 0")
    sizes = sum(recorder.bounded.values())
    if sizes:
        notes.append(f"{sizes} data-dependent size(s) at their upper bound")
    return notes
