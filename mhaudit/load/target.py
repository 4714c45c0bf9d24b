"""Load stage: a target string becomes an nn.Module and example inputs."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from mhaudit.errors import LoadError, first_line
from mhaudit.load.device import parse_device


@dataclass(frozen=True)
class LoadedModel:
    """A built model with the inputs to trace it with."""

    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    inputs_inferred: bool = False
    """True when mhaudit made the inputs up from the model's first layer."""


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Swallow prints from user code so they cannot corrupt a JSON report."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def device_context(device: str) -> contextlib.AbstractContextManager[Any]:
    """Default-device context for building: meta allocates nothing."""
    return torch.device(parse_device(device))


def load_target(
    target: str,
    *,
    device: str = "meta",
    batch_size: int = 1,
    seq_len: int = 128,
    input_shape: tuple[int, ...] | None = None,
) -> LoadedModel:
    """Resolve ``model.py[:NAME]``, ``pkg.mod:NAME`` or a transformers ``config.json``."""
    path_part, _, attr = _split_target(target)
    path = Path(path_part)
    if path.suffix == ".json":
        return _load_hf_config(path, target, device, batch_size, seq_len)
    with quiet_stdout():
        module = _import_target(path_part)
        with device_context(device):
            model = _build(module, attr, target)
            args, kwargs, inferred = _inputs(module, model, batch_size, seq_len, input_shape)
    return LoadedModel(model, args, kwargs, target, inferred)


def _split_target(target: str) -> tuple[str, str, str]:
    """Split at the last colon that is not part of a Windows drive letter."""
    head, sep, tail = target.rpartition(":")
    if not sep or (len(head) == 1 and head.isalpha()) or "/" in tail or "\\" in tail:
        return target, "", ""
    return head, sep, tail


def _import_target(spec: str) -> ModuleType:
    path = Path(spec)
    if spec.endswith(".py") or path.exists():
        if not path.is_file():
            raise LoadError(f"model file {spec} does not exist", "Check the path.")
        name = f"mhaudit_user_{path.stem}_{uuid.uuid4().hex[:8]}"
        mod_spec = importlib.util.spec_from_file_location(name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise LoadError(f"cannot import {spec}", "Point mhaudit at a Python file.")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.parent.resolve()))
        try:
            mod_spec.loader.exec_module(module)
        except Exception as exc:
            raise LoadError(
                f"importing {spec} failed: {first_line(exc)}", "Fix the model file."
            ) from exc
        finally:
            sys.path.pop(0)
        return module
    try:
        return importlib.import_module(spec)
    except Exception as exc:
        raise LoadError(
            f"cannot import module {spec!r}: {first_line(exc)}",
            "Give a path to a .py file or an importable pkg.module:NAME.",
        ) from exc


def _build(module: ModuleType, attr: str, target: str) -> nn.Module:
    if attr:
        if not hasattr(module, attr):
            raise LoadError(f"{target}: no attribute {attr!r}", "Check the name after the colon.")
        obj = getattr(module, attr)
    elif hasattr(module, "build_model"):
        obj = module.build_model
    elif isinstance(getattr(module, "model", None), nn.Module):
        obj = module.model
    else:
        raise LoadError(
            f"{target} defines no build_model() and no module-level `model`",
            "Add `def build_model(): return MyModel(...)` or name one with file.py:NAME.",
        )
    if isinstance(obj, nn.Module):
        return obj
    if not callable(obj):
        raise LoadError(f"{target}: {attr or 'model'} is not callable", "Point at a factory.")
    if inspect.isclass(obj) and issubclass(obj, nn.Module):
        obj_name = obj.__name__
    else:
        obj_name = getattr(obj, "__name__", "factory")
    try:
        built = obj()
    except Exception as exc:
        raise LoadError(
            f"calling {obj_name}() failed: {first_line(exc)}",
            "Make the factory callable with no arguments.",
        ) from exc
    if not isinstance(built, nn.Module):
        raise LoadError(
            f"{obj_name}() returned {type(built).__name__}, not an nn.Module",
            "Return the model from the factory.",
        )
    return built


def _inputs(
    module: ModuleType,
    model: nn.Module,
    batch_size: int,
    seq_len: int,
    input_shape: tuple[int, ...] | None,
) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    provider = getattr(module, "example_inputs", None)
    if provider is None:
        provider = getattr(module, "EXAMPLE_INPUTS", None)
    if input_shape is not None:
        return (infer_input_from_shape(model, input_shape),), {}, True
    if provider is not None:
        try:
            value = _call_provider(provider, model)
        except Exception as exc:
            raise LoadError(
                f"example_inputs() failed: {first_line(exc)}", "Fix example_inputs()."
            ) from exc
        return (*normalize_inputs(value), False)
    return (infer_inputs(model, batch_size, seq_len),), {}, True


def _call_provider(provider: Any, model: nn.Module) -> Any:
    """Call ``example_inputs`` with the built model when it takes an argument."""
    if not callable(provider):
        return provider
    try:
        takes_model = bool(inspect.signature(provider).parameters)
    except (TypeError, ValueError):
        takes_model = False
    return provider(model) if takes_model else provider()


def normalize_inputs(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Turn a user's example inputs into (args, kwargs)."""
    if isinstance(value, dict):
        return (), dict(value)
    if isinstance(value, tuple):
        return value, {}
    if isinstance(value, list):
        return tuple(value), {}
    return (value,), {}


def _first_leaf(model: nn.Module) -> nn.Module | None:
    for sub in model.modules():
        if not list(sub.children()) and any(True for _ in sub.parameters(recurse=False)):
            return sub
    return None


def infer_inputs(model: nn.Module, batch_size: int, seq_len: int) -> torch.Tensor:
    """Token ids for an embedding first layer, ``(b, n, d)`` floats for a linear one."""
    first = _first_leaf(model)
    if isinstance(first, nn.Embedding):
        return torch.zeros(batch_size, seq_len, dtype=torch.long)
    if isinstance(first, nn.Linear):
        return torch.zeros(batch_size, seq_len, first.in_features)
    if isinstance(first, nn.MultiheadAttention):
        return torch.zeros(batch_size, seq_len, first.embed_dim)
    kind = type(first).__name__ if first is not None else "no parameterised layer"
    raise LoadError(
        f"cannot infer example inputs for a model whose first layer is {kind}",
        "Define example_inputs() in the model file or pass --input-shape.",
    )


def infer_input_from_shape(model: nn.Module, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor of ``shape``: integer ids for an embedding first layer, else floats."""
    if isinstance(_first_leaf(model), nn.Embedding):
        return torch.zeros(*shape, dtype=torch.long)
    return torch.zeros(*shape)


def _load_hf_config(
    path: Path, target: str, device: str, batch_size: int, seq_len: int
) -> LoadedModel:
    from mhaudit.load.hfconfig import load_hf_config

    if not path.is_file():
        raise LoadError(f"config file {path} does not exist", "Check the path.")
    with quiet_stdout(), device_context(device):
        model, args, kwargs = load_hf_config(path, batch_size, seq_len)
    return LoadedModel(model, args, kwargs, target, True)
