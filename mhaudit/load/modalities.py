"""Example inputs of each modality at a config's sizes: token ids, pixels, video, audio."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mhaudit.load.configtree import find_node, find_size, is_size, modality_config, read

AUDIO_WORDS = ("audio", "speech", "encoder", "acoustic")
"""Nested configs that size an audio input, searched first."""

AUDIO_WIDTHS = ("input_feat_per_channel", "feature_size", "num_mel_bins", "input_feat_size",
                "feature_projection_input_dim", "n_mels", "num_mel_filters", "mel_bins",
                "input_dim")
"""Config names of an audio frame's feature width (mel bins, filter banks, stacked frames)."""

AUDIO_SUBSAMPLING = ("subsampling_factor", "time_reduction", "downsample_factor")
"""Config names of how many input frames make one encoder position."""

WIDTHS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim")
"""Config names of the model width (what an ``inputs_embeds`` row holds)."""

FRAMES = ("num_frames", "frames_per_clip")
"""Config names of a video clip's frame count."""

IMAGE_SIZES = ("image_size", "crop_size", "frame_size")
"""Config names of an image's side."""

DEFAULT_IMAGE = 224


class NoSize(Exception):
    """An input dimension that no config attribute names; ``dims`` holds the sizes known,
    and a name in capitals for each that is not."""

    def __init__(self, name: str, dims: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.dims = dims


@dataclass(frozen=True)
class Request:
    """What an input maker reads: the built model (when there is one), its config and the
    caller's batch size and sequence length."""

    model: nn.Module | None
    config: Any
    batch: int
    seq_len: int


def image_size(config: Any) -> tuple[int, int]:
    """(height, width) of an image at the config's size, else 224 × 224."""
    size = next((read(config, k) for k in IMAGE_SIZES if read(config, k)), DEFAULT_IMAGE)
    if isinstance(size, dict):  # {"height": .., "width": ..} in a few processors' style
        return (int(size.get("height", DEFAULT_IMAGE)), int(size.get("width", DEFAULT_IMAGE)))
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def text(req: Request) -> dict[str, Any]:
    sub = modality_config(req.config, ("text",))
    limit = read(sub, "max_position_embeddings")
    n = min(req.seq_len, limit) if is_size(limit) and sub is not req.config else req.seq_len
    return {"input_ids": torch.zeros(req.batch, n, dtype=torch.long)}  # (B, n)


def pixels(req: Request) -> dict[str, Any]:
    """An image at the config's size, every pixel 1: towers that stack images drop the
    all-zero ones as padding."""
    vision = modality_config(req.config, ("vision", "image"))
    height, width = image_size(vision)
    channels = int(read(vision, "num_channels") or 3)
    return {"pixel_values": torch.ones(req.batch, channels, height, width)}  # (B, C, H, W)


def named_pixels(req: Request, name: str) -> dict[str, Any]:
    """Pixels for an input named ``<prefix>_pixel_values`` at the size of the config named
    after the prefix (``high_res_vision_config`` for ``high_res_pixel_values``), else of
    the vision config; :class:`NoSize` for a name that does not end in ``pixel_values``."""
    prefix = name.removesuffix("pixel_values").rstrip("_")
    if not name.endswith("pixel_values"):
        raise NoSize(name, [])
    vision = modality_config(req.config, (f"{prefix}_vision", prefix) if prefix else ())
    if vision is req.config:
        vision = modality_config(req.config, ("vision", "image"))
    height, width = image_size(vision)
    channels = int(read(vision, "num_channels") or 3)
    return {name: torch.ones(req.batch, channels, height, width)}  # (B, C, H, W)


def video(req: Request, default_frames: int | None = None) -> dict[str, Any]:
    """A clip at the config's frame count, else ``default_frames``; :class:`NoSize` where
    neither gives one."""
    vision = modality_config(req.config, ("vision", "video"))
    frames = find_size(vision, FRAMES) or find_size(req.config, FRAMES) or default_frames
    height, width = image_size(vision)
    channels = int(read(vision, "num_channels") or 3)
    if frames is None:
        raise NoSize("pixel_values_videos", [str(req.batch), "FRAMES", str(channels),
                                             str(height), str(width)])
    # (B, frames, C, H, W)
    return {"pixel_values_videos": torch.ones(req.batch, frames, channels, height, width)}


def _front_end_width(model: nn.Module | None) -> int | None:
    """The feature width a 2-D convolution front end over ``(B, 1, frames, features)``
    implies: the first linear layer after it reads ``channels · features / stride``."""
    if model is None:
        return None
    convs: list[nn.Conv2d] = []
    for module in model.modules():
        if isinstance(module, nn.Conv2d) and (convs or module.in_channels == 1):
            convs.append(module)
        elif isinstance(module, nn.Linear) and convs:
            stride = math.prod(int(c.stride[1]) for c in convs)
            channels = convs[-1].out_channels
            if module.in_features % channels == 0:
                return module.in_features // channels * stride
            return None
    return None


def audio_config(req: Request) -> Any:
    """The config that sizes the audio input: the one holding a feature width, else the
    audio config."""
    return find_node(req.config, AUDIO_WIDTHS, AUDIO_WORDS) or modality_config(
        req.config, AUDIO_WORDS)


MAX_STACKED = 8
"""Most frames a model stacks into one input row (a linear layer over k · mel bins)."""


def _stacked(model: nn.Module | None, width: int) -> int:
    """How many ``width``-wide frames the model's first layer reads as one row: k where
    that layer is a linear layer over k · width features (frames stacked), else 1."""
    for module in model.modules() if model is not None else ():
        if isinstance(module, (nn.Conv1d, nn.Conv2d)):
            return 1
        if isinstance(module, nn.Linear):
            k, rest = divmod(module.in_features, width)
            return k if not rest and 1 < k <= MAX_STACKED else 1
    return 1


def _width(req: Request, audio: Any) -> int | None:
    width = next((int(read(audio, k)) for k in AUDIO_WIDTHS if is_size(read(audio, k))), None)
    if width is None:
        return _front_end_width(req.model)
    return width * _stacked(req.model, width)


def _reads_channels_first(model: nn.Module | None, width: int) -> bool:
    """Whether the first layer that reads ``width``-wide features is a 1-D convolution
    (which takes them as channels, ``(B, features, frames)``)."""
    for module in model.modules() if model is not None else ():
        if isinstance(module, nn.Conv1d) and module.in_channels == width:
            return True
        if (isinstance(module, nn.Linear) and module.in_features == width) or \
                (isinstance(module, nn.Conv2d) and module.in_channels == 1):
            return False
    return False


def _whisper_style(req: Request, audio: Any) -> bool:
    """Features as ``(B, mel bins, frames)``: Whisper's fixed encoder positions, or a 1-D
    convolution front end over the mel bins."""
    mels = read(audio, "num_mel_bins")
    if not is_size(mels) or read(audio, "input_feat_per_channel") is not None:
        return False
    return is_size(read(audio, "max_source_positions")) or _reads_channels_first(
        req.model, int(mels))


def frames_axis(req: Request) -> int:
    """The frame axis of the audio features :func:`features` makes."""
    return -1 if _whisper_style(req, audio_config(req)) else 1


def features(req: Request, name: str = "input_features") -> dict[str, Any]:
    """Audio features: Whisper-style ``(B, mel bins, 2 · positions)`` where the config fixes
    the encoder positions, else ``(B, frames, width)`` with frames = seq_len · the
    config's subsampling."""
    audio = audio_config(req)
    factor = find_size(audio, AUDIO_SUBSAMPLING) or 2 ** int(read(audio, "num_conv_layers") or 0)
    frames = req.seq_len * factor
    if _whisper_style(req, audio):  # (B, mel bins, frames), 2 frames per encoder position
        positions = read(audio, "max_source_positions")
        frames = 2 * positions if is_size(positions) else frames
        return {name: torch.zeros(req.batch, read(audio, "num_mel_bins"), frames)}
    width = _width(req, audio)
    if width is None:
        raise NoSize(name, [str(req.batch), str(frames), "FEATURE_WIDTH"])
    width *= int(read(audio, "input_channels") or 1)
    return {name: torch.zeros(req.batch, frames, width)}  # (B, frames, features)


def _front_end_stride(model: nn.Module | None) -> int:
    """Samples per position of a 1-D convolution front end over raw audio: the product of
    the strides of the convolutions from the first one over one channel to the first
    linear layer; 1 where the model has none."""
    stride = 0
    for module in model.modules() if model is not None else ():
        if isinstance(module, nn.Conv1d) and (stride or module.in_channels == 1):
            stride = max(stride, 1) * int(module.stride[0])
        elif isinstance(module, nn.Linear) and stride:
            break
    return max(stride, 1)


SAMPLES_PER_POSITION = ("samples_per_token", "hop_length")
"""Config names of how many raw samples make one encoder position, where no convolution
strides (``conv_stride``) say."""


def waveform(req: Request) -> dict[str, Any]:
    """Raw audio of about ``seq_len`` encoder positions: the product of the feature
    encoder's strides, else the samples per position the config names, else the strides
    of the model's convolution front end, per position."""
    audio = modality_config(req.config, AUDIO_WORDS)
    strides = read(audio, "conv_stride")
    per = math.prod(int(s) for s in strides) if isinstance(strides, (list, tuple)) and \
        strides else find_size(audio, SAMPLES_PER_POSITION) or _front_end_stride(req.model)
    return {"input_values": torch.zeros(req.batch, req.seq_len * per)}  # (B, samples)


def embeddings(req: Request, name: str) -> dict[str, Any]:
    """``(B, n, width)`` rows for an input that holds embeddings or hidden states."""
    width = find_size(req.config, WIDTHS)
    if width is None:
        raise NoSize(name, [str(req.batch), str(req.seq_len), "WIDTH"])
    return {name: torch.zeros(req.batch, req.seq_len, width)}  # (B, n, d)


MAKERS: dict[str, Callable[[Request], dict[str, Any]]] = {
    "input_ids": text,
    "pixel_values": pixels,
    "pixel_values_videos": video,
    "input_features": features,
    "input_values": waveform,
}
"""Example inputs for the input names transformers models share."""
