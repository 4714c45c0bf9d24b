"""Argument checks at the library's edge: every option and input has the right type and range."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from mhaudit.cost.devices import DEFAULT_GPU, canonical_dtype, get_profile
from mhaudit.errors import ConfigError
from mhaudit.load.device import parse_device
from mhaudit.load.limits import MAX_SIZE
from mhaudit.load.target import LoadedModel, model_tensors
from mhaudit.rules import RuleConfig

if TYPE_CHECKING:
    from mhaudit.api import AuditOptions

_EXAMPLES = {"device": "meta", "dtype": "bfloat16", "gpu": DEFAULT_GPU, "flops_backend": "graph"}


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, not {value!r}",
                          f"Pass {name} as a whole number, e.g. 1.")
    if not 1 <= value <= MAX_SIZE:
        raise ConfigError(f"{name} {value} is out of range", f"Use 1 to {MAX_SIZE:,}.")


def check_options(opts: AuditOptions) -> None:
    """Raise ConfigError for option values no stage can use."""
    _positive_int("batch_size", opts.batch_size)
    _positive_int("seq_len", opts.seq_len)
    _positive_int("repeats", opts.repeats)
    if opts.tensor_parallel is not None:
        _positive_int("tensor_parallel", opts.tensor_parallel)
    if not isinstance(opts.scaling_seq_lens, (tuple, list)):
        raise ConfigError("scaling_seq_lens must be a tuple of lengths",
                          "Pass e.g. scaling_seq_lens=(512, 2048).")
    for n in opts.scaling_seq_lens:
        _positive_int("scaling_seq_lens item", n)
    if opts.input_shape is not None:
        if not isinstance(opts.input_shape, (tuple, list)) or not opts.input_shape:
            raise ConfigError("input_shape must be a non-empty tuple of sizes",
                              "Pass e.g. input_shape=(1, 128).")
        for dim in opts.input_shape:
            _positive_int("input_shape item", dim)
    for name in ("device", "dtype", "gpu", "flops_backend"):
        if not isinstance(getattr(opts, name), str):
            raise ConfigError(f"{name} must be a string, not {getattr(opts, name)!r}",
                              f"Pass {name} as text, e.g. {name}={_EXAMPLES[name]!r}.")
    if opts.timeout is not None and (
        isinstance(opts.timeout, bool) or not isinstance(opts.timeout, (int, float))
        or not 0 < opts.timeout <= 86400
    ):
        raise ConfigError(f"timeout must be a number of seconds in (0, 86400], "
                          f"not {opts.timeout!r}", "Pass e.g. timeout=60.")
    for name in ("train", "decode", "fold"):
        if not isinstance(getattr(opts, name), bool):
            raise ConfigError(f"{name} must be True or False, not {getattr(opts, name)!r}",
                              f"Pass {name}=True or {name}=False.")
    if opts.context is not None:
        _positive_int("context", opts.context)
    if opts.rule_config is not None and not isinstance(opts.rule_config, RuleConfig):
        raise ConfigError("rule_config must be a RuleConfig", "Build one with RuleConfig(...).")
    if opts.progress is not None and not callable(opts.progress):
        raise ConfigError("progress must be callable with (done, total)", "Pass a function.")
    if opts.flops_backend not in ("graph", "fvcore"):
        raise ConfigError(f"unknown FLOPs backend {opts.flops_backend!r}",
                          "Use graph or fvcore.")
    if opts.flops_backend == "fvcore" and opts.device == "meta":
        raise ConfigError("the fvcore backend runs real compute and cannot use meta tensors",
                          "Add --device cpu to compare against fvcore.")
    canonical_dtype(opts.dtype)
    get_profile(opts.gpu)
    parse_device(opts.device)


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
