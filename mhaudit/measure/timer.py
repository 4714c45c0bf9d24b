"""The one timer: wall time of repeated calls on cpu or cuda, synchronised around each call."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

Progress = Callable[[int, int], None]
"""Called with (done, total) after each timed call."""


def synchronize(device: str) -> None:
    """Wait for the work queued on ``device`` (a no-op off cuda)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def time_calls(
    step: Callable[[], Any],
    device: str,
    *,
    repeats: int,
    warmup: int,
    after_warmup: Callable[[], None] | None = None,
    progress: Progress | None = None,
) -> list[float]:
    """Seconds each of ``repeats`` calls of ``step`` took, after ``warmup`` untimed calls.

    Runs under ``torch.inference_mode``; on cuda the device is synchronised before and
    after each call, so a sample is the call's wall time, launch overhead included.
    ``after_warmup`` runs once between the warm-up calls and the timed ones.
    """
    samples: list[float] = []
    with torch.inference_mode():
        for _ in range(warmup):
            step()
        if after_warmup is not None:
            after_warmup()
        for index in range(repeats):
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            samples.append(time.perf_counter() - start)
            if progress is not None:
                progress(index + 1, repeats)
    return samples
