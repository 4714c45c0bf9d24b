"""The main audio input in the layout and frame count the model's forward accepts, where it
rejects the one made from the config."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from itertools import islice
from typing import Any

import torch

from mhaudit.load.audio import candidates
from mhaudit.load.modalities import Request
from mhaudit.load.rows import runs

AUDIO_INPUTS = ("input_features", "input_values")
"""Main inputs that hold audio, whose layout the config does not fix."""

MAX_TRIES = 12
"""Most candidates tried (each one forward of the model, on meta or a small CPU copy)."""

_COMPANIONS = ("_mask", "_padding")


def _companions(name: str, made: Mapping[str, Any]) -> list[str]:
    return [f"{name}{s}" for s in _COMPANIONS if isinstance(made.get(f"{name}{s}"), torch.Tensor)]


def _takes(model: Any, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def fit_audio(req: Request, name: str, made: dict[str, Any], fixed: frozenset[str]) -> None:
    """Where the forward fails on ``made[name]``, the first candidate layout or frame count
    (:func:`~mhaudit.load.audio.candidates`) it runs on, with the masks over that input
    made over the candidate's frames (``<input>_mask`` too where the forward takes one:
    an optional mask the encoder needs all the same); ``made`` is left as it is where
    none runs or the user gave the input or its mask."""
    model = req.model
    masks = _companions(name, made)
    if model is None or name not in AUDIO_INPUTS or not isinstance(made.get(name), torch.Tensor) \
            or fixed & {name, *masks, f"{name}_mask"} or runs(model, made):
        return
    if f"{name}_mask" not in masks and _takes(model, f"{name}_mask"):
        masks.append(f"{name}_mask")
    for candidate in islice(candidates(req, name, made[name]), MAX_TRIES):
        trial = dict(made, **{name: candidate.tensor})
        for mask in masks:  # (B, frames) of the candidate, nothing masked or padded
            fill = torch.zeros if mask.endswith("_padding") else torch.ones
            trial[mask] = fill(candidate.tensor.shape[0],
                               candidate.tensor.shape[candidate.frames_axis],
                               dtype=torch.long, device=candidate.tensor.device)
        if runs(model, trial):
            made.update(trial)
            return
