"""Load stage: a target string becomes an nn.Module and example inputs."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from mhaudit.contain.contain import contained, preserved_state
from mhaudit.contain.files import check_input_file
from mhaudit.data import LeftOutInput
from mhaudit.errors import LoadError, type_name
from mhaudit.load.device import parse_device
from mhaudit.load.inputs import Shapes, with_shapes
from mhaudit.progress import stage


@dataclass(frozen=True)
class LoadedModel:
    """A built model with the inputs to trace it with."""

    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    inputs_inferred: bool = False
    """True when mhaudit made the inputs up from the model's first layer."""
    device: str = ""
    """Where it was built when not where the audit asked (``cpu`` for a model that does
    not build on meta); empty otherwise."""
    note: str = ""
    """Why it was built there, for the report's ``model``."""
    inputs_left_out: tuple[LeftOutInput, ...] = ()
    """Inputs made from a config and left out because the forward did not run on them."""


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Send prints from user code to stderr, so they cannot corrupt a report on stdout."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def device_context(device: str) -> contextlib.AbstractContextManager[Any]:
    """Default-device context for building: meta allocates nothing."""
    return torch.device(parse_device(device))


def model_folder(target: str) -> str | None:
    """The folder of a file target, which stays importable while its model runs."""
    path = Path(_split_target(target)[0])
    if path.suffix == ".py" or path.is_file():
        return os.path.dirname(os.path.realpath(path))  # never raises, loops included
    return None


def load_target(
    target: str,
    *,
    device: str = "meta",
    batch_size: int = 1,
    seq_len: int = 128,
    input_shape: tuple[int, ...] | None = None,
    input_shapes: Shapes = (),
) -> LoadedModel:
    """Resolve ``model.py[:NAME]``, ``pkg.mod:NAME``, a ``config.json`` or a model folder.

    Model code runs contained (see :mod:`mhaudit.contain.contain`): whatever it raises or
    however it exits becomes a LoadError naming the file and the stage.
    """
    path_part, _, attr = _split_target(target)
    path = Path(path_part)
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise LoadError(f"{target} is a folder without a config.json, not a model file",
                            "Point at a .py model file, a config.json, or a folder holding one.")
        path = config
    if path.suffix == ".json":
        return _load_hf_config(path, target, device, batch_size, seq_len, input_shape,
                               input_shapes)
    with preserved_state(model_folder(target)), quiet_stdout():
        module = _import_target(path_part)  # outside the device context: libraries it
        with device_context(device):  # imports keep their import-time tensors real
            stage("building")
            model = _build(module, attr, target)
            args, kwargs, inferred = _inputs(module, model, batch_size, seq_len, input_shape,
                                             input_shapes, target)
        model, args, kwargs = _on_device(model, args, kwargs, device, target)
    return LoadedModel(model, args, kwargs, target, inferred)


def _on_device(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], device: str, target: str
) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """Move a model and inputs made at import time (a module-level ``model`` or
    ``EXAMPLE_INPUTS``) onto the device the audit builds on. Meta tensors stay where they
    are on a real device (they hold nothing to copy: a build that keeps its weights on
    meta, :func:`~mhaudit.trace.real.weights_on_meta`)."""
    place = torch.device(parse_device(device))

    def elsewhere(tensor: torch.Tensor) -> bool:
        if tensor.device.type == "meta" and place.type != "meta":
            return False
        return tensor.device.type != place.type or (
            place.index is not None and tensor.device.index != place.index)

    if any(elsewhere(t) for t in model_tensors(model)):
        with contained(f"moving the model to {device}", target):
            model = model.to(place)

    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and elsewhere(value):
            return value.to(place)
        return value

    return model, tuple(move(a) for a in args), {k: move(v) for k, v in kwargs.items()}


def _split_target(target: str) -> tuple[str, str, str]:
    """Split ``file.py:NAME`` at the last colon, unless the whole target names a path.

    A Windows drive letter, a file named ``exp:3.py`` or a tail that is not a Python
    name stays part of the path.
    """
    head, sep, tail = target.rpartition(":")
    if not sep or (len(head) == 1 and head.isalpha()) or not tail.isidentifier():
        return target, "", ""
    if Path(target).exists():
        return target, "", ""
    return head, sep, tail


def _missing(what: str, path: Path) -> LoadError:
    """The error for a target that is not there: missing, or a link that leads nowhere."""
    if path.is_symlink():
        return LoadError(f"{what} {path} is a symbolic link that leads to no file (a broken "
                         "link or a loop)", "Point at the file itself.")
    return LoadError(f"{what} {path} does not exist", "Check the path.")


def _import_target(spec: str) -> ModuleType:
    path = Path(spec)
    if spec.endswith(".py") or path.exists():
        if not path.exists():
            raise _missing("model file", path)
        check_input_file(path, "model file")  # a FIFO, a device or a huge file: exit 2
        name = f"mhaudit_user_{''.join(c if c.isalnum() else '_' for c in path.stem)}_" \
               f"{uuid.uuid4().hex[:8]}"
        mod_spec = importlib.util.spec_from_file_location(name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise LoadError(f"cannot import {spec}", "Point mhaudit at a Python file.")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        with contained(f"importing {path.name}", spec):
            mod_spec.loader.exec_module(module)
        return module
    with contained(f"importing module {spec!r}", spec):
        try:
            return importlib.import_module(spec)
        except ModuleNotFoundError as exc:
            if exc.name is not None and spec.startswith(exc.name):
                raise LoadError(f"no file or module named {spec!r}",
                                "Give a path to a .py file or an importable "
                                "pkg.module:NAME.") from exc
            raise


_GETATTR_TIP = "A module-level __getattr__ must raise AttributeError for names it lacks."


def _factory(module: ModuleType, attr: str, target: str) -> tuple[Any, str]:
    """The object the target names, and what to call it in messages."""
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
        return obj, ""
    if not callable(obj):
        raise LoadError(f"{target}: {attr or 'model'} is not callable", "Point at a factory.")
    if inspect.isclass(obj) and issubclass(obj, nn.Module):
        return obj, type_name(obj)
    name = getattr(obj, "__name__", "factory")
    return obj, name if isinstance(name, str) and name else "factory"


def _build(module: ModuleType, attr: str, target: str) -> nn.Module:
    # a module-level __getattr__, or a factory object with odd attributes, is user code too
    with contained(f"looking up {attr or 'build_model'} in the model file", target,
                   tip=_GETATTR_TIP):
        obj, obj_name = _factory(module, attr, target)
    if not obj_name:
        return obj  # type: ignore[no-any-return]
    with contained(f"{obj_name}()", target):
        built = obj()
    if not isinstance(built, nn.Module):
        raise LoadError(
            f"{obj_name}() returned {type_name(built)}, not an nn.Module",
            "Return the model from the factory.",
        )
    return built


def _inputs(
    module: ModuleType,
    model: nn.Module,
    batch_size: int,
    seq_len: int,
    input_shape: tuple[int, ...] | None,
    input_shapes: Shapes,
    target: str,
) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    with contained("looking up example_inputs in the model file", target, tip=_GETATTR_TIP):
        provider = getattr(module, "example_inputs", None)
        if provider is None:
            provider = getattr(module, "EXAMPLE_INPUTS", None)

    def provided() -> Any:
        with contained("example_inputs()", target):
            return _call_provider(provider, model)

    return model_inputs(model, provided if provider is not None else None, batch_size,
                        seq_len, input_shape, input_shapes)


def model_inputs(
    model: nn.Module,
    provided: Callable[[], Any] | None,
    batch_size: int,
    seq_len: int,
    input_shape: tuple[int, ...] | None = None,
    input_shapes: Shapes = (),
) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    """``(args, kwargs, inferred)`` of the call: an unnamed shape, else the user's own inputs
    (``provided()``), else inferred from the first layer; then the named shapes on top,
    replacing inputs of those names. ``inferred`` is False only for the user's own inputs."""
    if input_shape is not None:
        args: tuple[Any, ...] = (infer_input_from_shape(model, input_shape),)
        kwargs: dict[str, Any] = {}
    elif provided is not None:
        args, kwargs = normalize_inputs(provided())
        if not input_shapes:
            return args, kwargs, False
    elif input_shapes:
        args, kwargs = (), {}  # the named inputs are the whole call
    else:
        return (infer_inputs(model, batch_size, seq_len),), {}, True
    return args, with_shapes(kwargs, input_shapes), True


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


def walk_modules(model: nn.Module) -> Iterator[nn.Module]:
    """Every submodule once, depth first in definition order, without recursion.

    ``nn.Module.modules()`` recurses once per level; a 3000-deep ``Sequential`` would
    exhaust Python's stack in mhaudit's own code.
    """
    seen: set[int] = set()
    stack = [model]
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        yield module
        stack.extend(reversed([m for m in module._modules.values() if m is not None]))


def model_tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    """Every parameter and buffer of ``model`` (shared ones as often as they are held)."""
    for module in walk_modules(model):
        yield from (p for p in module._parameters.values() if p is not None)
        yield from (b for b in module._buffers.values() if b is not None)


def _first_leaf(model: nn.Module) -> nn.Module | None:
    for sub in walk_modules(model):
        if not sub._modules and any(p is not None for p in sub._parameters.values()):
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
    path: Path, target: str, device: str, batch_size: int, seq_len: int,
    input_shape: tuple[int, ...] | None, input_shapes: Shapes,
) -> LoadedModel:
    from mhaudit.load.hfconfig import load_hf_config

    if not path.exists():
        raise _missing("config file", path)
    check_input_file(path, "config")  # a FIFO, a device or a huge file: exit 2
    with quiet_stdout(), device_context(device):
        stage("building")
        model, args, kwargs, left_out = load_hf_config(
            path, batch_size, seq_len, input_shape=input_shape, input_shapes=input_shapes)
    return LoadedModel(model, args, kwargs, target, True, inputs_left_out=left_out)
