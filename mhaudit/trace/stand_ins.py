"""Node values that keep no storage alive, so the record can count storages as Python frees them.

The record runs the eager forward while a storage counter watches each storage be made
and freed. A graph that held the forward's own tensors in ``meta["val"]`` would keep
every storage alive to the end. Instead, each value is noted when its op returns (shape,
strides, dtype, and which counted storage it lies on) and made again after the forward
as a meta tensor on a stand-in storage: one per storage the forward made, so views still
share theirs. Tensors on storages the counter does not count (weights, inputs) are held
as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

StorageIndex = Callable[[torch.Tensor], "int | None"]
"""The counter's index of a tensor's storage, None for a storage it does not count."""


@dataclass(frozen=True)
class _Noted:
    """A tensor on a counted storage, as it was when its op returned."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    storage: int
    nbytes: int


class StandIns:
    """Notes node values during the forward and puts stand-ins in ``meta["val"]`` after it."""

    def __init__(self, index: StorageIndex) -> None:
        self._index = index
        self._pending: list[tuple[fx.Node, Any]] = []

    def note(self, node: fx.Node, value: Any) -> None:
        """``value`` (a tensor, or a list or tuple of values) is what ``node`` computes."""
        self._pending.append((node, self._noted(value)))

    def _noted(self, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [self._noted(v) for v in value] if isinstance(value, list) else tuple(
                self._noted(v) for v in value)
        if not isinstance(value, torch.Tensor):
            return value
        index = self._index(value)
        if index is None:
            return value  # a storage that is not counted: holding it changes nothing
        return _Noted(tuple(int(s) for s in value.shape), tuple(int(s) for s in value.stride()),
                      int(value.storage_offset()), value.dtype, index,
                      int(value.untyped_storage().nbytes()))

    def fill(self) -> None:
        """Put each noted value in its node's ``meta["val"]``, counted storages stood in for."""
        storages: dict[int, torch.UntypedStorage] = {}

        def made(value: Any) -> Any:
            if isinstance(value, list):
                return [made(v) for v in value]
            if isinstance(value, tuple):
                return tuple(made(v) for v in value)
            if not isinstance(value, _Noted):
                return value
            storage = storages.get(value.storage)
            if storage is None:
                storage = storages[value.storage] = torch.UntypedStorage(  # type: ignore[no-untyped-call]
                    value.nbytes, device="meta")
            tensor = torch.empty(0, dtype=value.dtype, device="meta")
            return tensor.set_(storage, value.offset, value.shape, value.stride)

        for node, value in self._pending:
            node.meta["val"] = made(value)
        self._pending.clear()
