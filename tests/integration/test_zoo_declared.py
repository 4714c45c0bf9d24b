"""What the zoo harness takes from an attention module's own attributes.

A module may build its attention with heads the config does not name (Grounding DINO's
text enhancer and bi-attention run ``encoder_attention_heads // 2`` heads); its own head
dim attribute says so, and every block mhaudit reports for the module (``NAME``,
``NAME#2`` for its second attention) is checked against it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from zoo_harness.expect import Declared, declared, module_name
from zoo_harness.sweep import run_all
from zoo_harness.worker import Reference, compare, preload, run_one


def _block(name: str, heads: int, head_dim: int) -> dict[str, object]:
    return {"name": name, "num_heads": heads, "num_kv_heads": heads, "head_dim": head_dim,
            "d_model": 64}


def test_attention_head_size_is_a_declared_head_dim() -> None:
    from torch import nn

    class HalfHeads(nn.Module):  # BERT-style, built with 4 // 2 heads over d_model 64
        def __init__(self) -> None:
            super().__init__()
            self.attention_head_size = 64 // 2
            self.query = nn.Linear(64, 64)

    assert declared(HalfHeads()).head_dim == 32
    assert declared(nn.Linear(64, 64)) == Declared()


def test_every_block_of_a_module_is_checked_against_what_it_declares() -> None:
    from transformers import PretrainedConfig

    assert module_name("encoder.attn#2") == "encoder.attn"
    assert module_name("encoder.attn") == "encoder.attn"
    # The config: 4 heads of 64 / 4 = 16; the module declares 2 heads of 32.
    ref = Reference(params=0, config=PretrainedConfig(d_model=64, encoder_attention_heads=4),
                    attention=["attn"], declared={"attn": Declared(heads=2, head_dim=32)})
    report = {"blocks": [_block("attn", 2, 32), _block("attn#2", 2, 32)],
              "model": {"params_total": 0}}
    assert compare(report, ref)[0] == []
    wrong = {**report, "blocks": [_block("attn", 2, 32), _block("attn#2", 4, 8)]}
    assert compare(wrong, ref)[0] == [
        "layout 'attn#2': config: heads 4 (declared [2]); config: kv heads 4 (declared 2); "
        "config: head dim 8 (declared [32])"]
    undeclared = Reference(params=0, config=ref.config, attention=["attn"])
    assert len(compare(report, undeclared)[0]) == 2  # without the module's word, 2 ≠ 4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grounding-dino", "mm-grounding-dino"])
def test_grounding_dino_half_head_attentions_are_exact(name: str) -> None:
    # modeling_grounding_dino.py: GroundingDinoTextEnhancerLayer's self_attn and
    # GroundingDinoBiMultiHeadAttention (both directions) run encoder_attention_heads // 2
    # heads: tiny config 4 // 2 = 2 heads, of d_model 64 / 2 = 32 (text enhancer) and of
    # encoder_ffn_dim 128 // 2 / 2 = 32 (bi-attention); the decoder runs the config's 4 of 16.
    preload()
    (result,) = run_all([name], run_one, jobs=1, timeout_s=240)
    assert result.status == "exact", f"{result.status}: {result.reason}"
    assert result.checks["blocks"] >= 16
