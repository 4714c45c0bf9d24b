"""Measure stage: real latency and peak memory of a model built on cpu or cuda."""

from __future__ import annotations

import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from mhaudit.data import Measurement, Timing
from mhaudit.errors import ConfigError

Progress = Callable[[int, int], None]
"""Called with (done, total) after each timed forward."""


def _timing(samples: Sequence[float]) -> Timing:
    ms = [s * 1000.0 for s in samples]
    return Timing(statistics.median(ms), min(ms), max(ms), len(ms))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def measure(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    block_names: Sequence[str],
    *,
    device: str,
    warmup: int = 2,
    repeats: int = 10,
    progress: Progress | None = None,
) -> Measurement:
    """Time the forward and each attention block; measure peak memory of one forward."""
    if device == "meta":
        raise ConfigError("cannot measure on the meta device", "Pass --device cpu or cuda.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"{device} requested but CUDA is not available",
                          "Use --device cpu, or run on a machine with a GPU.")
    block_samples: dict[str, list[float]] = {name: [] for name in block_names}
    handles = _install_block_timers(model, block_names, block_samples, device)
    forward_samples: list[float] = []
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for _ in range(warmup):
                model(*args, **kwargs)
            for samples in block_samples.values():
                samples.clear()
            for index in range(repeats):
                _sync(device)
                start = time.perf_counter()
                model(*args, **kwargs)
                _sync(device)
                forward_samples.append(time.perf_counter() - start)
                if progress is not None:
                    progress(index + 1, repeats)
        for handle in handles:
            handle.remove()
        handles = []
        peak, method = _peak_memory(model, args, kwargs, device)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    blocks = {name: _timing(s) for name, s in block_samples.items() if s}
    return Measurement(device, _timing(forward_samples), blocks, peak, method)


def _install_block_timers(
    model: nn.Module, names: Sequence[str], samples: dict[str, list[float]], device: str
) -> list[Any]:
    handles: list[Any] = []
    for name in names:
        try:
            module = model.get_submodule(name.split("#")[0])
        except AttributeError:
            continue
        if module is model:
            continue
        started: list[float] = []

        def pre(_m: nn.Module, _a: Any, started: list[float] = started) -> None:
            _sync(device)
            started.append(time.perf_counter())

        def post(_m: nn.Module, _a: Any, _o: Any, name: str = name,
                 started: list[float] = started) -> None:
            _sync(device)
            if started:
                samples[name].append(time.perf_counter() - started.pop())

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    return handles


def _peak_memory(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], device: str
) -> tuple[int | None, str]:
    if device.startswith("cuda"):
        dev = torch.device(device)
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        with torch.inference_mode():
            model(*args, **kwargs)
        torch.cuda.synchronize(dev)
        return torch.cuda.max_memory_allocated(dev) - base, "cuda max_memory_allocated"
    return _cpu_peak(model, args, kwargs)


def _cpu_peak(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[int | None, str]:
    """Peak bytes of live tensor storage allocated during one forward on the CPU."""
    tracker = _AllocationTracker()
    with torch.inference_mode(), tracker:
        model(*args, **kwargs)
    return tracker.peak_bytes, "tracked tensor allocations"


class _AllocationTracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the storage each op allocates and frees it when its last tensor dies."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.live_bytes = 0
        self.peak_bytes = 0
        self._owners: dict[int, int] = {}
        """Storage address to the number of live tensors holding it."""

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self._track(tensor)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        address, size = storage.data_ptr(), storage.nbytes()
        if address == 0:
            return
        if address not in self._owners:
            self._owners[address] = 0
            self.live_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self._owners[address] += 1
        weakref.finalize(tensor, self._release, address, size)

    def _release(self, address: int, size: int) -> None:
        count = self._owners.get(address, 0) - 1
        if count <= 0:
            self._owners.pop(address, None)
            self.live_bytes -= size
        else:
            self._owners[address] = count
