"""How many feature rows a model's feature method, or the tower that reads an input,
returns for some inputs: on the meta device where it runs there, else on a CPU copy."""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from mhaudit.errors import first_line
from mhaudit.fake.mode import FakeMode, mark_known
from mhaudit.fake.run import fake_inputs, fake_state

CPU_COPY_LIMIT = 1 << 28
"""Most parameter elements of a meta model copied to the CPU (uninitialised) to count the
tokens of a feature method that the meta device cannot run (one with a data-dependent
shape, such as a mask applied by indexing)."""


def _rows(result: Any) -> int:
    """Feature rows (one per placeholder token) of what a feature method returned."""
    if isinstance(result, torch.Tensor):
        return result.numel() // result.shape[-1] if result.dim() >= 2 else 0
    pooled = getattr(result, "pooler_output", None)
    if pooled is not None:
        return _rows(pooled)
    if isinstance(result, (list, tuple)):
        return sum(_rows(item) for item in result)
    hidden = getattr(result, "last_hidden_state", None)
    return _rows(hidden) if hidden is not None else 0


def _width(result: Any) -> int | None:
    """The row width of what a feature method returned (its first feature tensor's)."""
    if isinstance(result, torch.Tensor):
        return int(result.shape[-1]) if result.dim() >= 2 else None
    for name in ("pooler_output", "last_hidden_state"):
        found = getattr(result, name, None)
        if found is not None:
            return _width(found)
    if isinstance(result, (list, tuple)) and result:
        return _width(result[0])
    return None


def _in_width(width: int) -> Rows:
    """Rows of a result whose rows are ``width`` wide; 0 for another width."""
    return lambda result: _rows(result) if _width(result) in (None, width) else 0


def text_width(model: nn.Module) -> int | None:
    """The width of the model's token embeddings, where it says."""
    try:
        embeddings = model.get_input_embeddings()  # type: ignore[operator]
    except Exception:  # a model without (or with unusual) input embeddings
        return None
    width = getattr(embeddings, "embedding_dim", None)
    return width if isinstance(width, int) else None


def feature_method(model: nn.Module, name: str) -> Callable[..., Any] | None:
    """``model.<name>``, else its encoder's (an encoder-decoder keeps its towers there)."""
    method = getattr(model, name, None)
    get_encoder = getattr(model, "get_encoder", None)
    if method is None and callable(get_encoder):
        try:
            method = getattr(get_encoder(), name, None)
        except Exception:  # a model without a separate encoder
            return None
    return method if callable(method) else None


Rows = Callable[[Any], int]
"""Counts the feature rows in what a method returned."""


def _call(method: Callable[..., Any], made: Mapping[str, Any], rows: Rows = _rows) -> int:
    params = inspect.signature(method).parameters
    with torch.no_grad():
        return rows(method(**{k: v for k, v in made.items() if k in params}))


Pick = Callable[[nn.Module], Callable[..., Any] | None]
"""Takes the function to run from a model (or from its CPU copy)."""


_TWINS: dict[int, nn.Module] = {}
"""CPU copies of the meta models being fed, by ``id``, while :func:`kept_twins` is open."""
_KEEPING: list[bool] = []


@contextlib.contextmanager
def kept_twins() -> Iterator[None]:
    """Within: one CPU copy per meta model serves every feature method and tower tried."""
    _KEEPING.append(True)
    try:
        yield
    finally:
        _KEEPING.pop()
        if not _KEEPING:
            _TWINS.clear()


def _twin(model: nn.Module) -> nn.Module:
    """A CPU copy of a meta model, initialised by its own ``init_weights()`` where it has
    one: buffers computed at construction (position ids) are garbage after ``to_empty``."""
    twin = _TWINS.get(id(model))
    if twin is None:
        twin = copy.deepcopy(model).to_empty(device="cpu")
        init = getattr(twin, "init_weights", None)
        if callable(init):
            with contextlib.suppress(Exception), torch.no_grad():  # model code
                init()
        if _KEEPING:
            _TWINS[id(model)] = twin
    return twin


def _on_cpu(model: nn.Module, pick: Pick, made: Mapping[str, Any], rows: Rows) -> int:
    """The rows of the function ``pick`` takes from an uninitialised CPU copy of a meta
    model, run on CPU copies of the inputs."""
    params = list(model.parameters())
    if not params or params[0].device.type != "meta" or \
            sum(p.numel() for p in params) > CPU_COPY_LIMIT:
        return 0
    with torch.device("cpu"):  # inside the meta default device the loader builds under
        method = pick(_twin(model))
        if method is None:
            return 0
        return _call(method, {k: cpu_value(k, v) for k, v in made.items()}, rows)


def _on_fake(model: nn.Module, pick: Pick, made: Mapping[str, Any], rows: Rows) -> int:
    """The rows of the function ``pick`` takes from ``model``, run on fake CPU copies of its
    state and of the float inputs; integer inputs on the CPU with the values the loader
    gives them (a patch grid, placeholder tokens), which the method may read."""
    method = pick(model)
    if method is None:
        return 0
    mode = FakeMode(allow_non_fake_inputs=True)
    known = {k: mark_known(cpu_value(k, v)) if isinstance(v, torch.Tensor) and
             not v.is_floating_point() else v for k, v in made.items()}
    with fake_state(model, mode, None):
        fake = fake_inputs(known, mode, None, {})
        with mode:
            return _call(method, fake, rows)


def cpu_value(name: str, value: Any) -> Any:
    """A CPU tensor filled as the loader fills ``name`` (masks keep all, pixels are 1: an
    all-zero image is padding), for a meta one."""
    if not isinstance(value, torch.Tensor) or value.device.type != "meta":
        return value
    keep = (name.endswith("_mask") and value.dtype != torch.bool) or \
        ("pixel_values" in name and value.is_floating_point())
    fill = torch.ones if keep else torch.zeros
    return fill(value.shape, dtype=value.dtype, device="cpu")


def _rows_of(model: nn.Module, pick: Pick, made: Mapping[str, Any], rows: Rows = _rows,
             errors: list[str] | None = None) -> int:
    """Rows of ``pick(model)`` on ``made``, else on fake tensors with the integer inputs'
    values, else on a CPU copy; 0 where none runs. ``errors`` gains each failure's line."""
    method = pick(model)
    if method is None:
        return 0
    for attempt in (_on_meta, _on_fake, _on_cpu):
        try:
            return attempt(model, pick, made, rows)
        except Exception as exc:  # model code: a data-dependent step on meta, a float
            if errors is not None:  # input's values read under fake tensors, a kernel
                errors.append(first_line(exc, 160))
    return 0


def _on_meta(model: nn.Module, pick: Pick, made: Mapping[str, Any], rows: Rows) -> int:
    method = pick(model)
    return 0 if method is None else _call(method, made, rows)


def runs(model: nn.Module, made: Mapping[str, Any]) -> bool:
    """Whether the model's forward runs on ``made`` (on the meta device, else on a CPU copy
    of a meta model small enough to copy)."""
    return not run_failure(model, made)


def run_failure(model: nn.Module, made: Mapping[str, Any]) -> str:
    """Why the model's forward does not run on ``made`` (the last attempt's error line, as
    :func:`runs` tries them); empty where it runs."""
    errors: list[str] = []
    with kept_twins():
        if _rows_of(model, lambda m: m.forward, made, lambda _: 1, errors):
            return ""
    return errors[-1] if errors else "the forward did not run"


def count_tokens(model: nn.Module, name: str, made: Mapping[str, Any],
                 width: int | None = None) -> int:
    """How many placeholder tokens ``model.<name>`` fills from the inputs in ``made``
    (with rows ``width`` wide, where given); 0 where it cannot run on them."""
    rows = _rows if width is None else _in_width(width)
    return _rows_of(model, lambda m: feature_method(m, name), made, rows)


def tower(model: nn.Module, name: str) -> nn.Module | None:
    """The outermost submodule whose main input is ``name``: the tower that reads it."""
    for module in model.modules():
        if module is not model and getattr(module, "main_input_name", None) == name:
            return module
    return None


def _hidden_rows(result: Any) -> int:
    hidden = getattr(result, "last_hidden_state", None)
    return _rows(hidden if hidden is not None else result)


def tower_rows(model: nn.Module, name: str, made: Mapping[str, Any]) -> int:
    """Rows of the hidden states that the tower reading ``name`` returns, fed ``name`` and
    the inputs named after it (its mask); 0 where there is no such tower or it fails."""
    def pick(root: nn.Module) -> Callable[..., Any] | None:
        found = tower(root, name)
        return None if found is None else found.forward

    own = {k: v for k, v in made.items() if k.startswith(name)}
    return _rows_of(model, pick, own, _hidden_rows)
