"""Packed vision towers: every image's patches concatenated beside a (num_images, 3) grid."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from mhaudit.load.inputs import config_inputs
from mhaudit.load.vision import PACKED_SIDE


class PackedTower(nn.Module):
    """Reads ``(patches, C·t·p²)`` and a grid of (t, h, w) per image, as NaViT-packed
    towers do: the patch embedding views each row back into a (C, t, p, p) patch."""

    def __init__(self, channels: int, frames: int, side: int) -> None:
        super().__init__()
        self.shape = (channels, frames, side, side)
        self.embed = nn.Conv3d(channels, 8, (frames, side, side), stride=(frames, side, side))

    def forward(self, hidden_states: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        """
        Args:
            hidden_states (`torch.Tensor` of shape `(seq_len, hidden_size)`):
                The patches.
            grid_thw (`torch.Tensor` of shape `(num_images_or_videos, 3)`):
                The temporal, height and width of feature shape of each image.
        """
        patches = self.embed(hidden_states.view(-1, *self.shape)).flatten(1)  # (patches, 8)
        assert int(grid_thw.prod(-1).sum()) == patches.shape[0]
        return patches


@pytest.mark.parametrize(("merge", "names"), [
    (1, ("temporal_patch_size", "spatial_merge_size")),
    (2, ("temporal_patch_size", "spatial_merge_size")),
    (3, ("temporal_patch_size", "spatial_merge_size")),
    (2, ("patch_temporal", "merge_size")),  # the other names configs use
])
def test_a_packed_tower_gets_patches_and_their_grid(merge: int, names: tuple[str, str]
                                                    ) -> None:
    config = SimpleNamespace(patch_size=2, in_channels=3, **{names[0]: 2, names[1]: merge})
    model = PackedTower(3, 2, 2)
    made = config_inputs("hidden_states", config, 2, 16, model=model)
    rows = merge * -(-PACKED_SIDE // merge)  # merge 1, 2: 4 patches a side; 3: 6
    # two images (the batch) of rows² patches, each 3 channels · 2 frames · 2² pixels
    assert tuple(made["hidden_states"].shape) == (2 * rows * rows, 3 * 2 * 2 * 2)
    assert made["grid_thw"].tolist() == [[1, rows, rows]] * 2
    assert made["grid_thw"].device.type == "cpu"  # values the forward reads
    assert model(**made).shape == (2 * rows * rows, 8)


def test_a_grid_the_user_shapes_is_left_to_the_user() -> None:
    config = SimpleNamespace(patch_size=2, temporal_patch_size=1, in_channels=3)
    made = config_inputs("hidden_states", config, 1, 16, model=PackedTower(3, 1, 2),
                         shapes=(("hidden_states", (4, 12)), ("grid_thw", (1, 3))))
    assert tuple(made["hidden_states"].shape) == (4, 12)


def test_qwen2_5_vl_vision_tower_audits_from_its_config(tmp_path: Path) -> None:
    tf = pytest.importorskip("transformers")
    from mhaudit import audit_target

    config = tf.Qwen2_5_VLVisionConfig(depth=2, hidden_size=64, num_heads=4,
                                       intermediate_size=128, out_hidden_size=64,
                                       patch_size=14, temporal_patch_size=2,
                                       spatial_merge_size=2, fullatt_block_indexes=[1])
    config.save_pretrained(tmp_path)
    report = audit_target(str(tmp_path / "config.json"))
    # 4×4 patches per image, each 3 channels · 2 frames · 14² pixels = 1176 wide
    assert report.model.inputs["hidden_states"]["shape"] == [16, 3 * 2 * 14 * 14]
    assert report.model.inputs["grid_thw"]["shape"] == [1, 3]
    # every layer: 4 heads of 64 / 4 = 16 over the width 64, fused qkv
    assert [(b.layout.num_heads, b.layout.head_dim, b.layout.d_model)
            for b in report.blocks] == [(4, 16, 64)] * 2


class MergedTower(PackedTower):
    """A packed tower that also reads each image's merge ratio, as VideoLLaMA3's does."""

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor,  # type: ignore[override]
                merge_sizes: torch.Tensor) -> torch.Tensor:
        """
        Args:
            pixel_values (`torch.Tensor` of shape `(seq_len, hidden_size)`):
                The patches.
            grid_thw (`torch.LongTensor` of shape `(num_images_or_videos, 3)`):
                The temporal, height and width dimensions of each image.
            merge_sizes (`torch.Tensor` of shape `(num_images_or_videos,)`):
                The spatial downsampling ratio of each image or video feature.
        """
        assert bool((grid_thw[:, 1] % merge_sizes == 0).all())
        return super().forward(pixel_values, grid_thw)


def test_a_merge_ratio_beside_the_grid_is_the_configs() -> None:
    config = SimpleNamespace(patch_size=2, temporal_patch_size=1, num_channels=3,
                             spatial_merge_size=2)
    model = MergedTower(3, 1, 2)
    made = config_inputs("pixel_values", config, 3, 16, model=model)
    # one merge ratio per image (3 images, the batch), the config's spatial_merge_size
    assert made["merge_sizes"].tolist() == [2, 2, 2]
    assert made["grid_thw"].tolist() == [[1, 4, 4]] * 3
    assert model(**made).shape == (3 * 16, 8)


def test_a_qwen2_vl_config_gets_packed_pixels_their_grid_and_its_tokens(tmp_path: Path
                                                                          ) -> None:
    tf = pytest.importorskip("transformers")
    from mhaudit import audit_target

    vision = {"depth": 2, "embed_dim": 64, "num_heads": 4, "hidden_size": 64, "mlp_ratio": 2,
              "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
    text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
    config = tf.Qwen2VLConfig(vision_config=vision, text_config=text, image_token_id=990,
                              video_token_id=991, vision_start_token_id=992,
                              vision_end_token_id=993)
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    config.save_pretrained(tmp_path)
    report = audit_target(str(tmp_path / "config.json"))
    inputs = report.model.inputs
    # one image of 4×4 patches (4 is a multiple of the merge 2), each 3 channels · 2 frames
    # · 14² pixels = 1176 wide, and its grid (t, h, w) = (1, 4, 4) in patches
    assert inputs["pixel_values"]["shape"] == [16, 3 * 2 * 14 * 14]
    assert inputs["image_grid_thw"]["shape"] == [1, 3]
    # the merger folds 2×2 patches into one token: 16 / 4 = 4 image tokens, and as many
    # for the video tower's clip, before the 128 text tokens
    assert inputs["input_ids"]["shape"] == [1, 128 + 4 + 4]
    text_blocks = [b for b in report.blocks if "language_model" in b.name]
    assert [b.layout.seq_len_q for b in text_blocks] == [136, 136]
    assert {b.name.split(".")[1] for b in report.blocks} == {"visual", "language_model"}


class FlatRows(nn.Module):
    """A packed tower documented as reading images ``(B, C, H, W)`` whose patch embedding
    is a linear layer over flat ``C · p · p`` rows."""

    main_input_name = "pixel_values"

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3 * 2 * 2, 8)

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        """
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, image_size, image_size)`):
                The patches.
            grid_thw (`torch.LongTensor` of shape `(num_images_or_videos, 3)`):
                The temporal, height and width of feature shape of each image.
        """  # noqa: E501
        return self.embed(pixel_values)  # (patches, 8)


def test_packed_patches_become_flat_rows_where_the_tower_reads_them_so() -> None:
    config = SimpleNamespace(patch_size=2, num_channels=3)
    with torch.device("meta"):
        made = config_inputs("pixel_values", config, 1, 16, model=FlatRows())
    # one image of 4 × 4 patches, each 3 channels · 2 · 2 pixels in one row
    assert tuple(made["pixel_values"].shape) == (PACKED_SIDE * PACKED_SIDE, 3 * 2 * 2)
    assert made["grid_thw"].tolist() == [[1, PACKED_SIDE, PACKED_SIDE]]
