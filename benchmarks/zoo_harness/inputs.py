"""The reference's own inputs, by transformers' conventions, and the model file that feeds
them to mhaudit.

Nothing here reads mhaudit: the inputs follow the model's ``main_input_name`` and the
required arguments of its ``forward``, at the sizes its config declares, as transformers'
processors and feature extractors shape them. A model these inputs cannot run is one
transformers cannot run from its tiny config; a model they run and mhaudit cannot audit is
mhaudit's failure.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any

from zoo_harness.expect import sub_configs

BATCH = 1
SEQ = 16
AUDIO_SAMPLES = 320 * SEQ + 80
"""Raw audio samples: wav2vec2-style feature encoders stride 320 samples per frame."""
FRAMES_PER_TOKEN = 2
"""Whisper-style encoders halve their mel frames with a stride-2 convolution."""


@dataclass(frozen=True)
class Spec:
    """One input tensor: its shape, and the ids' bound for integer inputs (0 for floats)."""

    shape: tuple[int, ...]
    high: int = 0
    values: tuple[int, ...] = ()
    """The integers of a tensor whose values are fixed (a patch grid), row-major; one
    value for a tensor filled with it (a mask of ones)."""


class NoConvention(Exception):
    """An input the conventions do not cover (the model cannot be run from them)."""


def _first(config: Any, *keys: str) -> Any:
    """The first of ``keys`` set anywhere in the config tree, the root first."""
    for _, sub in sub_configs(config):
        for key in keys:
            value = getattr(sub, key, None)
            if value is not None and not isinstance(value, bool):
                return value
    return None


def _side(value: Any) -> int:
    return int(value[0]) if isinstance(value, (list, tuple)) else int(value)


IMAGE = 224
"""Image side where the config names none: image processors' usual default."""
FRAMES = 8
"""Frames of a video where the config names none."""


def _ids(config: Any) -> list[Spec]:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None) or _first(config, "vocab_size")
    if not isinstance(vocab, int):
        raise NoConvention("no vocab_size for token ids")
    return [Spec((BATCH, SEQ), vocab)]


def _pixels(config: Any) -> list[Spec]:
    """(B, C, H, W) at the config's image size; a video model's (B, T, C, H, W) after it."""
    size = _first(config, "image_size", "img_size")
    channels = int(_first(config, "num_channels", "in_channels", "in_chans") or 3)
    side = _side(size) if size is not None else IMAGE
    found = [Spec((BATCH, channels, side, side))]
    frames = _first(config, "num_frames", "frames_per_clip")
    if isinstance(frames, int):
        found.append(Spec((BATCH, frames, channels, side, side)))
    return found


def _video(config: Any) -> list[Spec]:
    """(B, T, C, H, W) at the config's frames and image size."""
    (image, *_) = _pixels(config)
    frames = _first(config, "num_frames", "frames_per_clip")
    return [Spec((BATCH, frames if isinstance(frames, int) else FRAMES, *image.shape[1:]))]


def _grid(config: Any) -> tuple[int, int, int]:
    """(t, h, w) of one image as a packed-patch processor cuts it: one temporal patch and
    2 × 2 merged groups of patches."""
    merge = int(_first(config, "spatial_merge_size") or 1)
    return 1, 2 * merge, 2 * merge


def _patches(config: Any) -> list[Spec]:
    """Packed patches (t·h·w rows of C·T·P² values), as Qwen2-VL-style processors flatten
    an image for a tower that also takes its ``grid_thw``."""
    t, h, w = _grid(config)
    patch = _side(_first(config, "patch_size") or 14)
    channels = int(_first(config, "in_channels", "num_channels", "in_chans") or 3)
    temporal = int(_first(config, "temporal_patch_size") or 1)
    return [Spec((t * h * w, channels * temporal * patch * patch))]


def _grid_thw(config: Any) -> list[Spec]:
    return [Spec((1, 3), values=_grid(config))]


def _series(config: Any) -> list[Spec]:
    """Past values of a time series: (B, context length, channels)."""
    length = _first(config, "context_length")
    if not isinstance(length, int):
        raise NoConvention("no context_length for past_values")
    channels = int(_first(config, "num_input_channels") or 1)
    return [Spec((BATCH, length, channels)), Spec((BATCH, length))]


def _features(config: Any) -> list[Spec]:
    """Audio features: Whisper's (B, mel bins, 2 · encoder positions) where the config
    names both, else (B, frames, features) and (B, features, frames) at the feature width
    the config names."""
    mels, positions = _first(config, "num_mel_bins"), _first(config, "max_source_positions")
    if isinstance(mels, int) and isinstance(positions, int):
        return [Spec((BATCH, mels, FRAMES_PER_TOKEN * positions))]
    per_channel = _first(config, "input_feat_per_channel")
    if isinstance(per_channel, int):
        channels = int(_first(config, "input_channels") or 1)
        return [Spec((BATCH, 4 * SEQ, per_channel * channels))]
    size = _first(config, "feature_size", "feature_projection_input_dim", "input_feat_size",
                  "num_mel_bins")
    if isinstance(size, int):
        return [Spec((BATCH, 4 * SEQ, size)), Spec((BATCH, size, 4 * SEQ))]
    raise NoConvention("no feature size for input_features")


def _audio(config: Any) -> list[Spec]:
    """Raw audio, (B, samples) then (B, channels, samples); a spectrogram model's
    (B, frames, mel bins) where the config names both."""
    found = [Spec((BATCH, AUDIO_SAMPLES)), Spec((BATCH, 1, AUDIO_SAMPLES))]
    mels, frames = _first(config, "num_mel_bins"), _first(config, "max_length")
    if isinstance(mels, int) and isinstance(frames, int):
        found.insert(0, Spec((BATCH, frames, mels)))
    return found


BY_NAME = {"input_ids": _ids, "decoder_input_ids": _ids, "pixel_values": _pixels,
           "input_features": _features, "input_values": _audio, "past_values": _series,
           "pixel_values_videos": _video, "grid_thw": _grid_thw}
PACKED = ("hidden_states", "pixel_values")
"""Names of the packed patches a tower takes beside its ``grid_thw``."""
"""transformers' input names and how each one's processor shapes it (alternatives in
order)."""


def _sets(names: list[str], config: Any) -> list[dict[str, Spec]]:
    """Every combination of the names' alternatives, the first alternatives first."""
    sets: list[dict[str, Spec]] = [{}]
    for name in names:
        sets = [{**done, name: spec} for done in sets for spec in BY_NAME[name](config)]
    return sets


def conventional_inputs(model: Any) -> list[dict[str, Spec]]:
    """Input sets to try, in order: the model's main input with every required forward
    argument (and decoder ids for an encoder-decoder), then those with every other input
    of :data:`BY_NAME` the forward takes and the config can shape (a two-tower model needs
    its text and its pixels).

    Raises :class:`NoConvention` for a required argument the conventions do not cover."""
    config = model.config
    params = inspect.signature(model.forward).parameters
    required = [n for n, p in params.items() if p.default is p.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    main = getattr(model, "main_input_name", "input_ids")
    if main not in params and required:  # a tower that keeps its base class's main name
        main = required[0]
    names = [main] + [n for n in required if n != main]
    if "grid_thw" in names:
        return [{name: (_grid_thw(config) if name == "grid_thw" else _patches(config))[0]
                 for name in names if name in PACKED or name == "grid_thw"}]
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params \
            and main != "decoder_input_ids":
        names.append("decoder_input_ids")
    names = list(dict.fromkeys(names))
    masks = [n for n in names if n.endswith("_mask") and n[: -len("_mask")] in names]
    names = [n for n in names if n not in masks]
    for name in names:
        if name not in BY_NAME:
            raise NoConvention(f"no convention for the required input {name!r}")
    more = list(names)
    for name in BY_NAME:
        if name in params and name not in more:
            try:
                BY_NAME[name](config)
            except NoConvention:
                continue
            more.append(name)
    sets = _sets(names, config) + (_sets(more, config) if more != names else [])
    return [{**found, **{m: _ones(found[m[: -len("_mask")]]) for m in masks}} for found in sets]


def _ones(base: Spec) -> Spec:
    """A required ``X_mask`` beside input X: ones over X's batch and positions (every frame
    real), as feature extractors return it."""
    return Spec(base.shape[:2], values=(1,))


def make(specs: dict[str, Spec], seed: int = 0) -> dict[str, Any]:
    """The tensors of ``specs`` from one seeded generator (the same in every process)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return {name: torch.full(s.shape, s.values[0]) if len(s.values) == 1
            else torch.tensor(s.values).reshape(s.shape) if s.values
            else torch.randint(0, s.high, s.shape, generator=gen) if s.high
            else torch.randn(s.shape, generator=gen) for name, s in specs.items()}


MODEL_FILE = '''"""A transformers architecture from its tiny config, with conventional inputs."""
import json
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent


def build_model():
    data = json.loads((HERE / "config.json").read_text())
    fields = {{k: v for k, v in data.items() if k not in ("model_type", "transformers_version")}}
    config = transformers.AutoConfig.for_model(data["model_type"], **fields)
    return transformers.AutoModel.from_config(config)


def example_inputs():
    gen = torch.Generator().manual_seed(0)
    specs = {specs}
    return {{name: torch.full(shape, values[0]) if len(values) == 1
             else torch.tensor(values).reshape(shape) if values
             else torch.randint(0, high, shape, generator=gen) if high
             else torch.randn(shape, generator=gen)
             for name, (shape, high, values) in specs.items()}}
'''


def model_file(specs: dict[str, Spec]) -> str:
    """A model file for ``mhaudit report``: the tiny config's model and ``specs``' tensors,
    drawn as :func:`make` draws them."""
    literal = json.dumps({name: [list(s.shape), s.high, list(s.values)]
                          for name, s in specs.items()})
    return MODEL_FILE.format(specs=literal)
