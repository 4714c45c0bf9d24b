"""The zoo's oracle reads no mhaudit answer: its own inputs, its own role attribution.

The reference forward runs on inputs made by transformers' conventions (the model's
``main_input_name`` and required forward arguments, at the config's sizes), never by
mhaudit's loader; a model those inputs run that mhaudit cannot audit is mhaudit's failure,
not a skip. Tiny configs set an explicit head dim unequal to width / heads, and each
block's W_Q, W_K, W_V, W_O is compared with its module's own layers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import torch
from torch import nn
from zoo_harness.inputs import Spec, conventional_inputs, make, model_file
from zoo_harness.roles import Roles, role_problems, roles
from zoo_harness.tiny import FREE_HEAD_DIM, HEADS, WIDTH, tiny_config
from zoo_harness.worker import Reference, Runs, classify, preload, run_one

D = 32


def test_roles_come_from_the_layers_own_names() -> None:
    mha = nn.MultiheadAttention(D, 4)
    # in_proj: 3·D·D + 3·D = 3,168; out_proj: D·D + D = 1,056.
    assert roles(mha) == Roles({"qkv": 3168, "o": 1056})

    class Separate(nn.Module):  # BERT-style: self.{query,key,value}, output.{dense,norm}
        def __init__(self) -> None:
            super().__init__()
            self.self = nn.ModuleDict({n: nn.Linear(D, D) for n in ("query", "key", "value")})
            self.output = nn.ModuleDict({"dense": nn.Linear(D, D), "LayerNorm": nn.LayerNorm(D)})

    # each D·D + D = 1,056; the norm holds no role.
    assert roles(Separate()) == Roles({"q": 1056, "k": 1056, "v": 1056, "o": 1056})

    class Sinks(nn.Module):  # a parameter no role names: not checked role by role
        def __init__(self) -> None:
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(D, D), nn.Linear(D, D)
            self.v_proj, self.o_proj = nn.Linear(D, D), nn.Linear(D, D)
            self.sinks = nn.Parameter(torch.zeros(4))

    assert roles(Sinks()) is None


def test_kv_heads_come_from_the_modules_own_layers_where_it_declares_none() -> None:
    from zoo_harness.expect import Declared
    from zoo_harness.roles import kv_from_layers

    class Fused(nn.Module):  # 4 heads of 8, fused QKV over 2 KV heads: (4 + 2·2)·8 = 64 rows
        def __init__(self) -> None:
            super().__init__()
            self.qkv_proj, self.out_proj = nn.Linear(D, 64), nn.Linear(D, D)

    own = Declared(heads=4, head_dim=8)
    assert kv_from_layers(Fused(), own) == 2
    assert kv_from_layers(Fused(), Declared(heads=4, head_dim=8, kv_heads=4)) is None
    assert kv_from_layers(nn.MultiheadAttention(D, 4), Declared(heads=4, head_dim=8)) is None


def test_role_problems_compare_fused_layers_with_the_roles_they_join() -> None:
    fused = Roles({"qkv": 3168, "o": 1056})
    assert role_problems({"q": 1056, "k": 1056, "v": 1056, "o": 1056}, fused) == []
    # O's bias counted with V: the joined q+k+v is 32 short of the layer's 3,168.
    assert role_problems({"q": 1056, "k": 1056, "v": 1024, "o": 1088}, fused) == \
        ["o 1088 (module 1056)", "q+k+v 3136 (module 3168)"]
    separate = Roles({"q": 1056, "kv": 2112, "o": 1056})
    assert role_problems({"q": 1056, "k": 1056, "v": 1056, "o": 1056}, separate) == []


def test_conventional_inputs_follow_the_main_input_and_the_required_arguments() -> None:
    from transformers import (
        BertConfig,
        BertModel,
        CLIPConfig,
        CLIPModel,
        ViTConfig,
        ViTModel,
        WhisperConfig,
        WhisperModel,
    )

    small = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
             "intermediate_size": 64}
    with torch.device("meta"):
        bert = BertModel(BertConfig(vocab_size=100, **small))
        vit = ViTModel(ViTConfig(image_size=32, patch_size=8, num_channels=3, **small))
        clip = CLIPModel(CLIPConfig(text_config={"vocab_size": 100, "pad_token_id": 0,
                                                 "bos_token_id": 1, "eos_token_id": 2, **small},
                                    vision_config={"image_size": 32, "patch_size": 8, **small}))
        whisper = WhisperModel(WhisperConfig(
            d_model=32, num_mel_bins=20, max_source_positions=8, vocab_size=100,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=1,
            decoder_layers=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            decoder_start_token_id=1))
    assert conventional_inputs(bert)[0] == {"input_ids": Spec((1, 16), 100)}
    assert conventional_inputs(vit)[0] == {"pixel_values": Spec((1, 3, 32, 32))}
    # two towers: the text alone first, then the text with its pixels.
    assert [sorted(s) for s in conventional_inputs(clip)] == \
        [["input_ids"], ["input_ids", "pixel_values"]]
    # Whisper's feature extractor: (B, mel bins, 2 · encoder positions); decoder ids too.
    assert conventional_inputs(whisper)[0] == {"input_features": Spec((1, 20, 16)),
                                               "decoder_input_ids": Spec((1, 16), 100)}


def test_the_model_file_draws_the_references_tensors(tmp_path: Path) -> None:
    specs = {"input_ids": Spec((1, 16), 100), "pixel_values": Spec((1, 3, 8, 8)),
             "grid_thw": Spec((1, 3), values=(1, 4, 4))}
    (tmp_path / "model.py").write_text(model_file(specs))
    namespace: dict[str, Any] = {"__file__": str(tmp_path / "model.py")}
    exec(compile((tmp_path / "model.py").read_text(), "model.py", "exec"), namespace)
    got, want = namespace["example_inputs"](), make(specs)
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert want["grid_thw"].tolist() == [[1, 4, 4]]  # a fixed grid, not a draw


def test_tiny_configs_declare_a_head_dim_unequal_to_width_over_heads() -> None:
    free = tiny_config("llama", free_head_dim=True)
    assert (free["hidden_size"], free["num_attention_heads"], free["head_dim"]) == \
        (WIDTH, HEADS, FREE_HEAD_DIM)
    assert FREE_HEAD_DIM != WIDTH // HEADS
    assert tiny_config("llama")["head_dim"] == WIDTH // HEADS


def _runs(code: int, conventional: int = 0) -> Runs:
    report = {"blocks": [], "model": {"params_total": 0}, "totals": {}}
    return Runs(code, report if code in (0, 1) else None, "mhaudit: error: inputs",
                conventional, report if conventional in (0, 1) else None, "")


def test_a_failure_of_mhaudits_own_inputs_is_a_failure_and_skips_depend_on_the_reference(
) -> None:
    ran = Reference(params=0, flops=0, inputs={"input_ids": Spec((1, 16), 100)})
    assert classify("m", _runs(3), ran).status == "exit 3"  # its own inputs failed
    assert classify("m", _runs(0, 3), ran).status == "exit 3"  # the conventional ones did
    assert classify("m", _runs(0), ran).status == "exact"
    no_forward = Reference(forward_error="ValueError: needs pixels")
    assert classify("m", _runs(0), no_forward).status == "skipped"
    assert classify("m", _runs(3), no_forward).status == "skipped"
    assert classify("m", _runs(4), no_forward).status == "exit 4"


def test_a_grouped_query_model_with_a_free_head_dim_is_exact() -> None:
    preload()
    result = run_one("qwen2")
    # qwen2's tiny config: 4 heads of 24 over a width of 64, 2 KV heads; every block's
    # roles checked against q_proj, k_proj, v_proj, o_proj.
    assert result.status == "exact", result.reason
    assert "note" not in result.checks
    assert result.checks["blocks_role_checked"] == result.checks["blocks"] == 2
