"""The inference peak of live activations, from running the forward on fake tensors.

The forward runs as Python runs it, under ``FakeTensorMode``: no memory is allocated and
no arithmetic done, but every op's output storage is created and freed when Python drops
its last reference. A dispatch mode adds each new storage's bytes to a live count and a
finalizer takes them off, so tensors live as long as the eager code keeps them (locals
until the module returns, caches until the end), which is what an allocator sees. Torch's
``MemTracker`` counts the same way; this is the lean version of it.

With folded layer lists only the representatives run: the bytes each layer leaves alive
(its cache entries, outputs kept for later) are added once per layer it stands for.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from mhaudit.trace.fold import FoldedList


@dataclass(frozen=True)
class PeakEstimate:
    """Peak of live activation bytes in one inference forward, at the model's dtypes."""

    activation_bytes: int
    """Largest sum of live op-output storages (user inputs, parameters and buffers not
    included), per-layer leftovers of folded layers added."""
    retained_bytes: int
    """Bytes still alive when the forward returned (outputs, caches)."""


class LiveStorages(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the bytes of every storage an op creates until Python frees it."""

    def __init__(self, known: Mapping[Any, int] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.live = 0
        self.peak = 0
        self.extra = 0
        """Bytes the folded-away layer copies would hold by now (leftovers × copies)."""
        self.window_peak = 0
        """Peak of ``live`` since the current layer began."""
        self.serial = 0
        """Storages created so far."""
        self._seen: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._known: Mapping[Any, int] = known if known is not None else {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._track(leaf)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        if storage in self._seen or storage in self._known:
            return
        size = int(storage.nbytes())
        self.serial += 1
        self._seen[storage] = (size, self.serial)
        self.live += size
        self.window_peak = max(self.window_peak, self.live)
        self.peak = max(self.peak, self.live + self.extra)
        weakref.finalize(storage, self._free, size)

    def new_bytes(self, value: Any, since: int) -> int:
        """Bytes of the distinct storages in ``value`` created after serial ``since``."""
        sizes: dict[int, int] = {}
        for leaf in tree_leaves(value):
            if isinstance(leaf, torch.Tensor):
                with contextlib.suppress(RuntimeError, NotImplementedError):
                    storage = leaf.untyped_storage()
                    entry = self._seen.get(storage)  # type: ignore[no-untyped-call]
                    if entry is not None and entry[1] > since:
                        sizes[id(storage)] = entry[0]
        return sum(sizes.values())

    def _free(self, size: int) -> None:
        self.live -= size


@contextlib.contextmanager
def _layer_leftovers(model: nn.Module, plans: tuple[FoldedList, ...], mode: LiveStorages
                     ) -> Iterator[None]:
    """Add, after each representative layer, what it left alive times its other copies."""
    handles = []
    for plan in plans:
        layers = model.get_submodule(plan.path) if plan.path else model
        for position, members in enumerate(plan.members):
            copies = len(members) - 1
            if copies < 1 or position >= len(layers):  # type: ignore[arg-type]
                continue
            layer = layers[position]  # type: ignore[index]
            before: list[tuple[int, int, int]] = []

            def pre(_m: nn.Module, _a: Any, before: list[tuple[int, int, int]] = before
                    ) -> None:
                before.append((mode.live, mode.serial, mode.window_peak))
                mode.window_peak = mode.live

            def post(_m: nn.Module, _a: Any, out: Any,
                     before: list[tuple[int, int, int]] = before, copies: int = copies
                     ) -> None:
                if not before:
                    return
                live, serial, outer_peak = before.pop()
                # what one layer leaves alive besides its output (which replaces its input
                # in the next layer): cache entries, tensors kept for later
                left = max(0, mode.live - live - mode.new_bytes(out, serial))
                # the last copy runs with every earlier copy's leftovers alive
                mode.peak = max(mode.peak, mode.window_peak + mode.extra + copies * left)
                mode.extra += copies * left
                mode.window_peak = max(outer_peak, mode.window_peak)

            handles.append(layer.register_forward_pre_hook(pre))
            handles.append(layer.register_forward_hook(post))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def fake_forward_peak(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    plans: tuple[FoldedList, ...] = (),
) -> PeakEstimate:
    """Run ``model`` once on fake tensors under no_grad and return its activation peak.

    ``plans`` are the folded layer lists in effect (the model's lists already hold only
    their representatives). Raises whatever the forward raises on fake tensors.
    """
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake:
        fake_args, fake_kwargs = _fakes(fake, args), _fakes(fake, kwargs)
    known: WeakIdKeyDictionary = WeakIdKeyDictionary()
    for tensor in (*model.parameters(), *model.buffers(), *tree_leaves((args, kwargs))):
        if isinstance(tensor, torch.Tensor):
            with contextlib.suppress(RuntimeError, NotImplementedError):
                known[tensor.untyped_storage()] = 0
    mode = LiveStorages(known)
    was_training = model.training
    model.eval()
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # an op without a fake kernel is reported by the caller
    try:
        with torch.no_grad(), fake, mode, _layer_leftovers(model, plans, mode):
            out = model(*fake_args, **fake_kwargs)
            retained = mode.live + mode.extra
            del out
    finally:
        quiet.setLevel(level)
        model.train(was_training)
    return PeakEstimate(mode.peak, retained)


def _fakes(mode: FakeTensorMode, value: Any) -> Any:
    """User inputs as fake tensors (nested tuples, lists and dicts kept)."""
    if isinstance(value, torch.Tensor):
        return mode.from_tensor(value)
    if isinstance(value, dict):
        return {k: _fakes(mode, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_fakes(mode, v) for v in value)
    return value
