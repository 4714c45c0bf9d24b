"""Audio towers fed by what they accept: layouts, window multiples, masks, towers' rows."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from fixtures.configs import Config, shapes_of
from torch import nn

from mhaudit.load.audio import window_frames
from mhaudit.load.inputs import config_inputs


class Speaker(nn.Module):
    """The text side of every fixture: token embeddings 8 wide."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)

    def get_input_embeddings(self) -> nn.Module:
        return self.embed


class Windowed(Speaker):
    """Mel frames as ``(B, mels, frames)``, cut into windows of 2 · n_window = 10 frames;
    a stride-2 convolution makes 5 rows per window."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.frames = nn.Conv1d(4, width, 2, 2)

    def get_audio_features(self, input_features: torch.Tensor,
                           input_features_mask: torch.Tensor) -> torch.Tensor:
        if input_features.shape[1] != 4 or input_features.shape[-1] % 10:
            raise ValueError("expects (B, 4 mels, a multiple of 10 frames)")
        return self.frames(input_features).transpose(1, 2).flatten(0, 1)  # (rows, 8)

    def forward(self, input_ids: Any, input_features: Any = None,
                input_features_mask: Any = None) -> Any:
        return input_ids


WINDOWED = Config(audio_token_id=3, audio_config=Config(num_mel_bins=4, n_window=5))


def test_frames_fill_the_windows_the_config_names_in_the_layout_the_tower_takes() -> None:
    # 6 frames (seq_len, no subsampling) fill no window of 5 or 10 in either layout;
    # 10 frames as (B, 4 mels, 10) do: 10 / 2 = 5 rows, so 5 placeholders before the text
    assert window_frames(WINDOWED.audio_config) == [5, 10]
    kwargs = config_inputs("input_ids", WINDOWED, 1, 6, model=Windowed())
    assert shapes_of(kwargs) == {"input_ids": (1, 5 + 6), "input_features": (1, 4, 10),
                               "input_features_mask": (1, 10)}
    assert (kwargs["input_ids"][0, :5] == 3).all() and not kwargs["input_ids"][0, 5:].any()


def test_rows_of_another_width_than_the_text_place_no_tokens() -> None:
    # 6-wide rows cannot fill placeholders in 8-wide embeddings: the forward would fail
    kwargs = config_inputs("input_ids", WINDOWED, 1, 6, model=Windowed(width=6))
    assert shapes_of(kwargs) == {"input_ids": (1, 6)}


def test_a_users_feature_shape_is_never_changed() -> None:
    kwargs = config_inputs("input_ids", WINDOWED, 1, 6, model=Windowed(),
                           shapes=(("input_features", (1, 6, 4)),))
    assert shapes_of(kwargs) == {"input_features": (1, 6, 4), "input_ids": (1, 6)}


class Encoder(nn.Module):
    """An audio tower: (B, mels, frames) -> (B, frames / 2, 8)."""

    main_input_name = "input_features"

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 2, 2)

    def forward(self, input_features: torch.Tensor, attention_mask: Any = None) -> Any:
        assert attention_mask is None, "the text mask never reaches the tower"
        return SimpleNamespace(last_hidden_state=self.conv(input_features).transpose(1, 2))


class Untold(Speaker):
    """No feature method: the forward runs the tower and needs the mask over its frames."""

    def __init__(self) -> None:
        super().__init__()
        self.audio_tower = Encoder()

    def forward(self, input_ids: Any, input_features: Any = None, attention_mask: Any = None,
                feature_attention_mask: Any = None) -> Any:
        r"""
        feature_attention_mask (`torch.Tensor` of shape `(batch_size, feature_sequence_length)`):
            1 for frames that are not padding.
        """
        return input_ids


def test_without_a_feature_method_the_towers_rows_count_the_tokens() -> None:
    # 2 · 8 encoder positions = 16 frames, a stride-2 convolution: 8 rows, 8 placeholders
    config = Config(audio_token_index=3, audio_config=Config(num_mel_bins=4,
                                                             max_source_positions=8))
    kwargs = config_inputs("input_ids", config, 1, 5, model=Untold())
    assert shapes_of(kwargs) == {"input_ids": (1, 8 + 5), "input_features": (1, 4, 16),
                               "feature_attention_mask": (1, 16)}


class Timed(Speaker):
    """A feature method that reads the placeholders (to time its rows): it runs only once
    they are in place, so the tower counts them and the method confirms."""

    def __init__(self) -> None:
        super().__init__()
        self.audio_tower = Encoder()

    def get_audio_features(self, input_features: torch.Tensor,
                           input_ids: torch.Tensor) -> torch.Tensor:
        rows = self.audio_tower(input_features).last_hidden_state.flatten(0, 1)  # (rows, 8)
        if int((input_ids == 3).sum()) != rows.shape[0]:
            raise ValueError("audio tokens and features do not match")
        return rows

    def forward(self, input_ids: Any, input_features: Any = None) -> Any:
        return input_ids


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_feature_method_that_reads_the_placeholders_confirms_the_towers_count(
        device: str) -> None:
    config = Config(audio_token_id=3, audio_config=Config(num_mel_bins=4,
                                                          max_source_positions=4))
    with torch.device(device):
        kwargs = config_inputs("input_ids", config, 1, 5, model=Timed())
    # 2 · 4 = 8 frames, stride 2: 4 rows
    assert shapes_of(kwargs) == {"input_ids": (1, 4 + 5), "input_features": (1, 4, 8)}


class Waveform(Speaker):
    """Raw audio as ``(B, 1, samples)``: the convolution front end takes the channel axis
    from its caller; a padding mask over the samples is required beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 4, 4)

    def get_audio_features(self, input_values: torch.Tensor,
                           padding_mask: torch.Tensor) -> torch.Tensor:
        r"""
        input_values (`torch.FloatTensor` of shape `(batch_size, 1, num_samples)`):
            The waveform.
        padding_mask (`torch.Tensor` of shape `(batch_size, max_audio_length)`):
            1 for samples that are not padding.
        """
        return self.conv(input_values).transpose(1, 2).flatten(0, 1)  # (samples / 4, 8)

    def forward(self, input_ids: Any, input_values: Any = None,
                padding_mask: Any = None) -> Any:
        return input_ids


def test_raw_audio_with_a_channel_axis_and_the_inputs_the_feature_method_requires() -> None:
    # 5 positions · stride 4 = 20 samples; (B, 20) fails the convolution, (B, 1, 20) runs:
    # 20 / 4 = 5 rows. The padding mask is shaped as the docstring says: max_audio_length
    # is no config size, so it spans the sequence length
    config = Config(audio_token_id=3, audio_config=Config(conv_stride=[4]))
    kwargs = config_inputs("input_ids", config, 1, 5, model=Waveform())
    assert shapes_of(kwargs) == {"input_ids": (1, 5 + 5), "input_values": (1, 1, 20),
                               "padding_mask": (1, 5)}


class Chunked(nn.Module):
    """An audio encoder whose forward takes whole windows of 10 frames as (B, mels, frames)
    and needs the mask over them, though its signature calls the mask optional."""

    main_input_name = "input_features"

    def __init__(self) -> None:
        super().__init__()
        self.frames = nn.Conv1d(4, 8, 2, 2)

    def forward(self, input_features: torch.Tensor,
                input_features_mask: torch.Tensor | None = None) -> torch.Tensor:
        if input_features.shape[1] != 4 or input_features.shape[-1] % 10:
            raise ValueError("expects (B, 4 mels, a multiple of 10 frames)")
        assert input_features_mask is not None
        return self.frames(input_features * input_features_mask[:, None, :])


def test_an_encoders_own_input_is_fitted_to_what_its_forward_accepts() -> None:
    # 6 frames as (B, 6, 4) fail; (B, 4, 10) with a mask over the 10 frames runs
    kwargs = config_inputs("input_features", WINDOWED, 1, 6, model=Chunked())
    assert shapes_of(kwargs) == {"input_features": (1, 4, 10), "input_features_mask": (1, 10)}
    fixed = config_inputs("input_features", WINDOWED, 1, 6, model=Chunked(),
                          shapes=(("input_features", (1, 6, 4)),))
    assert shapes_of(fixed) == {"input_features": (1, 6, 4)}  # the user's shape stays


@pytest.mark.parametrize(("audio", "samples"), [
    (Config(conv_stride=[5, 2, 2]), 4 * 20),  # the feature encoder's strides: 20 per frame
    (Config(samples_per_token=96), 4 * 96),  # no strides: the config's samples per token
    (Config(hop_length=160), 4 * 160),
    (Config(), 4),
])
def test_raw_audio_spans_the_positions_at_the_configs_samples_each(audio: Config,
                                                                   samples: int) -> None:
    kwargs = config_inputs("input_values", Config(audio_config=audio), 1, 4)
    assert shapes_of(kwargs) == {"input_values": (1, samples)}


class Strided(nn.Module):
    """Raw audio through convolutions of stride 4 and 3 (no strides in the config)."""

    main_input_name = "input_values"

    def __init__(self) -> None:
        super().__init__()
        self.front = nn.Sequential(nn.Conv1d(1, 8, 4, 4), nn.Conv1d(8, 8, 3, 3))
        self.proj = nn.Linear(8, 8)
        self.later = nn.Conv1d(8, 8, 5, 5)  # after the first linear layer: not the front end

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self.proj(self.front(input_values[:, None]).transpose(1, 2))


def test_raw_audio_spans_the_positions_at_the_front_ends_strides() -> None:
    # 4 positions · (4 · 3) samples each = 48 samples
    kwargs = config_inputs("input_values", Config(audio_config=Config()), 1, 4,
                           model=Strided())
    assert shapes_of(kwargs) == {"input_values": (1, 48)}


def _documented(shape: str) -> nn.Module:
    """A model whose raw audio input is shaped by its forward's docstring only."""

    class Documented(nn.Module):
        main_input_name = "input_values"

        def forward(self, input_values: torch.Tensor) -> torch.Tensor:
            return input_values

    Documented.forward.__doc__ = f"input_values (`torch.Tensor` of shape `{shape}`):\n    Audio."
    return Documented()


@pytest.mark.parametrize(("shape", "expected"), [
    ("(batch_size, 1, num_samples)", (1, 1, 4)),  # 4 positions of 1 sample: one channel
    ("(batch_size, channels, sequence_length)", (1, 2, 4)),  # the config's 2 channels
    ("(batch_size, max_length, num_mel_bins)", (1, 12, 6)),  # a spectrogram at max_length
    ("(batch_size, sequence_length)", (1, 4)),
])
def test_raw_audio_takes_the_axes_the_docstring_gives(shape: str,
                                                      expected: tuple[int, ...]) -> None:
    config = Config(audio_config=Config(audio_channels=2, num_mel_bins=6, max_length=12))
    kwargs = config_inputs("input_values", config, 1, 4, model=_documented(shape))
    assert shapes_of(kwargs) == {"input_values": expected}
