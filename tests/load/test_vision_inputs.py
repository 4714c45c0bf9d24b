"""Vision inputs beyond plain pixels: flattened patches placed by a position mask, and a
video tower beside the text whose config names no frame count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from fixtures.configs import Config, shapes_of
from torch import nn

from mhaudit import audit_target
from mhaudit.load.inputs import config_inputs
from mhaudit.load.vision import DEFAULT_FRAMES


class PatchReader(nn.Module):
    """A text model whose image features replace the positions a mask marks (Kosmos-2.5's
    layout): flattened patches in, 3 latent rows out per image."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.project = nn.Linear(12, 8)  # 2 × 2 patches of 3 channels
        self.latents = nn.Parameter(torch.zeros(3, 8))

    def get_image_features(self, flattened_patches: torch.Tensor) -> torch.Tensor:
        rows = self.project(flattened_patches[:, :, 2:])  # (B, patches, 8)
        return self.latents.expand(rows.shape[0], -1, -1) + rows.mean(1, keepdim=True)

    def forward(self, input_ids: Any, flattened_patches: Any = None,
                image_embeds_position_mask: Any = None) -> Any:
        return input_ids


def test_flattened_patches_fill_the_positions_their_mask_marks() -> None:
    config = Config(vision_config=Config(patch_embed_hidden_size=12, max_num_patches=6))
    with torch.device("meta"):
        meta = config_inputs("input_ids", config, 2, 8, model=PatchReader())
    # 6 patches (the patch table bounds seq_len 8), each 2 indices + 12 pixels wide
    assert shapes_of(meta) == {"input_ids": (2, 3 + 8), "flattened_patches": (2, 6, 14),
                             "image_embeds_position_mask": (2, 3 + 8)}
    kwargs = config_inputs("input_ids", config, 1, 4, model=PatchReader())
    assert kwargs["image_embeds_position_mask"].tolist() == [[1, 1, 1, 0, 0, 0, 0]]
    patches = kwargs["flattened_patches"]
    assert not patches[..., :2].any() and bool(patches[..., 2:].all())  # indices 0, pixels 1


def test_patch_width_from_the_patch_side_and_channels() -> None:
    config = Config(vision_config=Config(patch_size=2, num_channels=3))
    kwargs = config_inputs("input_ids", config, 1, 4, model=PatchReader())
    assert kwargs["flattened_patches"].shape == (1, 4, 2 + 2 * 2 * 3)


class Watcher(nn.Module):
    """A text model with a video tower that folds frames into the batch: 4 rows a frame."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 8, 8, 8)

    def get_video_features(self, pixel_values_videos: torch.Tensor) -> torch.Tensor:
        b, t, c, h, w = pixel_values_videos.shape
        frames = pixel_values_videos.reshape(b * t, c, h, w)  # (B·T, C, H, W)
        return self.patches(frames).flatten(2).transpose(1, 2)  # (B·T, 4, 8)

    def forward(self, input_ids: Any, pixel_values_videos: Any = None) -> Any:
        return input_ids


@pytest.mark.parametrize(("config", "frames"), [
    (Config(video_token_id=5, vision_config=Config(image_size=16)), DEFAULT_FRAMES),
    (Config(video_token_id=5, vision_config=Config(image_size=16, num_frames=3)), 3),
])
def test_a_video_tower_beside_the_text_gets_a_clip(config: Config, frames: int) -> None:
    kwargs = config_inputs("input_ids", config, 1, 6, model=Watcher())
    assert kwargs["pixel_values_videos"].shape == (1, frames, 3, 16, 16)  # (B, T, C, H, W)
    # 16 / 8 = 2 × 2 patches a frame, then the text
    assert kwargs["input_ids"].shape == (1, 4 * frames + 6)
    assert (kwargs["input_ids"][0, :4 * frames] == 5).all()


def _write(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def _heads(report: dict[str, Any], prefix: str) -> list[tuple[int, int]]:
    return [(b["num_heads"], b["head_dim"]) for b in report["blocks"]
            if b["name"].startswith(prefix)]


KOSMOS_2_5 = {  # flattened patches; 4 latent queries fill 4 masked text positions
    "model_type": "kosmos-2.5", "latent_query_num": 4,
    "text_config": {"embed_dim": 32, "layers": 1, "ffn_dim": 64, "attention_heads": 4,
                    "vocab_size": 64, "max_position_embeddings": 32},
    "vision_config": {"hidden_size": 24, "patch_embed_hidden_size": 48, "head_dim": 8,
                      "num_hidden_layers": 1, "num_attention_heads": 3,
                      "intermediate_size": 48, "max_num_patches": 32}}


def test_kosmos_2_5_runs_its_patch_tower_and_latent_projection(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    report = audit_target(_write(tmp_path, "kosmos", KOSMOS_2_5), seq_len=8).to_dict()
    inputs = report["model"]["inputs"]
    assert inputs["flattened_patches"]["shape"] == [1, 8, 2 + 48]  # 16 × 3 pixels a patch
    assert inputs["input_ids"]["shape"] == [1, 4 + 8]  # latent_query_num, then the text
    assert _heads(report, "vision_model.") == [(3, 8)]  # vision heads 3 of head_dim 8
    # the latent projection attends with the text's 4 heads of 32 / 4 = 8
    assert _heads(report, "image_to_text_projection.") == [(4, 8)]
    assert _heads(report, "text_model.") == [(4, 8)]


VIDEO_LLAVA = {  # separate image and video towers; the config names no frame count
    "model_type": "video_llava", "image_token_index": 60, "video_token_index": 61,
    "text_config": {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64},
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 16,
                      "num_hidden_layers": 1, "num_attention_heads": 2,
                      "intermediate_size": 32, "image_size": 16, "patch_size": 8,
                      "projection_dim": 16}}


def test_video_llava_runs_its_video_tower(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    report = audit_target(_write(tmp_path, "video_llava", VIDEO_LLAVA), seq_len=8).to_dict()
    inputs = report["model"]["inputs"]
    assert inputs["pixel_values_videos"]["shape"] == [1, DEFAULT_FRAMES, 3, 16, 16]
    # 2 × 2 patches + CLS = 5 rows: the image features drop CLS ("default" selection),
    # the video features keep it: 4 image + 8 frames · 5 video + 8 text tokens
    assert inputs["input_ids"]["shape"] == [1, 4 + DEFAULT_FRAMES * 5 + 8]
    assert _heads(report, "video_tower.") == [(2, 8)]  # 16 / 2 heads
    assert _heads(report, "image_tower.") == [(2, 8)]
    assert _heads(report, "language_model.") == [(4, 8)]


class GridReader(nn.Module):
    """A NaViT-packed tower: its features need each image's patch grid, and the config
    leaves the image token id for the tokenizer to set."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 8, 4, 4)

    def get_image_features(self, pixel_values: torch.Tensor,
                           target_sizes: torch.Tensor) -> torch.Tensor:
        """
        target_sizes (`torch.IntTensor` of shape `(num_images, 2)`):
            Height and width (in patches) of each image.
        """
        rows = self.patches(pixel_values).flatten(2).transpose(1, 2)  # (B, 16, 8)
        count = int(target_sizes.prod(-1).sum())  # a value read from the data
        return rows.reshape(-1, 8)[:count]  # (patches, 8)

    def forward(self, input_ids: Any, pixel_values: Any = None, target_sizes: Any = None,
                mm_token_type_ids: Any = None) -> Any:
        return input_ids


class PixelSizes(GridReader):
    """The same tower documenting its sizes without saying they count patches."""

    def get_image_features(self, pixel_values: torch.Tensor,
                           target_sizes: torch.Tensor) -> torch.Tensor:
        """
        target_sizes (`torch.IntTensor` of shape `(num_images, 2)`):
            Height and width of each image.
        """
        return super().get_image_features(pixel_values, target_sizes)


def test_a_declared_token_id_and_the_patch_grid_make_a_packed_tower_run() -> None:
    config = Config(image_token_id=None, text_config=Config(vocab_size=50),
                    vision_config=Config(image_size=16, patch_size=4))
    kwargs = config_inputs("input_ids", config, 1, 5, model=GridReader())
    assert kwargs["target_sizes"].tolist() == [[4, 4]]  # 16 / 4 patches a side
    assert config.image_token_id == 49  # the vocabulary's last id; the text is zeros
    ids, kinds = kwargs["input_ids"], kwargs["mm_token_type_ids"]
    assert ids.shape == (1, 16 + 5) and (ids[0, :16] == 49).all() and not ids[0, 16:].any()
    assert kinds[0].tolist() == [1] * 16 + [0] * 5  # 1 image, 0 text


def test_sizes_in_pixels_are_not_read_as_a_patch_grid() -> None:
    config = Config(image_token_id=None, vocab_size=50,
                    vision_config=Config(image_size=16, patch_size=4))
    kwargs = config_inputs("input_ids", config, 1, 5, model=PixelSizes())
    assert shapes_of(kwargs) == {"input_ids": (1, 5), "pixel_values": (1, 3, 16, 16)}
    assert config.image_token_id is None  # no tokens placed: the config is left as it was


MINICPM_OCR = {  # image token id left to the tokenizer; the merger inserted after layer 0
    "model_type": "minicpm_ocr", "downsample_mode": "16x", "insert_layer_id": 0,
    "text_config": {"model_type": "qwen3_5_text", "hidden_size": 32, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
                    "intermediate_size": 64, "vocab_size": 64,
                    "layer_types": ["full_attention"]},
    "vision_config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                      "intermediate_size": 32, "image_size": 32, "patch_size": 8}}


@pytest.mark.parametrize(("mode", "merger"), [("16x", True), ("4x", False)])
def test_minicpm_ocr_runs_its_vision_tower(tmp_path: Path, mode: str, merger: bool) -> None:
    pytest.importorskip("transformers")
    data = {**MINICPM_OCR, "downsample_mode": mode}
    report = audit_target(_write(tmp_path, "minicpm", data), seq_len=8)
    inputs = report.to_dict()["model"]["inputs"]
    assert inputs["target_sizes"]["shape"] == [1, 2]
    # 32 / 8 = 4 × 4 patches; "16x" merges 2 × 2 twice (1 token), "4x" once (4 tokens)
    assert inputs["input_ids"]["shape"] == [1, (1 if merger else 4) + 8]
    heads = {(b["name"], b["num_heads"], b["head_dim"]) for b in report.to_dict()["blocks"]}
    assert ("vision_tower.encoder.layers.0.self_attn", 2, 8) in heads  # 16 / 2 heads
    assert ("language_model.layers.0.self_attn", 4, 8) in heads
    unreached = () if merger else ("vision_tower.vit_merger.self_attn",)
    assert report.coverage.untraced_attention == unreached
    assert ("vision_tower.vit_merger.self_attn", 2, 8) in heads if merger else len(heads) == 2


PIX2STRUCT_VISION = {  # flattened patches as the main input
    "model_type": "pix2struct_vision_model", "architectures": ["Pix2StructVisionModel"],
    "hidden_size": 32, "patch_embed_hidden_size": 48, "d_ff": 64, "d_kv": 8,
    "num_hidden_layers": 1, "num_attention_heads": 4}


def test_pix2struct_vision_reads_flattened_patches_as_its_main_input(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    report = audit_target(_write(tmp_path, "pix2struct", PIX2STRUCT_VISION), seq_len=8)
    data = report.to_dict()
    # the embedding reads row and column from columns 0 and 1, pixels from column 2 on
    # (patch_projection: patch_embed_hidden_size = 48 inputs)
    assert data["model"]["inputs"]["flattened_patches"]["shape"] == [1, 8, 2 + 48]
    assert [(b["num_heads"], b["head_dim"], b["seq_len_q"]) for b in data["blocks"]] == [
        (4, 8, 8)]  # 4 heads of d_kv 8 over the 8 patches


KOSMOS_2 = {  # image first (main input pixel_values); the text decoder reads the latents
    "model_type": "kosmos-2", "latent_query_num": 4,
    "text_config": {"embed_dim": 32, "layers": 1, "ffn_dim": 64, "attention_heads": 4,
                    "vocab_size": 64, "max_position_embeddings": 32},
    "vision_config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                      "intermediate_size": 32, "image_size": 16, "patch_size": 8}}


def test_an_image_first_model_gets_the_text_its_decoder_needs(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    report = audit_target(_write(tmp_path, "kosmos2", KOSMOS_2), seq_len=8).to_dict()
    inputs = report["model"]["inputs"]
    assert inputs["pixel_values"]["shape"] == [1, 3, 16, 16]
    assert inputs["input_ids"]["shape"] == [1, 4 + 8]  # latent_query_num, then the text
    assert inputs["image_embeds_position_mask"]["shape"] == [1, 4 + 8]
    assert _heads(report, "vision_model.") == [(2, 8)]  # 16 / 2 heads
    assert _heads(report, "image_to_text_projection.") == [(4, 8)]  # the text's 32 / 4
    assert _heads(report, "text_model.") == [(4, 8)]
