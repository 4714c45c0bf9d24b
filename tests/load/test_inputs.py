"""Example inputs for every modality, from a config.json or by name on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from mhaudit import audit, audit_target
from mhaudit.cli import main as cli
from mhaudit.load.inputs import config_inputs, named_input, with_shapes

pytest.importorskip("transformers")

# Tiny configs of each modality; the expected heads and head dims are read off them.
CONFIGS: dict[str, dict[str, Any]] = {
    "whisper": {  # audio features (B, mel bins, 2·max_source_positions) + decoder ids
        "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
        "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
        "vocab_size": 64, "num_mel_bins": 16, "max_source_positions": 24,
        "max_target_positions": 16, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
        "decoder_start_token_id": 1},
    "wav2vec2": {  # raw audio (B, samples)
        "model_type": "wav2vec2", "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 4, "intermediate_size": 64, "conv_dim": [16, 16],
        "conv_stride": [5, 2], "conv_kernel": [10, 3], "num_conv_pos_embeddings": 8,
        "num_conv_pos_embedding_groups": 2},
    "vit": {  # pixels at the config's image size
        "model_type": "vit", "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 4, "intermediate_size": 64, "image_size": 16, "patch_size": 8},
    "t5": {  # encoder-decoder text
        "model_type": "t5", "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1,
        "num_decoder_layers": 1, "num_heads": 4, "vocab_size": 64},
    "clip": {  # text and image together
        "model_type": "clip", "projection_dim": 16,
        "text_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                        "intermediate_size": 64, "vocab_size": 64,
                        "max_position_embeddings": 8},
        "vision_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                          "intermediate_size": 64, "image_size": 16, "patch_size": 8}},
}

EXPECTED_INPUTS = {
    # name -> {input: shape} at batch 1, seq_len 16
    "whisper": {"input_features": [1, 16, 48], "decoder_input_ids": [1, 16]},
    "wav2vec2": {"input_values": [1, 160]},  # 16 frames · (5·2) samples per frame
    "vit": {"pixel_values": [1, 3, 16, 16]},
    "t5": {"input_ids": [1, 16], "decoder_input_ids": [1, 16]},
    "clip": {"input_ids": [1, 8], "pixel_values": [1, 3, 16, 16]},  # text capped at 8
}


def _write(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def _heads(data: dict[str, Any]) -> set[tuple[int, int]]:
    """(heads, head_dim) of every attention layer the config declares."""
    if "text_config" in data:
        return {_heads(data["text_config"]).pop(), _heads(data["vision_config"]).pop()}
    heads = data.get("num_heads") or data.get("num_attention_heads") or data[
        "encoder_attention_heads"]
    width = data.get("d_model") or data["hidden_size"]
    return {(heads, data.get("d_kv") or width // heads)}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_of_every_modality_audits_with_inputs_from_its_sizes(
        tmp_path: Path, name: str) -> None:
    data = CONFIGS[name]
    report = audit_target(_write(tmp_path, name, data), seq_len=16).to_dict()
    shapes = {k: v["shape"] for k, v in report["model"]["inputs"].items()}
    assert shapes == EXPECTED_INPUTS[name]
    assert report["blocks"], name
    assert {(b["num_heads"], b["head_dim"]) for b in report["blocks"]} == _heads(data)


def test_named_shape_sets_a_config_input(tmp_path: Path) -> None:
    target = _write(tmp_path, "t5", CONFIGS["t5"])
    result = CliRunner().invoke(cli, ["report", target, "--format", "json",
                                      "--input-shape", "input_ids=2x12",
                                      "--input-shape", "decoder_input_ids=2x4"])
    assert result.exit_code == 0, result.output
    inputs = json.loads(result.stdout)["model"]["inputs"]
    assert inputs["input_ids"]["shape"] == [2, 12]
    assert inputs["decoder_input_ids"]["shape"] == [2, 4]


def test_unnamed_shape_sets_a_config_main_input(tmp_path: Path) -> None:
    target = _write(tmp_path, "vit", CONFIGS["vit"])
    result = CliRunner().invoke(cli, ["report", target, "--format", "json",
                                      "--input-shape", "2x3x16x16"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"]["inputs"]["pixel_values"]["shape"] == [2, 3, 16, 16]


MODEL_FILE = '''
import torch
from torch import nn


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x, key_padding_mask=None):
        return self.attn(x, x, x, key_padding_mask=key_padding_mask)[0]


def build_model():
    return Masked()
'''


def test_named_shapes_are_the_whole_call_of_a_model_file(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL_FILE)
    result = CliRunner().invoke(cli, ["report", str(path), "--format", "json",
                                      "--input-shape", "x=2x10x32"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"]["inputs"] == {"x": {"shape": [2, 10, 32], "dtype": "float32"}}
    assert report["blocks"][0]["seq_len_q"] == 10


@pytest.mark.parametrize(("flags", "message"), [
    (["--input-shape", "1x8", "--input-shape", "1x9"], "second unnamed shape"),
    (["--input-shape", "x=1x8", "--input-shape", "x=1x9"], "given twice"),
    (["--input-shape", "1-x=1x8"], "not an input name"),
    (["--input-shape", "x=1x0"], "positive sizes"),
    (["--input-shape", "x="], "empty item"),
])
def test_bad_input_shapes_are_usage_errors(tmp_path: Path, flags: list[str],
                                           message: str) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL_FILE)
    result = CliRunner().invoke(cli, ["report", str(path), *flags])
    assert result.exit_code == 2
    assert message in result.output


def test_library_takes_named_shapes_for_a_built_model() -> None:
    class Pair(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, query: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
            return self.attn(query, memory, memory)[0]

    report = audit(Pair(), input_shapes={"query": (1, 4, 16), "memory": (1, 9, 16)})
    (block,) = report.blocks
    assert (block.layout.kind, block.layout.seq_len_q, block.layout.seq_len_kv) == ("cross", 4, 9)


def test_named_input_kinds() -> None:
    assert named_input("attention_mask", (1, 3)).tolist() == [[1, 1, 1]]  # masks keep all
    assert named_input("decoder_input_ids", (1, 2)).dtype == torch.long
    assert named_input("input_features", (1, 2)).dtype == torch.float32
    assert set(with_shapes({"a": 1, "b": 2}, [("b", (1,))])) == {"a", "b"}


def test_unknown_main_input_names_the_fix() -> None:
    with pytest.raises(Exception, match="--input-shape NAME=AxB"):
        config_inputs("spectrogram", object(), 1, 8)


def test_decode_of_an_encoder_is_not_applicable(tmp_path: Path) -> None:
    target = _write(tmp_path, "vit", CONFIGS["vit"])
    table = CliRunner().invoke(cli, ["report", target, "--decode"])
    assert table.exit_code == 0, table.output
    assert "decode step: not applicable" in table.stdout and "tokens/s" not in table.stdout
    data = CliRunner().invoke(cli, ["report", target, "--decode", "--format", "json"])
    assert json.loads(data.stdout)["decode"]["applicable"] is False


SENTINELS: dict[str, dict[str, Any]] = {
    # XLNet's config class answers max_position_embeddings = -1 itself: no length limit
    "xlnet": {"model_type": "xlnet", "d_model": 32, "n_layer": 1, "n_head": 4,
              "d_inner": 64, "vocab_size": 64},
    # head_dim names the rotary part of latent attention, which is absent (0): no layer uses it
    "glm5_next_text": {"model_type": "glm5_next_text", "hidden_size": 32,
                       "num_hidden_layers": 1, "num_attention_heads": 4,
                       "num_key_value_heads": 4, "intermediate_size": 64, "vocab_size": 64,
                       "pad_token_id": 0, "head_dim": 0},
}


@pytest.mark.parametrize("name", sorted(SENTINELS))
def test_sentinel_sizes_the_model_accepts_are_not_refused(tmp_path: Path, name: str) -> None:
    from mhaudit.load.hfconfig import load_hf_config

    model, _, kwargs, _ = load_hf_config(Path(_write(tmp_path, name, SENTINELS[name])), 1, 8,
                                      device="meta")
    assert kwargs["input_ids"].shape == (1, 8)
    assert all(p.numel() for p in model.parameters())


def test_a_zero_width_the_model_uses_is_refused(tmp_path: Path) -> None:
    data = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64, "head_dim": 0}
    result = CliRunner().invoke(cli, ["report", _write(tmp_path, "llama", data)])
    assert result.exit_code == 3
    assert "head_dim = 0 is not a positive size" in result.output


LLAVA = {  # a text model with a vision tower: image tokens make the tower run
    "model_type": "llava", "image_token_index": 60,
    "text_config": {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64},
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32,
                      "num_hidden_layers": 1, "num_attention_heads": 4,
                      "intermediate_size": 64, "image_size": 16, "patch_size": 8,
                      "projection_dim": 32}}


def test_image_tokens_in_the_text_make_the_vision_tower_run(tmp_path: Path) -> None:
    report = audit_target(_write(tmp_path, "llava", LLAVA), seq_len=8).to_dict()
    # 16 / 8 = 2 × 2 patches; llava drops the CLS row: 4 image tokens before 8 text tokens
    assert report["model"]["inputs"]["input_ids"]["shape"] == [1, 12]
    names = [b["name"] for b in report["blocks"]]
    assert names == ["vision_tower.encoder.layers.0.self_attn",
                     "language_model.layers.0.self_attn"]
    assert report["blocks"][1]["seq_len_q"] == 12


def test_audio_width_in_a_nested_encoder_config(tmp_path: Path) -> None:
    from mhaudit.load.hfconfig import load_hf_config

    data = {"model_type": "parakeet_ctc", "vocab_size": 64,
            "encoder_config": {"hidden_size": 32, "num_hidden_layers": 1,
                               "num_attention_heads": 4, "intermediate_size": 64,
                               "num_mel_bins": 80, "subsampling_conv_channels": 8,
                               "subsampling_factor": 8}}
    _, _, kwargs, _ = load_hf_config(Path(_write(tmp_path, "parakeet", data)), 1, 16,
                                  device="meta")
    assert kwargs["input_features"].shape == (1, 16 * 8, 80)  # (B, frames, mel bins)
