"""The audited inputs in words: names, shapes and dtypes, for the report."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn


def describe_inputs(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Input names to ``{"shape": [...], "dtype": "..."}`` (other values by type)."""
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        names = []
    described: dict[str, Any] = {}
    for index, value in enumerate(args):
        name = names[index] if index < len(names) else f"arg{index}"
        described[name] = _describe(value)
    for name, value in kwargs.items():
        described[name] = _describe(value)
    return described


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    return type(value).__name__
