"""Measure stage: real latency and peak memory of a model built on cpu or cuda."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from mhaudit.cost.devices import canonical_dtype
from mhaudit.data import Measurement, Timing
from mhaudit.errors import ConfigError
from mhaudit.fake.live import LiveStorages
from mhaudit.measure.timer import Progress, synchronize, time_calls


def _timing(samples: Sequence[float]) -> Timing:
    ms = [s * 1000.0 for s in samples]
    return Timing(statistics.median(ms), min(ms), max(ms), len(ms))


def at_dtype(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dtype: str | None
) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """The model and inputs with floating tensors at ``dtype`` (a cast copy; the caller's
    model is left as it is). Unchanged when ``dtype`` is None or already the model's."""
    if dtype is None:
        return model, args, kwargs
    target = getattr(torch, canonical_dtype(dtype))
    floats = [p for p in model.parameters() if p.is_floating_point()]
    if all(p.dtype == target for p in floats):
        return model, args, kwargs

    def cast(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(target)
        return value

    copy = copy_module(model).to(target)
    return copy, pytree.tree_map(cast, args), pytree.tree_map(cast, kwargs)


def copy_module(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` (its weights are copied too)."""
    import copy

    return copy.deepcopy(model)


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
    dtype: str | None = None,
) -> Measurement:
    """Time the forward and each attention block; measure peak memory of one forward.

    With ``dtype`` the model and its floating inputs are cast to it first (on a copy),
    so the measurement is at the dtype the estimates are costed at.
    """
    if device == "meta":
        raise ConfigError("cannot measure on the meta device", "Pass --device cpu or cuda.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"{device} requested but CUDA is not available",
                          "Use --device cpu, or run on a machine with a GPU.")
    model, args, kwargs = at_dtype(model, args, kwargs, dtype)
    block_samples: dict[str, list[float]] = {name: [] for name in block_names}

    def warm() -> None:  # block times from the timed forwards only
        for samples in block_samples.values():
            samples.clear()

    was_training = model.training
    model.eval()
    try:
        with contextlib.ExitStack() as hooks:
            for handle in _install_block_timers(model, block_names, block_samples, device):
                hooks.callback(handle.remove)
            forward_samples = time_calls(lambda: model(*args, **kwargs), device,
                                         repeats=repeats, warmup=warmup, after_warmup=warm,
                                         progress=progress)
        peak, method = _peak_memory(model, args, kwargs, device)
    finally:
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
            synchronize(device)
            started.append(time.perf_counter())

        def post(_m: nn.Module, _a: Any, _o: Any, name: str = name,
                 started: list[float] = started) -> None:
            synchronize(device)
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
    tracker = LiveStorages()
    with torch.inference_mode(), tracker:
        model(*args, **kwargs)
    return tracker.peak, "tracked tensor allocations"
