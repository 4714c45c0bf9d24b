"""The inputs made from a config fitted to what the model's forward runs on: an audio or
pixel input in the layout, frame count or images axis it accepts, an input the forward
needs but does not require, and where a modality's inputs still fail, the text alone,
with the inputs left out named."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Any

import torch

from mhaudit.data import LeftOutInput
from mhaudit.load.modalities import NoSize, Request
from mhaudit.load.rows import run_failure, runs
from mhaudit.load.vision import INPUT_MAKERS, layouts

FITTED = ("input_features", "input_values", "pixel_values", "pixel_values_videos")
"""Inputs whose layout the config does not fix (audio frames first or last; pixels with
or without a frames or images axis)."""

MAX_TRIES = 16
"""Most candidates tried per input (each one forward of the model, on meta or a small CPU
copy)."""

_COMPANIONS = ("_mask", "_padding")


def _companions(name: str, made: Mapping[str, Any]) -> list[str]:
    return [f"{name}{s}" for s in _COMPANIONS if isinstance(made.get(f"{name}{s}"), torch.Tensor)]


def _params(model: Any) -> Mapping[str, inspect.Parameter]:
    if model is None:
        return {}
    try:
        return inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}


def _refit(req: Request, name: str, made: dict[str, Any], fixed: frozenset[str]) -> bool:
    """Whether a candidate layout of ``made[name]`` (:func:`~mhaudit.load.vision.layouts`)
    runs the forward, with the masks over that input made over the candidate's frames
    (``<input>_mask`` too where the forward takes one: an optional mask the encoder needs
    all the same); ``made`` takes the first that runs."""
    masks = _companions(name, made)
    if fixed & {name, *masks, f"{name}_mask"}:
        return False
    if f"{name}_mask" not in masks and f"{name}_mask" in _params(req.model):
        masks.append(f"{name}_mask")
    for candidate in islice(layouts(req, name, made[name]), 1, MAX_TRIES):  # after the made
        trial = dict(made, **{name: candidate.tensor})
        for mask in masks:  # (B, frames) of the candidate, nothing masked or padded
            fill = torch.zeros if mask.endswith("_padding") else torch.ones
            trial[mask] = fill(candidate.tensor.shape[0],
                               candidate.tensor.shape[candidate.frames_axis],
                               dtype=torch.long, device=candidate.tensor.device)
        if runs(req.model, trial):  # type: ignore[arg-type]
            made.update(trial)
            return True
    return False


def _added(req: Request, made: dict[str, Any]) -> bool:
    """Whether one more input the forward takes and a maker shapes (pixels beside the text
    of a model whose forward needs both but requires neither) runs the forward; ``made``
    takes the first that does."""
    for name in _params(req.model):
        if name in made or name not in INPUT_MAKERS:
            continue
        try:
            trial = dict(made, **INPUT_MAKERS[name](req))
        except NoSize:
            continue
        if runs(req.model, trial):  # type: ignore[arg-type]
            made.clear()
            made.update(trial)
            return True
    return False


Remake = Callable[[frozenset[str]], dict[str, Any]]
"""Makes the inputs again without the modalities whose inputs it is given."""

LEFT_OUT_FIRST = ("pixel_values_videos", "input_features", "input_values", "pixel_values")
"""The modalities left out one at a time, in this order, before all of them."""


def fit_inputs(req: Request, made: dict[str, Any], text: Mapping[str, Any],
               fixed: frozenset[str], remake: Remake | None = None) -> tuple[LeftOutInput, ...]:
    """Fit ``made`` in place to a forward that does not run on it: each audio or pixel input
    in another layout (:data:`FITTED`), else one more input the forward takes; where none
    runs, the inputs without one modality (``remake``, :data:`LEFT_OUT_FIRST`), else
    ``text`` (the inputs the forward requires, made before any other modality's), where
    that runs; the inputs left out come back, each with the forward's error. Nothing
    changes where the forward runs, or where the user's inputs (``fixed``) would be left
    out."""
    model = req.model
    fitted = [n for n in FITTED if isinstance(made.get(n), torch.Tensor) and n not in fixed]
    extra = [n for n in made if n not in text or made[n] is not text[n]]
    unmade = [n for n in _params(model) if n in INPUT_MAKERS and n not in made]
    if model is None or not (fitted or extra or unmade):
        return ()
    why = run_failure(model, made)
    if not why or any(_refit(req, name, made, fixed) for name in fitted) or \
            _added(req, made):
        return ()
    for inputs in _fallbacks(made, text, remake):
        left_out = [n for n in made if n not in inputs]
        if left_out and not fixed & set(left_out) and runs(model, inputs):
            made.clear()
            made.update(inputs)
            return tuple(LeftOutInput(name, why) for name in left_out)
    return ()


def _fallbacks(made: Mapping[str, Any], text: Mapping[str, Any],
               remake: Remake | None) -> Iterator[Mapping[str, Any]]:
    """The inputs without one modality at a time, then the text alone."""
    if remake is not None:
        yield from (remake(frozenset({name})) for name in LEFT_OUT_FIRST
                    if name in made and name not in text)
    yield text
