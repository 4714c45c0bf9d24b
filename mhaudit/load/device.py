"""Where a model is built: ``meta`` (nothing allocated), ``cpu`` or ``cuda[:i]``."""

from __future__ import annotations

import re

from mhaudit.errors import ConfigError


def parse_device(name: str) -> str:
    """Check a ``--device`` value: ``meta``, ``cpu`` or an available ``cuda[:i]``."""
    wanted = name.strip().lower()
    if wanted in ("meta", "cpu"):
        return wanted
    if re.fullmatch(r"cuda(:\d+)?", wanted):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"{name} requested but CUDA is not available",
                              "Use --device cpu or meta, or run on a machine with a GPU.")
        index = int(wanted.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ConfigError(f"{name}: there are only {torch.cuda.device_count()} CUDA devices",
                              "Pick an index below that count.")
        return wanted
    raise ConfigError(f"unknown device {name!r}", "Use meta, cpu or cuda[:i].")
