"""A forward that needs an input left out: one line naming it and the fix; from a config,
the loader makes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from mhaudit.cli import main as cli
from mhaudit.errors import TraceError
from mhaudit.trace import trace

tf = pytest.importorskip("transformers")

TEXT = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64}
VISION = {"model_type": "clip_vision_model", "hidden_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 4, "intermediate_size": 64, "image_size": 16,
          "patch_size": 8, "projection_dim": 32}


def _llava_next() -> Any:
    """LLaVA-NeXT tiles each image by its size (``image_sizes``, from the image processor):
    the loader gives one (height, width) row per image, the pixels' own."""
    return tf.LlavaNextConfig(text_config=TEXT, vision_config=VISION, image_token_index=60,
                              image_grid_pinpoints=[[16, 16]])


@pytest.mark.slow
def test_a_config_whose_forward_needs_image_sizes_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_llava_next().to_dict()), encoding="utf-8")
    result = CliRunner().invoke(cli, ["report", str(path), "-n", "16", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    # one 16×16 image of 8×8 patches: 2 tiles (base and the one 16×16 grid tile), and as
    # the next test counts, 4 + 4 + 2 = 10 image tokens before the 16 of text
    assert report["model"]["inputs"] == {
        "input_ids": {"shape": [1, 10 + 16], "dtype": "int64"},
        "pixel_values": {"shape": [1, 2, 3, 16, 16], "dtype": "float32"},
        "image_sizes": {"shape": [1, 2], "dtype": "int64"}}
    assert "inputs_left_out" not in report["coverage"]
    assert {b["name"] for b in report["blocks"]} == {
        "vision_tower.encoder.layers.0.self_attn", "language_model.layers.0.self_attn"}


def test_the_same_model_traces_once_the_input_is_given() -> None:
    model = tf.LlavaNextModel(_llava_next()).eval()
    # Image tokens of one 16×16 image, 8×8 patches: the base tile has 2·2 = 4 (the CLS row
    # dropped), the one 16×16 grid tile 4 more, and 1 newline per row of the 2-row grid:
    # 4 + 4 + 2 = 10; 2 tiles (base and grid) of pixels.
    ids = torch.zeros(1, 16, dtype=torch.long)
    ids[0, :10] = 60
    kwargs = {"input_ids": ids, "pixel_values": torch.zeros(1, 2, 3, 16, 16)}
    with pytest.raises(TraceError) as info:
        trace(model, (), kwargs)
    assert "forward() needs image_sizes," in str(info.value)
    kwargs["image_sizes"] = torch.tensor([[16, 16]])
    assert trace(model, (), kwargs).graph is not None


class _Sized(nn.Module):
    """A forward that walks an optional list: left out, it iterates over None."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, sizes: list[int] | None = None,
                scale: float | None = None) -> torch.Tensor:
        total = sum(s for s in sizes)  # type: ignore[union-attr]
        return self.proj(x) * total


def test_the_parameter_read_where_it_raised_is_named_not_another_none() -> None:
    with pytest.raises(TraceError) as info:
        trace(_Sized(), (torch.zeros(2, 4),), {})
    assert "forward() needs sizes," in str(info.value)  # scale is None too, but unread


def test_an_error_on_a_given_input_names_none() -> None:
    with pytest.raises(TraceError) as info:
        trace(_Sized(), (torch.zeros(2, 4),), {"sizes": 3})
    assert "forward() needs" not in str(info.value)
    assert "got furthest and raised TypeError" in str(info.value)
