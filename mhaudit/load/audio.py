"""Audio inputs in the layouts and frame counts an audio tower may accept, in the order tried."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mhaudit.load.configtree import find_size, is_size, read
from mhaudit.load.docshapes import DocInput
from mhaudit.load.modalities import AUDIO_WIDTHS, Request, audio_config, frames_axis

WINDOW_WORDS = ("window", "chunk")
"""Config names holding one of these words size the windows an encoder cuts its frames
into; the frames must fill whole windows (Qwen3-ASR's encoder takes a multiple of
``2 · n_window`` mel frames)."""

WINDOW_FACTORS = (1, 2)
"""A window's frame count as a multiple of its config size (a window of ``n`` positions
often spans ``2 · n`` frames before the encoder's stride-2 convolution)."""


@dataclass(frozen=True)
class Candidate:
    """One audio input to try, and the axis that holds its frames (or samples)."""

    tensor: torch.Tensor
    frames_axis: int
    """Non-negative axis of ``tensor`` along which a mask over its frames runs."""


def window_frames(audio: Any) -> list[int]:
    """Frame counts a windowed encoder may need its input to be a multiple of, smallest
    first: each window or chunk size the audio config gives, once and twice."""
    names = sorted(vars(audio)) if hasattr(audio, "__dict__") else []
    sizes = {int(value) * factor for name in names if any(w in name for w in WINDOW_WORDS)
             for value in (read(audio, name),) if is_size(value) for factor in WINDOW_FACTORS}
    return sorted(sizes)


def _zeros(tensor: torch.Tensor, axis: int, frames: int, width: int) -> torch.Tensor:
    shape = list(tensor.shape)
    shape[axis], shape[3 - axis] = frames, width
    return tensor.new_zeros(shape)


def candidates(req: Request, name: str, tensor: torch.Tensor) -> Iterator[Candidate]:
    """The input as made first, then the other layout, the width the config names (where
    the input stacked frames), and frame counts rounded up to each window the config names.

    A waveform ``(B, samples)`` is also tried as ``(B, 1, samples)`` (a 1-D convolution
    front end that takes the channel axis from its caller). Features are tried as
    ``(B, frames, width)`` and ``(B, width, frames)``: the front end does not say which
    (a 2-D convolution over ``(B, 1, mels, frames)`` and one over ``(B, 1, frames, mels)``
    look alike)."""
    if tensor.dim() == 2:  # (B, samples)
        yield Candidate(tensor, 1)
        yield Candidate(tensor.unsqueeze(1), 2)  # (B, 1, samples)
        return
    if tensor.dim() != 3 or name == "input_values":
        yield Candidate(tensor, 1)
        return
    audio = audio_config(req)
    axis = frames_axis(req) % 3
    frames, width = int(tensor.shape[axis]), int(tensor.shape[3 - axis])
    named = next((int(read(audio, k)) for k in AUDIO_WIDTHS if is_size(read(audio, k))), width)
    rounded = (-(-frames // size) * size for size in window_frames(audio))
    for size in dict.fromkeys((frames, *rounded)):
        for columns in dict.fromkeys((width, named)):
            base = tensor if (size, columns) == (frames, width) else \
                _zeros(tensor, axis, size, columns)
            yield Candidate(base, axis)
            yield Candidate(base.transpose(1, 2), 3 - axis)  # the other layout


CHANNELS = ("audio_channels", "channels", "num_channels")
"""Config names of a waveform's channel count."""


def documented_waveform(req: Request, tensor: torch.Tensor, doc: DocInput) -> torch.Tensor:
    """Raw audio ``(B, samples)`` in the three-axis shape the forward's docstring gives:
    ``(B, channels, samples)`` (one channel, or the config's count), or a spectrogram
    ``(B, frames, mel bins)`` where the last axis is the mel bins (the config's
    ``max_length`` frames, else the sequence length)."""
    if len(doc.dims) != 3 or tensor.dim() != 2:
        return tensor
    audio = audio_config(req)
    last = doc.dims[-1].removeprefix("config.")
    if last in AUDIO_WIDTHS:  # (B, frames, mel bins)
        width = find_size(audio, (last,)) or find_size(req.config, (last,))
        frames = find_size(audio, ("max_length",)) or req.seq_len
        return tensor.new_zeros(tensor.shape[0], frames, width) if width else tensor
    middle = doc.dims[1]
    channels = 1 if middle == "1" else find_size(audio, CHANNELS) or 1
    if middle != "1" and "channel" not in middle:
        return tensor
    return tensor.new_zeros(tensor.shape[0], channels, tensor.shape[1])  # (B, C, samples)
