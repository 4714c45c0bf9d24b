"""The optimizer update on fake tensors of every parameter's full shape, in steady state."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from mhaudit.fake.live import LiveStorages
from mhaudit.fake.mode import FakeMode

OPTIMIZERS: dict[str, Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None] = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-3, foreach=True),
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9, foreach=True),
    "none": None,
}
"""Optimizer name to how torch builds it (foreach: what torch picks on CUDA by default)."""


@dataclass(frozen=True)
class OptimizerRun:
    """Bytes of one update: states that persist, the gradients it reads, its temporaries."""

    state_bytes: int
    grad_bytes: int
    temporary_bytes: int
    """Peak of tensors the update makes and frees (foreach intermediates)."""
    host_state_bytes: int = 0
    """States torch keeps on the host for device parameters (Adam's ``step`` counters)."""

    @property
    def peak_bytes(self) -> int:
        """Gradients, states and temporaries at the update's peak (parameters apart)."""
        return self.state_bytes + self.grad_bytes + self.temporary_bytes


def _nbytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def on_host(key: str, value: torch.Tensor, group: dict[str, object]) -> bool:
    """True when torch keeps this state on the host for CUDA parameters: a scalar ``step``
    of an update that is neither capturable nor fused (``torch.tensor(0.0)`` in Adam's,
    AdamW's and their kin's ``_init_group``; on the parameter's device otherwise)."""
    return key == "step" and value.dim() == 0 and not group.get("capturable") \
        and not group.get("fused")


def optimizer_step(params: Sequence[nn.Parameter], optimizer: str, dtype: torch.dtype,
                   copies: Sequence[int] | None = None, device: str = "cuda") -> OptimizerRun:
    """Run one update on fake copies of ``params`` at ``dtype`` and track it.

    ``copies[i]`` is how many parameters of the full model ``params[i]`` stands for
    (folded layers): its gradient and states count that many times, and the update's
    temporaries, which foreach makes per parameter and in proportion to its size, are
    scaled by the full parameter bytes over those run. The states the first update
    makes are counted as alive throughout (steady state); the temporaries are
    everything else it makes, at their highest. On a ``cuda`` target the states torch
    keeps on the host (:func:`on_host`) are not device memory: ``host_state_bytes``.
    """
    copies = list(copies) if copies is not None else [1] * len(params)
    grad_bytes = sum(p.numel() * n for p, n in zip(params, copies, strict=True)) * dtype.itemsize
    build = OPTIMIZERS[optimizer]
    if build is None or not params:
        return OptimizerRun(0, grad_bytes, 0)
    mode = FakeMode()
    with mode:
        fakes = [nn.Parameter(torch.empty(tuple(p.shape), dtype=dtype, device="cpu"))
                 for p in params]
        for p in fakes:
            p.grad = torch.empty_like(p)
        opt = build(fakes)
        tracker = LiveStorages()
        tracker.phase = "optimizer"
        tracker.known([*fakes, *(p.grad for p in fakes if p.grad is not None)])
        with tracker:
            opt.step()  # the first step makes the states; the update after it is the same
        states = [v for state in opt.state.values() for v in state.values()
                  if isinstance(v, torch.Tensor)]
        groups = {id(p): g for g in opt.param_groups for p in g["params"]}
        state_bytes = host_bytes = 0
        for p, n in zip(fakes, copies, strict=True):
            for key, v in opt.state[p].items():
                if not isinstance(v, torch.Tensor):
                    continue
                if device == "cuda" and on_host(key, v, groups[id(p)]):
                    host_bytes += n * _nbytes([v])
                else:
                    state_bytes += n * _nbytes([v])
        state_records = {tracker.storage_index(t) for t in states} - {None}
    log = tracker.log
    for index, rec in enumerate(log.records):
        rec.category = "grads" if index in state_records else "temporaries"
    temporary = max((level[2] for level in log.levels()), default=0)
    run_bytes = sum(p.numel() for p in params) * dtype.itemsize
    scaled = temporary * grad_bytes // run_bytes if run_bytes else temporary
    return OptimizerRun(state_bytes, grad_bytes, scaled, host_bytes)
