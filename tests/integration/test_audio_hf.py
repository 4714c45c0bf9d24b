"""Audio towers of transformers models reached from a config: tiny configs on meta, and
the audio tokens, features and attention lengths the configs imply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mhaudit import audit_target

pytest.importorskip("transformers")

LAYER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
         "num_attention_heads": 4}
TEXT = {"vocab_size": 64, "num_key_value_heads": 2, "head_dim": 8, **LAYER}
WHISPER_STYLE = {"num_mel_bins": 16, "max_source_positions": 8, **LAYER}
"""16 mel bins, 2 · 8 = 16 frames, a stride-2 convolution: 8 encoder positions."""

CASES: dict[str, tuple[dict[str, Any], dict[str, list[int]], dict[str, int]]] = {
    # no feature method: the tower's rows count the tokens. 8 positions, average-pooled
    # by 2: 4 audio tokens before 8 text tokens; the forward needs feature_attention_mask
    "qwen2_audio": (
        {"model_type": "qwen2_audio", "audio_token_index": 60,
         "audio_config": {"model_type": "qwen2_audio_encoder", "num_mel_bins": 16,
                          "encoder_layers": 1, "encoder_attention_heads": 4,
                          "encoder_ffn_dim": 64, "d_model": 32, "max_source_positions": 8},
         "text_config": {"model_type": "qwen2", **TEXT}},
        {"input_ids": [1, 4 + 8], "input_features": [1, 16, 16],
         "feature_attention_mask": [1, 16]},
        {"audio_tower.layers.0.self_attn": 8, "language_model.layers.0.self_attn": 12}),
    # frames fill whole chunks of 2 · n_window = 100 (the default n_window of 50), as
    # (B, mels, frames); three stride-2 convolutions: 100 -> 50 -> 25 -> 13 positions
    # (the source's own count: 13 per full chunk), one audio token per position
    "qwen3_asr": (
        {"model_type": "qwen3_asr", "audio_token_id": 60,
         "audio_config": {"model_type": "qwen3_asr_encoder", "num_mel_bins": 16,
                          "encoder_layers": 1, "encoder_attention_heads": 4,
                          "encoder_ffn_dim": 64, "d_model": 32, "output_dim": 32,
                          "downsample_hidden_size": 8},
         "text_config": {"model_type": "qwen3", **TEXT}},
        {"input_ids": [1, 13 + 8], "input_features": [1, 16, 100],
         "input_features_mask": [1, 100]},
        {"audio_tower.layers.0.self_attn": 13, "language_model.layers.0.self_attn": 21}),
    # the feature method requires padding_mask (its docstring: (batch, max_audio_length));
    # 8 positions merged by audio_merge_size 4: 2 audio tokens
    "moss_transcribe_diarize": (
        {"model_type": "moss_transcribe_diarize", "audio_token_id": 60,
         "audio_config": {"model_type": "moss_transcribe_diarize_audio", **WHISPER_STYLE},
         "text_config": {"model_type": "qwen3", **TEXT}},
        {"input_ids": [1, 2 + 8], "input_features": [1, 16, 16],
         "input_features_mask": [1, 16], "padding_mask": [1, 8]},
        {"audio_tower.layers.0.self_attn": 8, "language_model.layers.0.self_attn": 10}),
    # the feature method reads the placeholders to time its rows: the tower counts them
    # (8 positions, average-pooled by 2: 4) and the method confirms with them in place
    "musicflamingo": (
        {"model_type": "musicflamingo", "audio_token_id": 60, "audio_bos_token_id": 61,
         "audio_eos_token_id": 62,
         "audio_config": {"model_type": "audioflamingo3_encoder", **WHISPER_STYLE},
         "text_config": {"model_type": "qwen2", **TEXT}},
        {"input_ids": [1, 4 + 8], "input_features": [1, 16, 16],
         "input_features_mask": [1, 16]},
        {"audio_tower.layers.0.self_attn": 8, "language_model.layers.0.self_attn": 12}),
    # raw audio as (B, 1, samples): 8 · 320 (the product of the conv strides) = 2,560
    # samples; the convolutions (kernel 10 stride 5, five of 3 / 2, two of 2 / 2) leave
    # 511, 255, 127, 63, 31, 15, 7 frames: 7 audio tokens
    "omniasr": (
        {"model_type": "omniasr", "audio_token_id": 60,
         "audio_config": {"model_type": "omniasr_audio", **LAYER},
         "text_config": {"model_type": "llama", **TEXT}},
        {"input_ids": [1, 7 + 8], "input_values": [1, 1, 2560]},
        {"audio_tower.layers.0.attention": 7, "language_model.layers.0.self_attn": 15}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_audio_tower_runs_on_the_inputs_its_config_implies(tmp_path: Path,
                                                                name: str) -> None:
    data, inputs, lengths = CASES[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    report = audit_target(str(path), seq_len=8).to_dict()
    assert {k: v["shape"] for k, v in report["model"]["inputs"].items()} == inputs
    assert {b["name"]: b["seq_len_q"] for b in report["blocks"]} == lengths
    for block in report["blocks"]:  # 4 heads of 32 / 4 = 8 in both towers
        assert (block["num_heads"], block["head_dim"]) == (4, 8)
    assert not [m for m in report["coverage"]["untraced_modules"] if "audio_tower" in m]


ENCODERS: dict[str, tuple[dict[str, Any], dict[str, list[int]], int]] = {
    # the encoder alone: chunks of 2 · n_window = 100 frames, with the mask its forward
    # requires; 13 positions per chunk
    "qwen3_asr_encoder": (
        {"model_type": "qwen3_asr_encoder", "num_mel_bins": 16, "encoder_layers": 1,
         "encoder_attention_heads": 4, "encoder_ffn_dim": 64, "d_model": 32,
         "output_dim": 32, "downsample_hidden_size": 8},
        {"input_features": [1, 16, 100], "input_features_mask": [1, 100]}, 13),
    # raw audio with the channel axis its convolutions expect: 7 frames of 2,560 samples
    "omniasr_audio": ({"model_type": "omniasr_audio", **LAYER},
                      {"input_values": [1, 1, 2560]}, 7),
    # an optional mask the encoder needs all the same (it sums it for the lengths)
    "audioflamingo3_encoder": ({"model_type": "audioflamingo3_encoder", **WHISPER_STYLE},
                               {"input_features": [1, 16, 16],
                                "input_features_mask": [1, 16]}, 8),
}


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_an_audio_encoder_gets_the_input_its_forward_accepts(tmp_path: Path,
                                                             name: str) -> None:
    data, inputs, positions = ENCODERS[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    report = audit_target(str(path), seq_len=8).to_dict()
    assert {k: v["shape"] for k, v in report["model"]["inputs"].items()} == inputs
    assert [b["seq_len_q"] for b in report["blocks"]] == [positions]


def test_raw_audio_follows_the_front_ends_strides(tmp_path: Path) -> None:
    # Moonshine's config names no strides; its convolutions (kernel 127 stride 64, 7 / 3,
    # 3 / 2) take 64 · 3 · 2 = 384 samples per position: 8 · 384 = 3,072 samples, and
    # (3072 - 127) / 64 + 1 = 47, (47 - 7) / 3 + 1 = 14, (14 - 3) / 2 + 1 = 6 positions
    data = {"model_type": "moonshine", "vocab_size": 64, "hidden_size": 32,
            "intermediate_size": 64, "encoder_num_hidden_layers": 1,
            "decoder_num_hidden_layers": 1, "encoder_num_attention_heads": 4,
            "decoder_num_attention_heads": 4, "encoder_num_key_value_heads": 4,
            "decoder_num_key_value_heads": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    report = audit_target(str(path), seq_len=8).to_dict()
    assert report["model"]["inputs"]["input_values"]["shape"] == [1, 3072]
    assert {b["name"]: (b["seq_len_q"], b["seq_len_kv"]) for b in report["blocks"]} == {
        "encoder.layers.0.self_attn": (6, 6), "decoder.layers.0.self_attn": (8, 8),
        "decoder.layers.0.encoder_attn": (8, 6)}


def test_an_unset_audio_token_gets_a_free_id_and_the_tower_runs(tmp_path: Path) -> None:
    # Voxtral's config class leaves audio_token_id unset: a free id of the vocabulary
    # carries the audio; 8 encoder positions, two of them per projector row (Voxtral's
    # projector reads rows of intermediate_size = 2 · hidden_size): 4 audio tokens
    data = {"model_type": "voxtral",
            "audio_config": {"model_type": "voxtral_encoder", **WHISPER_STYLE},
            "text_config": {"model_type": "llama", **TEXT}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    report = audit_target(str(path), seq_len=8).to_dict()
    assert {b["name"]: b["seq_len_q"] for b in report["blocks"]} == {
        "audio_tower.layers.0.self_attn": 8, "language_model.layers.0.self_attn": 12}
    assert "untraced_towers" not in report["coverage"]


def test_a_tower_whose_rows_cannot_fill_the_text_is_named_as_untraced(tmp_path: Path) -> None:
    # a projector to 48 features cannot fill 32-wide text embeddings (Qwen3-ASR's own
    # defaults project to 3,584 for a text width of 2,048): no audio tokens are placed,
    # the text runs alone, and the report names the audio tower and its projector
    data = json.loads(json.dumps(CASES["qwen3_asr"][0]))
    data["audio_config"]["output_dim"] = 48
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    report = audit_target(str(path), seq_len=8).to_dict()
    assert [b["name"] for b in report["blocks"]] == ["language_model.layers.0.self_attn"]
    assert report["coverage"]["untraced_towers"] == ["audio_tower", "multi_modal_projector"]
    assert report["coverage"]["untraced_attention"] == ["audio_tower.layers.0.self_attn"]
