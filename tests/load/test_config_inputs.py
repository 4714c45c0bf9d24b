"""Example inputs made from what a forward's docstring and a config say, for hand-made
models: time series, agents, video, audio widths under other names and tokens of towers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fixtures.configs import Config
from torch import nn

from mhaudit.errors import LoadError
from mhaudit.load.docshapes import documented_inputs
from mhaudit.load.inputs import config_inputs


def _shapes(kwargs: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {k: (tuple(v.shape), v.dtype) for k, v in kwargs.items()}


class Agent(nn.Module):
    main_input_name = "states"

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(5, 8)

    def forward(self, states: Any = None, actions: Any = None, timesteps: Any = None,
                attention_mask: Any = None) -> Any:
        r"""
        states (`torch.Tensor` of shape `(batch_size, episode_length, state_dim)`):
            The states.
        actions (`torch.Tensor` of shape `(batch_size, episode_length, act_dim)`):
            The actions.
        timesteps (`torch.LongTensor` of shape `(batch_size, episode_length)`):
            The time steps.
        attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            Left out: the docstring calls it optional.
        """
        return self.embed(states)


def test_inputs_follow_the_docstring_shapes_and_the_config_sizes() -> None:
    kwargs = config_inputs("states", Config(state_dim=5, act_dim=3), 2, 8, model=Agent())
    assert _shapes(kwargs) == {"states": ((2, 8, 5), torch.float32),
                               "actions": ((2, 8, 3), torch.float32),
                               "timesteps": ((2, 8), torch.long)}


def test_a_named_shape_stands_in_for_a_documented_input() -> None:
    kwargs = config_inputs("states", Config(state_dim=5), 2, 8, model=Agent(),
                           shapes=[("actions", (2, 8, 6))])
    assert kwargs["actions"].shape == (2, 8, 6)  # act_dim is not in the config: no error


def test_an_unsized_dimension_names_the_exact_option() -> None:
    with pytest.raises(LoadError) as caught:
        config_inputs("states", Config(state_dim=5), 2, 8, model=Agent())
    assert "'actions'" in caught.value.message and "ACT_DIM" in caught.value.message
    assert "--input-shape actions=2x8xACT_DIM" in caught.value.tip


class Forecaster(nn.Module):
    main_input_name = "past_values"

    def forward(self, past_values: Any, past_values_padding: Any, freq: Any) -> Any:
        r"""
        past_values (`torch.Tensor` of shape `(bs, sequence_length, num_input_channels)`):
        past_values_padding (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
        freq (`torch.LongTensor` of shape `(batch_size,)`):
        """
        return past_values


def test_a_time_series_spans_the_context_length_over_its_channels() -> None:
    config = Config(context_length=96, num_input_channels=7)
    kwargs = config_inputs("past_values", config, 1, 16, model=Forecaster())
    assert _shapes(kwargs) == {"past_values": ((1, 96, 7), torch.float32),
                               "past_values_padding": ((1, 96), torch.long),
                               "freq": ((1,), torch.long)}
    assert not kwargs["past_values_padding"].any()  # nothing is padding


class Drafter(nn.Module):
    main_input_name = "noise_embeds"

    def forward(self, noise_embeds: Any, context_hidden_states: Any) -> Any:
        r"""
        noise_embeds (`torch.Tensor` of shape `[batch_size, config.block_size, dim]`):
        context_hidden_states (`torch.Tensor` of shape `[batch_size, accepted, dim * len(config.layer_ids)]`):
        """  # noqa: E501
        return noise_embeds


def test_docstring_dimensions_may_be_expressions_of_the_config() -> None:
    config = Config(hidden_size=32, block_size=4, layer_ids=[1, 5, 9])
    kwargs = config_inputs("noise_embeds", config, 1, 10, model=Drafter())
    assert kwargs["noise_embeds"].shape == (1, 4, 32)
    assert kwargs["context_hidden_states"].shape == (1, 10, 96)  # unnamed length: seq_len


def test_docstring_entries_in_other_styles_are_read() -> None:
    def forward(audio_mel: Any, audio_mel_mask: Any) -> None:
        """Encodes a batch of MELs.

        Args:
            audio_mel: a torch.Tensor of shape [batch, num_frames, mel_bins].
            audio_mel_mask: a torch.BoolTensor of shape [batch, num_frames].
        """

    docs = documented_inputs(forward)
    assert docs["audio_mel"].dims == ("batch", "num_frames", "mel_bins")
    assert docs["audio_mel_mask"].type_name == "torch.BoolTensor"


class Clip(nn.Module):
    main_input_name = "pixel_values_videos"

    def forward(self, pixel_values_videos: Any) -> Any:
        return pixel_values_videos


def test_video_takes_its_frames_and_side_from_the_config() -> None:
    config = Config(frames_per_clip=6, crop_size=32)
    kwargs = config_inputs("pixel_values_videos", config, 1, 16, model=Clip())
    assert kwargs["pixel_values_videos"].shape == (1, 6, 3, 32, 32)  # (B, T, C, H, W)


def test_video_without_a_frame_count_names_the_option() -> None:
    with pytest.raises(LoadError, match="pixel_values_videos=1xFRAMESx3x224x224"):
        config_inputs("pixel_values_videos", Config(), 1, 16, model=Clip())


class Listener(nn.Module):
    main_input_name = "input_features"

    def __init__(self, front: nn.Module) -> None:
        super().__init__()
        self.front = front

    def forward(self, input_features: Any) -> Any:
        return self.front(input_features)


@pytest.mark.parametrize(("config", "front", "shape"), [
    # mel bins in a nested encoder config; 8 frames per encoder position
    (Config(encoder_config=Config(num_mel_bins=80, subsampling_factor=8)),
     nn.Conv2d(1, 4, 3), (1, 128, 80)),
    # a 1-D convolution over the mel bins reads them as channels: (B, mels, frames)
    (Config(audio_config=Config(num_mel_bins=40)), nn.Conv1d(40, 8, 3), (1, 40, 16)),
    # a linear layer over 4 stacked frames of 20 mel bins
    (Config(encoder_config=Config(num_mel_bins=20)), nn.Linear(80, 8), (1, 16, 80)),
    # no width in the config: a 2-D convolution front end (stride 2 twice, 4 channels)
    # flattened into a linear layer of 4 · 32 / 4 inputs implies 32 features
    (Config(hidden_size=8), nn.Sequential(nn.Conv2d(1, 4, 3, 2, 1), nn.Conv2d(4, 4, 3, 2, 1),
                                          nn.Linear(32, 8)), (1, 16, 32)),
    # the feature width under its projection's name
    (Config(feature_projection_input_dim=160), nn.Linear(160, 8), (1, 16, 160)),
])
def test_audio_feature_widths_under_every_name(config: Config, front: nn.Module,
                                               shape: tuple[int, ...]) -> None:
    kwargs = config_inputs("input_features", config, 1, 16, model=Listener(front))
    assert kwargs["input_features"].shape == shape


class Captioner(nn.Module):
    """A text model with an image tower whose features fill placeholder tokens."""

    main_input_name = "input_ids"

    def __init__(self, masked: bool = False) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 8, 4, 4)
        self.masked = masked

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        rows = self.patches(pixel_values).flatten(2).transpose(1, 2)  # (B, 16, 8)
        if self.masked:  # a data-dependent shape: meta tensors cannot run it
            rows = rows[pixel_values.new_ones(rows.shape[:2], dtype=torch.bool)]
        return rows

    def forward(self, input_ids: Any, pixel_values: Any = None) -> Any:
        return input_ids


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_image_tokens_are_counted_by_the_models_feature_method(masked: bool,
                                                                device: str) -> None:
    config = Config(image_token_id=7, vision_config=Config(image_size=16))
    with torch.device(device):
        model = Captioner(masked)
        kwargs = config_inputs("input_ids", config, 2, 5, model=model)
    assert kwargs["pixel_values"].shape == (2, 3, 16, 16)
    assert kwargs["input_ids"].shape == (2, 16 + 5)  # 16 patches per image, then the text
    if device == "cpu":
        assert (kwargs["input_ids"][:, :16] == 7).all() and not kwargs["input_ids"][:, 16:].any()


def test_no_tokens_where_the_config_names_no_token_id() -> None:
    config = Config(vision_config=Config(image_size=16))
    kwargs = config_inputs("input_ids", config, 1, 5, model=Captioner())
    assert _shapes(kwargs) == {"input_ids": ((1, 5), torch.long),
                               "pixel_values": ((1, 3, 16, 16), torch.float32)}


class Transcriber(nn.Module):
    """A text model with an audio tower that keeps the frames its mask marks valid."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.frames = nn.Conv1d(20, 8, 4, 4)  # mel bins as channels: (B, 20, frames)

    def get_audio_features(self, input_features: torch.Tensor,
                           input_features_mask: torch.Tensor) -> torch.Tensor:
        rows = self.frames(input_features).transpose(1, 2)  # (B, frames / 4, 8)
        return rows[input_features_mask[:, ::4].bool()]  # (valid rows, 8)

    def forward(self, input_ids: Any, input_features: Any = None,
                input_features_mask: Any = None) -> Any:
        return input_ids


def test_audio_tokens_with_the_frame_mask_the_feature_method_requires() -> None:
    config = Config(audio_token_id=3, audio_config=Config(num_mel_bins=20))
    with torch.device("meta"):
        kwargs = config_inputs("input_ids", config, 1, 8, model=Transcriber())
    assert _shapes(kwargs) == {"input_ids": ((1, 2 + 8), torch.long),  # 8 frames / 4
                               "input_features": ((1, 20, 8), torch.float32),
                               "input_features_mask": ((1, 8), torch.long)}


class Translator(nn.Module):
    """An encoder-decoder whose encoder holds the image tower and its feature method."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.encoder = Captioner()

    def get_encoder(self) -> nn.Module:
        return self.encoder

    def forward(self, input_ids: Any, pixel_values: Any = None,
                decoder_input_ids: Any = None) -> Any:
        return input_ids


def test_an_encoders_tower_and_nested_vision_config_are_found() -> None:
    config = Config(image_token_id=7, is_encoder_decoder=True,
                    encoder=Config(vision_config=Config(image_size=8)))
    kwargs = config_inputs("input_ids", config, 1, 5, model=Translator())
    assert _shapes(kwargs) == {"input_ids": ((1, 4 + 5), torch.long),  # 2 × 2 patches
                               "pixel_values": ((1, 3, 8, 8), torch.float32),
                               "decoder_input_ids": ((1, 5), torch.long)}
