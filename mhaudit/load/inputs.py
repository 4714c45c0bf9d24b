"""Example inputs by name and modality: token ids, audio features, raw audio, pixels, pairs."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from mhaudit.errors import LoadError

Shapes = Sequence[tuple[str, tuple[int, ...]]]
"""Named input shapes, ``(("input_features", (1, 80, 3000)), ...)``."""

_ID_SUFFIXES = ("_ids", "_mask", "_positions")
"""Inputs by these names hold integers (token ids, masks, positions)."""

MAKE_INPUTS_TIP = ("Pass --input-shape NAME=AxB for each input, or write a model file with "
                   "build_model() and example_inputs().")


def named_input(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor for the input called ``name``: ones for masks, zeros for ids, else floats."""
    if name.endswith("_mask"):
        return torch.ones(*shape, dtype=torch.long)
    if name.endswith(_ID_SUFFIXES) or name in ("input_ids", "labels"):
        return torch.zeros(*shape, dtype=torch.long)
    return torch.zeros(*shape)


def with_shapes(kwargs: dict[str, Any], shapes: Shapes) -> dict[str, Any]:
    """``kwargs`` with each named shape made (replacing an input of that name, if any)."""
    out = dict(kwargs)
    for name, shape in shapes:
        out[name] = named_input(name, shape)
    return out


def _sub(config: Any, name: str) -> Any:
    """``config.<name>_config`` when the config nests one, else the config itself."""
    return getattr(config, f"{name}_config", None) or config


def _image_size(config: Any) -> tuple[int, int]:
    size = getattr(config, "image_size", None) or 224
    if isinstance(size, dict):  # {"height": .., "width": ..} in a few processors' style
        return int(size.get("height", 224)), int(size.get("width", 224))
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def _text(config: Any, batch: int, seq_len: int) -> dict[str, Any]:
    text = _sub(config, "text")
    limit = getattr(text, "max_position_embeddings", None)
    n = min(seq_len, limit) if isinstance(limit, int) and limit > 0 and text is not config \
        else seq_len
    return {"input_ids": torch.zeros(batch, n, dtype=torch.long)}  # (B, n)


def _pixels(config: Any, batch: int, seq_len: int) -> dict[str, Any]:
    vision = _sub(config, "vision")
    height, width = _image_size(vision)
    channels = int(getattr(vision, "num_channels", 3) or 3)
    return {"pixel_values": torch.zeros(batch, channels, height, width)}  # (B, C, H, W)


def _features(config: Any, batch: int, seq_len: int) -> dict[str, Any]:
    audio = _sub(config, "audio")
    mels = getattr(audio, "num_mel_bins", None)
    positions = getattr(audio, "max_source_positions", None)
    if isinstance(mels, int) and isinstance(positions, int) and not hasattr(
            audio, "input_feat_per_channel"):
        # Whisper-style: (B, mel bins, frames), the frames fixed at 2 per encoder position
        return {"input_features": torch.zeros(batch, mels, 2 * positions)}
    per_channel = getattr(audio, "input_feat_per_channel", None) or getattr(
        audio, "feature_size", None) or mels
    if not isinstance(per_channel, int):
        raise LoadError("the config names no audio feature width (num_mel_bins, "
                        "input_feat_per_channel or feature_size)", MAKE_INPUTS_TIP)
    width = per_channel * int(getattr(audio, "input_channels", 1) or 1)
    frames = seq_len * 2 ** int(getattr(audio, "num_conv_layers", 0) or 0)
    return {"input_features": torch.zeros(batch, frames, width)}  # (B, frames, features)


def _waveform(config: Any, batch: int, seq_len: int) -> dict[str, Any]:
    audio = _sub(config, "audio")
    strides = getattr(audio, "conv_stride", None) or (1,)
    samples = seq_len * math.prod(int(s) for s in strides)  # about seq_len frames
    return {"input_values": torch.zeros(batch, samples)}  # (B, samples)


MAKERS: dict[str, Callable[[Any, int, int], dict[str, Any]]] = {
    "input_ids": _text,
    "pixel_values": _pixels,
    "input_features": _features,
    "input_values": _waveform,
}
"""Example inputs for each main input name transformers models declare."""


def config_inputs(main: str, config: Any, batch: int, seq_len: int) -> dict[str, Any]:
    """Keyword inputs for a model built from ``config`` whose main input is ``main``.

    Text, audio features, raw audio and pixels at the config's sizes; a text model that
    also has a vision config gets pixels too; an encoder-decoder gets decoder token ids.
    """
    maker = MAKERS.get(main)
    if maker is None:
        raise LoadError(f"cannot make example inputs for main input {main!r}", MAKE_INPUTS_TIP)
    kwargs = maker(config, batch, seq_len)
    if main == "input_ids" and getattr(config, "vision_config", None) is not None:
        kwargs.update(_pixels(config, batch, seq_len))
    if getattr(config, "is_encoder_decoder", False):
        limit = getattr(config, "max_target_positions", None)
        n = min(seq_len, limit) if isinstance(limit, int) and limit > 0 else seq_len
        kwargs["decoder_input_ids"] = torch.zeros(batch, n, dtype=torch.long)  # (B, n)
    return kwargs
