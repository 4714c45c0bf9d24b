"""Checks at the library's edge on the model and its inputs (options: :mod:`mhaudit.options`)."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from mhaudit.errors import ConfigError
from mhaudit.load.target import LoadedModel, model_tensors


def check_module(model: Any) -> None:
    """Refuse anything but a built nn.Module, with the call to use instead."""
    if isinstance(model, nn.Module):
        return
    if isinstance(model, (str, os.PathLike)):
        raise ConfigError(f"audit() takes a built nn.Module, not the target {str(model)!r}",
                          "Use mhaudit.audit_target(\"model.py\") to load a target.")
    raise ConfigError(f"audit() needs an nn.Module, not {type(model).__name__}",
                      "Pass the built model, e.g. audit(MyModel(), inputs).")


def check_runs_on(loaded: LoadedModel, device: str) -> None:
    """Refuse to measure a model whose weights or inputs live on the meta device."""
    if device == "meta":
        return
    tensors = list(model_tensors(loaded.module))
    tensors += [v for v in (*loaded.args, *loaded.kwargs.values()) if isinstance(v, torch.Tensor)]
    if any(t.device.type == "meta" for t in tensors):
        raise ConfigError(f"the model or its inputs are on the meta device, so nothing can run "
                          f"on {device} to be measured",
                          f"Build the model and inputs on {device}, or audit with "
                          "device=\"meta\".")


def refused_on_meta(exc: BaseException) -> bool:
    """True when building on meta failed on the meta device itself (an op with no meta
    kernel, ``.item()`` of a meta tensor), not on the model's own code."""
    seen: BaseException | None = exc
    try:
        for _ in range(8):
            if seen is None:
                return False
            if "meta" in str(seen).lower():
                return True
            seen = seen.__cause__ or seen.__context__
    except BaseException:  # model code's exception that cannot be printed or walked
        return False
    return False
