"""What one inference forward's storages did: live bytes at each new storage, each layer's span.

A :class:`ForwardCounter` is the live-storage counter of :mod:`mhaudit.fake.live` that
also notes the live bytes right after each storage it records, and, through global
module hooks, where each call of a child of a ``ModuleList`` or ``Sequential`` began
and ended. That is everything the inference peak needs, whichever layers were folded: the
peak (:func:`mhaudit.memory.peak.peak_of`) is read from it afterwards, so the forward
that records the graph can count its storages in the same run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhaudit.fake.live import LiveStorages


@dataclass(frozen=True)
class LayerSpan:
    """One call of a layer of a layer list, in storages recorded and live bytes."""

    path: str
    """Qualified name of the layer (``layers.0``)."""
    start: int
    """Storages recorded when the call began."""
    end: int
    """Storages recorded when it returned."""
    live_start_bytes: int
    live_end_bytes: int
    output_bytes: int
    """Bytes of the storages in its output that the call made (they replace its input in
    the next layer)."""


@dataclass(frozen=True)
class ForwardStorages:
    """The storages of one inference forward, as the peak reads them."""

    levels: tuple[int, ...]
    """Live bytes right after each new storage, in the order they were made."""
    spans: tuple[LayerSpan, ...]
    """Layer calls, in the order they returned."""
    retained_bytes: int
    """Bytes still alive when the forward returned (outputs, caches)."""


def _layers(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """Every child of a ``ModuleList`` or ``Sequential``: the layers a fold can stand for."""
    for name, module in model.named_modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            for child_name, child in module.named_children():
                yield (f"{name}.{child_name}" if name else child_name), child


class ForwardCounter(LiveStorages):  # type: ignore[no-untyped-call]
    """The live-storage counter, with the live bytes after each new storage and layer spans."""

    def __init__(self) -> None:
        super().__init__()
        self.levels: list[int] = []
        self.spans: list[LayerSpan] = []

    def _track(self, tensor: torch.Tensor, tick: int) -> None:
        made = self.serial
        super()._track(tensor, tick)
        if self.serial > made:
            self.levels.append(self.live)

    @contextlib.contextmanager
    def layers(self, model: nn.Module) -> Iterator[None]:
        """Note a span for each call of each layer of ``model``'s layer lists.

        The hooks are global: a hook on the layer itself would change what some layers
        run (torch's ``TransformerEncoderLayer`` leaves its fast path when it has hooks).
        """
        paths = {id(layer): path for path, layer in _layers(model)}
        begun: dict[int, list[tuple[int, int]]] = {}

        def pre(module: nn.Module, _args: Any) -> None:
            if id(module) in paths:
                begun.setdefault(id(module), []).append((self.serial, self.live))

        def post(module: nn.Module, _args: Any, out: Any) -> None:
            calls = begun.get(id(module))
            if not calls:
                return
            start, live = calls.pop()
            self.spans.append(LayerSpan(paths[id(module)], start, self.serial, live,
                                        self.live, self.new_bytes(out, start)))

        handles = (nn.modules.module.register_module_forward_pre_hook(pre),
                   nn.modules.module.register_module_forward_hook(post))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def result(self) -> ForwardStorages:
        """What was counted so far (call it while the forward's output is alive)."""
        return ForwardStorages(tuple(self.levels), tuple(self.spans), self.live)
