"""Live-storage tracking under fake tensors: every storage an op makes, when it dies, and FLOPs.

A :class:`LiveStorages` dispatch mode sits inside a ``FakeTensorMode``. Each op's
output storages are recorded with the op's index (its tick), the phase and the
module that made them; a weak reference notes the tick at which the storage is
freed. Live bytes after op ``t`` are the storages born at or before ``t`` and freed
after it, which is how torch's MemTracker counts them (no allocator rounding).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mhaudit.phases.backward_flops import op_flops

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


class LiveStorages(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Record op output storages, their deaths and op FLOPs (use inside FakeTensorMode)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.log = StepLog()
        self.phase = "forward"
        self.owner: str | None = None
        self._live: dict[int, int] = {}
        self._known: set[int] = set()
        self._refs: list[weakref.ref[Any]] = []

    def known(self, tensors: Iterable[torch.Tensor]) -> None:
        """Storages that exist before the step (weights, inputs, states): never recorded.

        The caller keeps them alive while the tracker runs.
        """
        self._known.update(t.untyped_storage()._cdata for t in tensors)

    def _freed(self, key: int, index: int) -> Callable[[Any], None]:
        def note(_: Any) -> None:
            self.log.records[index].freed = self.log.ticks
            self._live.pop(key, None)

        return note

    def _track(self, tensor: torch.Tensor, tick: int) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._live or key in self._known:
            return
        index = len(self.log.records)
        self.log.records.append(StorageRecord(
            storage.nbytes(), tick, self.phase, tuple(int(s) for s in tensor.shape), self.owner))
        self._live[key] = index
        self._refs.append(weakref.ref(storage, self._freed(key, index)))

    def storage_index(self, tensor: torch.Tensor) -> int | None:
        """The record of a tensor's storage, when the step made it and it is alive."""
        return self._live.get(tensor.untyped_storage()._cdata)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        tick = self.log.ticks
        flops = op_flops(func, args, kwargs, out, self.log.missing)
        self.log.tick_flops.append(flops)
        for value in tree_flatten(out)[0]:
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
