"""Attention layers the forward never ran are named in the report's coverage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mhaudit import audit, audit_target
from tests.fixtures.unreached import D, SkippedDecoder


def test_a_skipped_cross_attention_is_named_and_a_skipped_mlp_is_not() -> None:
    report = audit(SkippedDecoder(), (torch.zeros(1, 8, D),))
    assert [b.name for b in report.blocks] == ["encoder"]
    # decoder.cross holds 4 untraced projections 32 -> 32 (q, k, v, o); the MLP's two
    # read 32 and 64 features and write 64 and 32: no three of one width
    assert report.coverage.untraced_attention == ("decoder.cross",)
    assert "decoder.mlp.0" in report.coverage.untraced_modules
    assert report.to_dict()["coverage"]["untraced_attention"] == ["decoder.cross"]


BLIP = {  # BlipModel's forward runs the text encoder without image states: no cross-attention
    "model_type": "blip",
    "text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "intermediate_size": 64, "vocab_size": 64, "encoder_hidden_size": 16},
    "vision_config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                      "intermediate_size": 32, "image_size": 16, "patch_size": 8}}


def test_blips_text_cross_attention_is_named_as_never_run(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / "blip.json"
    path.write_text(json.dumps(BLIP))
    report = audit_target(str(path), seq_len=8)
    # 1 vision layer and 2 text self-attention layers ran; the 2 text layers' cross-attention
    # never did: query reads 32 features, key and value the 16-wide image states, all
    # three write 32
    assert len(report.blocks) == 1 + 2
    assert report.coverage.untraced_attention == tuple(
        f"text_model.encoder.layer.{i}.crossattention.self" for i in range(2))
