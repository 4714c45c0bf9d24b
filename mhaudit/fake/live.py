"""The one live-storage counter: every storage an op makes, its bytes, and when Python frees it.

A :class:`LiveStorages` dispatch mode sits inside a ``FakeTensorMode`` (or over real
tensors). Each op's output storages are recorded with the op's index (its tick), the
phase and the module that made them; a weak reference notes the tick at which the
storage is freed and takes its bytes off the live count. Live bytes after op ``t`` are
the storages born at or before ``t`` and freed after it, which is how torch's
MemTracker counts them (no allocator rounding). The inference peak reads the running
count (through :class:`~mhaudit.fake.counter.ForwardCounter`); the training step
reads the log.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mhaudit.data import Layout

OpFlops = Callable[[Any, tuple[Any, ...], dict[str, Any], Any, dict[str, int]], int]
"""FLOPs of one dispatched call (func, args, kwargs, out, missing): what a tick records."""

MAX_FAKE_NUMEL = 2**62
"""Largest tensor a fake forward can describe (torch's storage sizes are 64-bit)."""

CATEGORIES = ("activations", "grads", "temporaries")
"""What a storage made during the step can hold; fixed state is counted apart."""


@dataclass
class StorageRecord:
    """One storage made by an op of the step."""

    nbytes: int
    born: int
    """Tick of the op that made it."""
    phase: str
    """``forward`` or ``backward`` when it was made."""
    shape: tuple[int, ...]
    """Shape of the first tensor seen on it."""
    owner: str | None
    """The attention block whose forward made it, if any."""
    freed: int | None = None
    """Tick after which it is no longer alive; None when alive at the end."""
    category: str = "activations"


@dataclass
class StepLog:
    """What one tracked run recorded."""

    records: list[StorageRecord] = field(default_factory=list)
    marks: list[tuple[str, str, int]] = field(default_factory=list)
    """(event, layer key, tick) for layer forward and backward starts and ends."""
    tick_flops: list[int] = field(default_factory=list)
    """FLOPs of the op at each tick."""
    missing: dict[str, int] = field(default_factory=dict)
    """Op name to calls without a FLOP formula."""

    @property
    def ticks(self) -> int:
        """Ops dispatched."""
        return len(self.tick_flops)

    def levels(self) -> list[tuple[int, int, int]]:
        """Live (activations, grads, temporaries) bytes after each tick."""
        deltas = [[0, 0, 0] for _ in range(self.ticks + 1)]
        for rec in self.records:
            index = CATEGORIES.index(rec.category)
            deltas[rec.born][index] += rec.nbytes
            if rec.freed is not None and rec.freed <= self.ticks:
                deltas[rec.freed][index] -= rec.nbytes
        out: list[tuple[int, int, int]] = []
        live = [0, 0, 0]
        for tick in range(self.ticks):
            live = [a + b for a, b in zip(live, deltas[tick], strict=True)]
            out.append((live[0], live[1], live[2]))
        return out

    def boundaries(self) -> list[tuple[int, int, int]]:
        """Live bytes at each boundary B (0..ticks): after op B − 1 and the frees that follow."""
        freed = [[0, 0, 0] for _ in range(self.ticks + 1)]
        for rec in self.records:
            if rec.freed is not None and rec.freed <= self.ticks:
                freed[rec.freed][CATEGORIES.index(rec.category)] += rec.nbytes
        out: list[tuple[int, int, int]] = [(0, 0, 0)]
        for tick, live in enumerate(self.levels(), start=1):
            gone = freed[tick]
            out.append((live[0] - gone[0], live[1] - gone[1], live[2] - gone[2]))
        return out

    def mark(self, event: str, key: str) -> int | None:
        """The tick of the first mark ``event`` for ``key``."""
        for name, k, tick in self.marks:
            if name == event and k == key:
                return tick
        return None


def is_scores_of(shape: Sequence[int], layout: Layout) -> bool:
    """True for a score-shaped storage of ``layout``: (…, n_q, n_kv) with b·h·n_q·n_kv
    elements (scores, probabilities, masks over them)."""
    n_q, n_kv = layout.seq_len_q, layout.seq_len_kv
    return len(shape) >= 2 and tuple(shape[-2:]) == (n_q, n_kv) and math.prod(shape) == (
        layout.batch_size * layout.num_heads * n_q * n_kv)


def _storage(tensor: torch.Tensor) -> Any:
    """The tensor's untyped storage, or None for a tensor without one."""
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


class LiveStorages(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Record op output storages, their deaths and, with ``op_flops``, op FLOPs.

    ``live`` is the bytes alive now; ``peak`` the largest ``live`` any new storage reached.
    Higher-order ops (``flex_attention``) pass through as one op.
    """

    supports_higher_order_operators = True

    def __init__(self, op_flops: OpFlops | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.log = StepLog()
        self.phase = "forward"
        self.owner: str | None = None
        self.live = 0
        self.peak = 0
        self._op_flops = op_flops
        self._live: dict[int, int] = {}
        self._known: set[int] = set()
        self._refs: list[weakref.ref[Any]] = []

    @property
    def serial(self) -> int:
        """Storages recorded so far."""
        return len(self.log.records)

    def known(self, tensors: Iterable[torch.Tensor]) -> None:
        """Storages that exist before the step (weights, inputs, states): never recorded.

        The caller keeps them alive while the tracker runs.
        """
        for tensor in tensors:
            storage = _storage(tensor)
            if storage is not None:
                self._known.add(storage._cdata)

    def _freed(self, key: int, index: int) -> Callable[[Any], None]:
        def note(_: Any) -> None:
            record = self.log.records[index]
            record.freed = self.log.ticks
            self._live.pop(key, None)
            self.live -= record.nbytes

        return note

    def _track(self, tensor: torch.Tensor, tick: int) -> None:
        storage = _storage(tensor)
        if storage is None:
            return
        key = storage._cdata
        if key in self._live or key in self._known:
            return
        index = len(self.log.records)
        size = int(storage.nbytes())
        self.log.records.append(StorageRecord(
            size, tick, self.phase, tuple(int(s) for s in tensor.shape), self.owner))
        self._live[key] = index
        self.live += size
        self.peak = max(self.peak, self.live)
        self._refs.append(weakref.ref(storage, self._freed(key, index)))

    def storage_index(self, tensor: torch.Tensor) -> int | None:
        """The record of a tensor's storage, when the step made it and it is alive."""
        storage = _storage(tensor)
        return None if storage is None else self._live.get(storage._cdata)

    def new_bytes(self, value: Any, since: int) -> int:
        """Bytes of the distinct live storages in ``value`` recorded after serial ``since``."""
        indices = {self.storage_index(leaf) for leaf in tree_leaves(value)
                   if isinstance(leaf, torch.Tensor)}
        return sum(self.log.records[i].nbytes for i in indices if i is not None and i >= since)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        tick = self.log.ticks
        flops = 0 if self._op_flops is None else self._op_flops(
            func, args, kwargs, out, self.log.missing)
        self.log.tick_flops.append(flops)
        for value in tree_leaves(out):
            if isinstance(value, torch.Tensor):
                self._track(value, tick)
        return out


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a nested output (tuples, lists, dicts, model outputs)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif hasattr(value, "to_tuple"):
        yield from tensors_in(value.to_tuple())
