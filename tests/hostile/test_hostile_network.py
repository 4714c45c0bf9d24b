"""The hub is never contacted: a local endpoint stands in for it and must see no request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_helpers import (
    assert_one_error,
    fake_hub,
    model_file,
    run_process,
    subprocess_env,
)

pytestmark = pytest.mark.slow

DETR = {
    "model_type": "detr", "architectures": ["DetrForObjectDetection"], "backbone": "org/name",
    "use_timm_backbone": False, "use_pretrained_backbone": True, "d_model": 32,
    "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "num_queries": 4, "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
}
"""A DETR config naming its backbone by hub repository: transformers would fetch it."""


def test_a_backbone_named_by_repository_is_refused_offline(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(DETR), encoding="utf-8")
    with fake_hub() as (url, requests):
        run = run_process("report", config, env=subprocess_env(HF_ENDPOINT=url), timeout=180)
    assert_one_error(run, 3, "org/name", "backbone_config")
    assert requests == []


def test_a_model_file_calling_from_pretrained_stays_offline(tmp_path: Path) -> None:
    model = model_file(tmp_path, "def build_model():\n"
                       "    from transformers import AutoConfig\n"
                       "    AutoConfig.from_pretrained('org/some-model')\n"
                       "    return Attention()\n")
    with fake_hub() as (url, requests):
        run = run_process("report", model, env=subprocess_env(HF_ENDPOINT=url), timeout=180)
    assert_one_error(run, 3, "build_model()")
    assert requests == []
