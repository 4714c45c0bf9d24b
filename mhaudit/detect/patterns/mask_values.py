"""Mask values read from what the constructor built: a causal mask held in a buffer.

A model built on meta holds no values, so a mask kept as a buffer
(``register_buffer("bias", tril(ones(T, T)))``) reaches the graph as a slice or an index
of a placeholder, with no ``tril`` or ``arange`` left to read. Where the buffer's value is
offered (:func:`~mhaudit.trace.graphs.known_value`), the ops between it and the scores
run on it, on CPU, and what the mask keeps is read back as the tightest band around it
(:func:`band`). A buffer whose value cannot be known makes the mask unknown, with why:
never "not causal".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from mhaudit.trace.graphs import KNOWN_INPUT, known_value, numel, shape, val, written_in_place
from mhaudit.trace.ops import MASK_PASS_OPS, PICK_OPS, VALUE_FREE_OPS, is_in_place, op_name

MAX_ELEMENTS = 1 << 24
"""The most elements of one tensor computed to read a mask (a 4096 × 4096 mask)."""
_MAX_NODES = 96
BLOCKING = -1e4
"""A score at or below this is removed (−inf, or a dtype's most negative number)."""


@dataclass(frozen=True)
class Known:
    """The value a mask node has, computed on CPU from a buffer's or an input's value."""

    tensor: torch.Tensor


@dataclass(frozen=True)
class Unknown:
    """A mask node whose value depends on a buffer whose value is not known."""

    why: str


class _Free:
    """A node made from sizes and numbers alone (``arange``, ``ones``): computed only where
    it meets a known value."""


FREE = _Free()
Value = Known | Unknown | _Free | None


class Values:
    """Evaluates the nodes that lead from buffers to a mask, on CPU; with ``inputs``, from
    the example inputs too (only the positions a buffer is picked at are read from them:
    asking for an input's value builds the constructor's buffers)."""

    def __init__(self, inputs: bool = False) -> None:
        self.cache: dict[fx.Node, Value] = {}
        self.inputs = inputs

    def of(self, node: fx.Node) -> Value:
        """The node's value: known, unknown (why), made from sizes alone, or None where it
        reads no buffer or input value (an activation, a parameter)."""
        if node not in self.cache:
            self.cache[node] = None  # a cycle or the budget: nothing known
            if len(self.cache) <= _MAX_NODES:
                self.cache[node] = self._evaluate(node)
        return self.cache[node]

    def _evaluate(self, node: fx.Node) -> Value:
        if node.op == "placeholder":
            return _placeholder(node, self.inputs)
        if node.op != "call_function" or is_in_place(node):
            return None
        name = op_name(node)
        if name in VALUE_FREE_OPS:
            return FREE
        values = [self.of(n) for n in node.all_input_nodes]
        if name in PICK_OPS and node.all_input_nodes:
            return self._pick(node, values)
        unknown = next((v for v in values if isinstance(v, Unknown)), None)
        if unknown is not None:
            return unknown
        if any(v is None for v in values) or not any(isinstance(v, Known) for v in values):
            return FREE if values and all(v is FREE for v in values) else None
        return self._run(node)

    def _pick(self, node: fx.Node, values: list[Value]) -> Value:
        """Elements of a known tensor at positions: unknown where the positions are."""
        base, positions = values[0], values[1:]
        if not isinstance(base, Known):
            return base if isinstance(base, Unknown) else None
        if not self.inputs and any(v is None for v in positions):
            positions = self._from_inputs(node.all_input_nodes[1:], positions)
        if all(isinstance(v, (Known, _Free)) for v in positions):
            return self._run(node)
        reason = next((v.why for v in positions if isinstance(v, Unknown)), None)
        return Unknown(reason or f"{op_name(node)} picks from a buffer at positions whose "
                       "values are not known")

    def _from_inputs(self, nodes: list[fx.Node], values: list[Value]) -> list[Value]:
        """The values of ``nodes``, those not known from buffers read from the inputs."""
        read = Values(inputs=True)
        found = [read.of(n) if v is None else v for n, v in zip(nodes, values, strict=True)]
        self.cache.update((n, v) for n, v in read.cache.items() if self.cache.get(n) is None)
        return found

    def _run(self, node: fx.Node) -> Value:
        """The node's op on CPU over its inputs' values."""
        if numel(node) > MAX_ELEMENTS:
            return Unknown(f"{op_name(node)} makes {numel(node):,} elements, more than "
                           f"{MAX_ELEMENTS:,} read")
        try:
            out = self._call(node)
        except Exception as exc:  # an op the CPU values refuse: the mask is not known
            return Unknown(f"{op_name(node)} failed on the buffer's values "
                           f"({type(exc).__name__})")
        if not isinstance(out, torch.Tensor) or out.device.type != "cpu":
            return None
        return Known(out)

    def _call(self, node: fx.Node) -> Any:
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), self._tensor)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": torch.device("cpu")}
        return node.target(*args, **kwargs)  # type: ignore[operator]

    def _tensor(self, node: fx.Node) -> Any:
        """A node's value as an argument: known, made now, or (for an op that reads only
        its sizes) zeros of its shape."""
        value = self.cache.get(node)
        if isinstance(value, Known):
            return value.tensor
        if value is FREE:
            if numel(node) > MAX_ELEMENTS:
                raise ValueError("too large")
            return self._call(node)
        fake = val(node)
        dtype = fake.dtype if fake is not None else torch.float32
        return torch.zeros(shape(node), dtype=dtype)


def _placeholder(node: fx.Node, inputs: bool) -> Value:
    """A buffer's offered value (an input's, with ``inputs``); a buffer the forward writes
    into, or one whose value cannot be known, is unknown."""
    value = known_value(node)
    if value is None and inputs:
        value = known_value(node, KNOWN_INPUT)
    if isinstance(value, str):
        return Unknown(value)
    if value is None:
        return None
    if written_in_place(node):
        return Unknown(f"{node.name} is written in forward")
    if tuple(value.shape) != shape(node):
        return Unknown(f"{node.name} was built {tuple(value.shape)}, traced {shape(node)}")
    if value.layout != torch.strided:  # a sparse buffer reads as the values it holds
        if value.numel() > MAX_ELEMENTS:
            return Unknown(f"{node.name} holds {value.numel():,} elements, more than read")
        value = value.to_dense()
    return Known(value)


def kept(value: torch.Tensor, removes: bool, scales: bool = False) -> torch.Tensor:
    """Where a mask keeps scores: a boolean mask's True (its False where it marks what it
    removes, as ``masked_fill``'s does); a factor's nonzero values (``scales``: the scores
    are multiplied by it, a decay matrix); an additive one's above :data:`BLOCKING`."""
    if value.dtype == torch.bool:
        return ~value if removes else value
    return value != 0 if scales else value > BLOCKING


def negated(value: Known | Unknown) -> Known | Unknown | None:
    """The complement of a known boolean mask (``~mask``); an unknown one stays unknown."""
    if isinstance(value, Known):
        return Known(~value.tensor) if value.tensor.dtype == torch.bool else None
    return value


def band(keep: torch.Tensor) -> tuple[tuple[tuple[int, int, int], ...], bool]:
    """The tightest band i + lowest ≤ j ≤ i + offset around what a (…, n_q, n_kv) mask
    keeps for some batch row or head, as constraints (a, b, c) meaning a·i + b·j + c ≥ 0,
    each only where it removes a key from some query; and whether the mask keeps less
    than the band (then it is an upper bound). A mask of one row or column says nothing
    of a diagonal."""
    if keep.dim() < 2 or min(keep.shape[-2:]) < 2:
        return (), True
    rows, cols = keep.shape[-2:]
    keep = keep.reshape(-1, rows, cols).any(0)  # (n_q, n_kv): kept for some row or head
    if not keep.any():
        return (), True
    i = torch.arange(rows)[:, None]  # (n_q, 1) query index
    j = torch.arange(cols)[None, :]  # (1, n_kv) key index
    ahead = (j - i).expand(rows, cols)  # keys past the diagonal
    offset, lowest = int(ahead[keep].max()), int(ahead[keep].min())
    found: tuple[tuple[int, int, int], ...] = ()
    if bool((i + offset < cols - 1).any()):  # j ≤ i + offset cuts some row short
        found += ((1, -1, offset),)
    if bool((i + lowest > 0).any()):  # j ≥ i + lowest starts some row late
        found += ((-1, 1, -lowest),)
    exact = torch.equal(keep, (ahead <= offset) & (ahead >= lowest))
    return found, not exact


def is_blocking(value: object) -> bool:
    """A fill value that removes a score: −inf or the dtype's most negative number, as a
    number or as a one-number tensor made from it (``scalar_tensor``, ``full``)."""
    number = _scalar(value)
    return number is not None and number < BLOCKING


def _scalar(value: object) -> float | None:
    """The number a fill value holds: itself, or what a scalar tensor was made from."""
    for _ in range(4):
        if isinstance(value, bool) or not isinstance(value, (int, float, fx.Node)):
            return None
        if not isinstance(value, fx.Node):
            return float(value)
        name = op_name(value)
        if name == "scalar_tensor" and value.args:
            value = value.args[0]
        elif name == "full" and len(value.args) >= 2:
            value = value.args[1]
        elif name in MASK_PASS_OPS and value.args:
            value = value.args[0]
        else:
            return None
    return None


def from_arange(node: fx.Node) -> bool:
    """Both compared operands derive from position ranges (arange), through any ops."""
    found = 0
    for operand in node.all_input_nodes[:2]:
        probe: fx.Node | None = operand
        for _ in range(12):
            if probe is None or probe.op != "call_function":
                break
            if op_name(probe) == "arange":
                found += 1
                break
            ins = probe.all_input_nodes
            probe = ins[0] if ins else None
    return found == 2
