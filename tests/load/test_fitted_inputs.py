"""Config inputs fitted to the forward: pixels with a frames or images axis, image sizes
beside tiled pixels, pixels at a named config's size, inputs the forward needs without
requiring them, and the text alone, saying so, where a modality's inputs do not run."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import torch
from fixtures.configs import Config, shapes_of
from fixtures.reports import hand_report
from torch import nn

from mhaudit.data import Coverage, LeftOutInput
from mhaudit.load.inputs import config_inputs, fitted_inputs
from mhaudit.load.rows import runs


class Stacker(nn.Module):
    """A text model whose image tower reads ``(B, images, C, H, W)`` and drops the images
    that are all zero (padding), as Idefics-style towers do: 4 rows an image."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 8, 8, 8)

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        b, n, c, h, w = pixel_values.shape  # raises on (B, C, H, W)
        images = pixel_values.reshape(b * n, c, h, w)  # (B·N, C, H, W)
        real = images.flatten(1).any(1)  # an all-zero image is padding
        return self.patches(images[real]).flatten(2).transpose(1, 2)  # (real, 4, 8)

    def forward(self, input_ids: Any, pixel_values: Any = None) -> Any:
        if pixel_values is not None:
            rows = self.get_image_features(pixel_values).reshape(-1, 8)
            assert int((input_ids == 5).sum()) == rows.shape[0], "tokens and rows differ"
        return input_ids


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_pixels_gain_an_images_axis_where_the_tower_reads_one(device: str) -> None:
    config = Config(image_token_id=5, vision_config=Config(image_size=16))
    with torch.device(device):
        kwargs, left_out = fitted_inputs("input_ids", config, 1, 6, model=Stacker())
    assert left_out == ()
    # one 16×16 image of 1s (not padding) on an images axis: (16 / 8)² = 4 rows, 4 tokens
    assert shapes_of(kwargs) == {"input_ids": (1, 4 + 6), "pixel_values": (1, 1, 3, 16, 16)}


class Clip(nn.Module):
    """A video model whose main input is ``(B, frames, C, H, W)``."""

    main_input_name = "pixel_values"

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv3d(3, 8, (1, 8, 8), (1, 8, 8))

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if pixel_values.dim() != 5:
            raise ValueError("expected (B, frames, C, H, W)")
        return self.patches(pixel_values.transpose(1, 2))  # (B, 8, T, H / 8, W / 8)


def test_a_video_main_input_takes_the_configs_frame_count() -> None:
    config = Config(num_frames=3, image_size=16)
    with torch.device("meta"):
        kwargs = config_inputs("pixel_values", config, 2, 8, model=Clip())
    assert shapes_of(kwargs) == {"pixel_values": (2, 3, 3, 16, 16)}  # (B, frames, C, H, W)


class Tiler(nn.Module):
    """A text model that cuts each image into tiles by its size (``image_sizes``, one
    (height, width) row per image) and reads the first that many of the tiles axis."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 8, 8, 8)

    def get_image_features(self, pixel_values: torch.Tensor,
                           image_sizes: torch.Tensor) -> torch.Tensor:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_tiles, channels, height, width)`)
            The tiles of each image.
        image_sizes (`torch.Tensor` of shape `(num_images, 2)`)
            The sizes of the images in the batch, (height, width) for each image.
        """
        tiles = [int(h) // 8 * (int(w) // 8) - 1 for h, w in image_sizes.tolist()]  # 3 a 16²
        if pixel_values.dim() != 5:
            raise ValueError("expected (B, tiles, C, H, W)")
        kept = torch.cat([p[:n] for p, n in zip(pixel_values, tiles, strict=True)])
        assert kept.shape[0] == sum(tiles), "too few tiles"
        return self.patches(kept).flatten(2).transpose(1, 2)  # (tiles, 4, 8)

    def forward(self, input_ids: Any, pixel_values: Any = None, image_sizes: Any = None) -> Any:
        if pixel_values is not None:
            self.get_image_features(pixel_values, image_sizes)
        return input_ids


def test_image_sizes_give_one_height_and_width_row_per_image() -> None:
    config = Config(image_token_id=5, vision_config=Config(image_size=16))
    kwargs = config_inputs("input_ids", config, 1, 6, model=Tiler())
    assert kwargs["image_sizes"].tolist() == [[16, 16]]  # the pixels' (height, width)
    # 16 // 8 · 16 // 8 - 1 = 3 tiles: the tiles axis tried with 1, 2, then 3
    assert kwargs["pixel_values"].shape == (1, 3, 3, 16, 16)
    assert kwargs["input_ids"].shape == (1, 3 * 4 + 6)  # 4 rows a 16×16 tile, then the text


class TwoScales(nn.Module):
    """A text model whose image features need a second, larger image it documents not."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.low, self.high = nn.Conv2d(3, 8, 8, 8), nn.Conv2d(3, 8, 16, 16)

    def get_image_features(self, pixel_values: torch.Tensor,
                           high_res_pixel_values: torch.Tensor) -> torch.Tensor:
        rows = self.low(pixel_values) + self.high(high_res_pixel_values)  # (B, 8, 2, 2)
        return rows.flatten(2).transpose(1, 2)  # (B, 4, 8)

    def forward(self, input_ids: Any, pixel_values: Any = None,
                high_res_pixel_values: Any = None) -> Any:
        return input_ids


def test_undocumented_pixels_take_the_size_of_the_config_named_after_them() -> None:
    config = Config(image_token_id=5, vision_config=Config(image_size=16),
                    high_res_vision_config=Config(image_size=32))
    kwargs = config_inputs("input_ids", config, 1, 6, model=TwoScales())
    assert shapes_of(kwargs) == {"input_ids": (1, 4 + 6), "pixel_values": (1, 3, 16, 16),
                               "high_res_pixel_values": (1, 3, 32, 32)}


class Pair(nn.Module):
    """Text and image read together: the forward needs pixels it does not require."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 8, 8, 8)

    def forward(self, input_ids: Any, pixel_values: Any = None) -> Any:
        if pixel_values is None:
            raise ValueError("You have to specify pixel_values")
        return self.patches(pixel_values).sum() + input_ids.sum()


def test_pixels_the_forward_needs_but_does_not_require_are_added() -> None:
    config = Config(image_size=16)  # no vision config: the root sizes the image
    kwargs, left_out = fitted_inputs("input_ids", config, 1, 6, model=Pair())
    assert left_out == ()
    assert shapes_of(kwargs) == {"input_ids": (1, 6), "pixel_values": (1, 3, 16, 16)}


class Broken(nn.Module):
    """A text model whose image path never runs."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        raise ValueError("no image path today")

    def forward(self, input_ids: Any, pixel_values: Any = None) -> Any:
        if pixel_values is not None:
            self.get_image_features(pixel_values)
        return self.embed(input_ids)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_text_alone_where_the_image_inputs_do_not_run_and_why(device: str) -> None:
    config = Config(image_token_id=5, vision_config=Config(image_size=16))
    with torch.device(device):
        model = Broken()
        kwargs, left_out = fitted_inputs("input_ids", config, 1, 6, model=model)
    assert shapes_of(kwargs) == {"input_ids": (1, 6)}
    assert left_out == (LeftOutInput("pixel_values", "ValueError: no image path today"),)


class SpanReader(nn.Module):
    """Images and clips beside the text; the forward takes video tokens only inside
    start and end markers (a processor's convention no config gives)."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 8, 8, 8)

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.patches(pixel_values).flatten(2).transpose(1, 2)  # (B, 4, 8)

    def get_video_features(self, pixel_values_videos: torch.Tensor) -> torch.Tensor:
        return self.get_image_features(pixel_values_videos.flatten(0, 1))  # (B·T, 4, 8)

    def forward(self, input_ids: Any, pixel_values: Any = None,
                pixel_values_videos: Any = None) -> Any:
        if pixel_values_videos is not None:
            raise ValueError("video tokens outside a video span")
        return input_ids


def test_one_modality_is_left_out_where_the_others_run() -> None:
    config = Config(image_token_id=5, video_token_id=6, vision_config=Config(image_size=16))
    kwargs, left_out = fitted_inputs("input_ids", config, 1, 6, model=SpanReader())
    # the image's (16 / 8)² = 4 tokens stay; the clip and its tokens go
    assert shapes_of(kwargs) == {"input_ids": (1, 4 + 6), "pixel_values": (1, 3, 16, 16)}
    assert left_out == (LeftOutInput("pixel_values_videos",
                                     "ValueError: video tokens outside a video span"),)


def test_the_users_inputs_are_never_left_out() -> None:
    config = Config(image_token_id=5, vision_config=Config(image_size=16))
    kwargs, left_out = fitted_inputs("input_ids", config, 1, 6, model=Broken(),
                                     shapes=(("pixel_values", (1, 3, 16, 16)),))
    assert left_out == () and "pixel_values" in kwargs  # the trace will say why it fails


class Positions(nn.Module):
    """A model whose forward reads its position buffer's values (a data-dependent step
    the meta device cannot run); ``init_weights`` fills the buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(4, 8)
        self.register_buffer("position_ids", torch.arange(4), persistent=False)

    def init_weights(self) -> None:
        self.position_ids.copy_(torch.arange(4))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        kept = self.position_ids[self.position_ids < input_ids.shape[1]]  # values read
        return self.embed(kept)


def test_a_cpu_copy_of_a_meta_model_is_initialised_by_its_own_init_weights() -> None:
    with torch.device("meta"):
        model = Positions()
    assert runs(model, {"input_ids": torch.zeros(1, 4, dtype=torch.long)})


def test_inputs_left_out_are_reported_in_coverage() -> None:
    from mhaudit.render.table import total_lines

    why = "ValueError: no image path today"
    report = replace(hand_report(), coverage=Coverage(
        inputs_left_out=(LeftOutInput("pixel_values", why),)))
    assert report.to_dict()["coverage"]["inputs_left_out"] == [
        {"input": "pixel_values", "why": why}]
    assert ("inputs left out, the forward did not run on them (their towers not audited): "
            f"pixel_values ({why})") in total_lines(report)
    assert "inputs_left_out" not in hand_report().to_dict()["coverage"]  # only when some are


VIVIT = {"model_type": "vivit", "hidden_size": 32, "num_hidden_layers": 1,
         "num_attention_heads": 4, "intermediate_size": 64, "image_size": 32,
         "num_frames": 4, "tubelet_size": [2, 16, 16]}


@pytest.mark.slow
def test_a_video_transformer_reads_a_clip_at_its_configs_frame_count(tmp_path: Any) -> None:
    pytest.importorskip("transformers")
    from mhaudit import audit_target

    path = tmp_path / "config.json"
    path.write_text(json.dumps(VIVIT), encoding="utf-8")
    report = audit_target(str(path)).to_dict()
    assert report["model"]["inputs"]["pixel_values"]["shape"] == [1, 4, 3, 32, 32]
    # tubelets of 2 frames × 16 × 16: (4 / 2) · (32 / 16)² = 8, and the CLS token: 9
    assert [(b["num_heads"], b["seq_len_q"]) for b in report["blocks"]] == [(4, 9)]
