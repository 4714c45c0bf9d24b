"""The decode step against context: the same formulas at five cache lengths, up to the model's."""

from __future__ import annotations

import json
from pathlib import Path

from mhaudit import audit_target
from mhaudit.phases.decode_context import contexts, longest_context

ROOT = Path(__file__).resolve().parents[2]


def test_contexts_run_a_factor_of_four_apart_to_the_longest() -> None:
    assert contexts(128, 131072) == [128, 512, 2048, 8192, 32768, 131072]
    assert contexts(2048, 131072) == [512, 2048, 8192, 32768, 131072]
    assert contexts(128, None) == [8, 32, 128, 512, 2048]  # 16 × the step's context
    assert contexts(3, 4) == [1, 3, 4]


def test_longest_context_is_the_configs_and_nothing_else() -> None:
    class Config:
        max_position_embeddings = 4096

    class Model:
        config = Config()

    assert longest_context(Model()) == 4096
    assert longest_context(object()) is None


def test_each_point_is_the_step_at_that_context(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 256, "max_position_embeddings": 8192}), encoding="utf-8")
    report = audit_target(str(config), decode=True, seq_len=32)
    d = report.decode
    assert d is not None
    assert [p.context for p in d.by_context] == [32, 128, 512, 2048, 8192]
    now = next(p for p in d.by_context if p.context == d.context)
    assert (now.bytes_per_step, now.flops_per_step, now.time_per_step_s) == (
        d.bytes_per_step, d.flops_per_step, d.time_per_step_s)
    for p in d.by_context:
        # 2 layers · 2 KV heads · d_k 16 · K and V · 2 bytes = 256 B per cached token
        assert p.kv_read_bytes == 256 * p.context
        assert p.bytes_per_step - p.kv_read_bytes == d.bytes_per_step - d.kv_read_bytes
    other = audit_target(str(config), decode=True, seq_len=32, context=2048)
    assert other.decode is not None and other.decode.bytes_per_step == next(
        p.bytes_per_step for p in d.by_context if p.context == 2048)
    data = report.to_dict()["decode"]["by_context"]
    assert [p["context"] for p in data] == [32, 128, 512, 2048, 8192]
    assert set(data[0]) == {"context", "flops_per_step", "kv_read_bytes", "bytes_per_step",
                            "time_per_step_s", "bound"}
