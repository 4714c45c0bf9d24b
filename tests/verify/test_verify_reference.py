"""``--verify``'s real forward at the audited dtype: peak, routed experts, KV cache."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

import mhaudit
from mhaudit.data import Report
from mhaudit.verify import checks
from mhaudit.verify.reference import cache_bytes_per_token, flop_counter

transformers = pytest.importorskip("transformers")


def test_grouped_mm_counts_each_routed_row_against_one_expert() -> None:
    tokens = torch.randn(6, 8, dtype=torch.bfloat16)  # 6 routed rows of width K = 8
    experts = torch.randn(3, 8, 8, dtype=torch.bfloat16)  # 3 experts, (K, N) = (8, 8)
    offsets = torch.tensor([2, 4, 6], dtype=torch.int32)
    counter = flop_counter()
    with counter:
        torch._grouped_mm(tokens, experts, offs=offsets)
    assert counter.get_total_flops() == 2 * 6 * 8 * 8  # 768


def test_cache_bytes_per_token_reads_every_layer() -> None:
    cache = transformers.DynamicCache()
    for layer in range(3):  # (b, h_kv, n, d_k) = (2, 2, 5, 16) at bf16
        kv = torch.zeros(2, 2, 5, 16, dtype=torch.bfloat16)
        cache.update(kv, kv.clone(), layer)
    # 3 layers · (K + V) · 2 heads · 16 · 2 B = 384 B per position and sequence
    assert cache_bytes_per_token({"past_key_values": cache}) == 384


def _llama() -> nn.Module:
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=300, max_position_embeddings=128))


def _mixtral() -> nn.Module:
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=300, num_local_experts=4, num_experts_per_tok=2))


def _audit(model: nn.Module, **options: object) -> tuple[Report, dict[str, torch.Tensor]]:
    with torch.device("meta"):
        ids = torch.zeros(2, 32, dtype=torch.long)
    inputs = {"input_ids": ids, "labels": ids}
    return mhaudit.audit(model, inputs, verify=True, **options), inputs


def _rows(report: Report) -> dict[str, checks.Agreement]:
    assert report.verification is not None
    return {row.figure: row for row in report.verification.rows}


def test_a_bf16_llama_with_labels_meets_a_real_bf16_forward() -> None:
    with torch.device("meta"):
        model = _llama()
    report, inputs = _audit(model, dtype="bf16")
    rows = _rows(report)
    peak, kv = rows[checks.PEAK], rows[checks.KV]
    assert peak.agrees and "real no_grad CPU forward at bfloat16" in peak.how
    # 2 layers · (K + V) · 2 KV heads · 16 · 2 B
    assert kv.counter == "DynamicCache" and kv.reference == kv.ours == 256
    # the figure an fp32 count scaled to 2 bytes gave disagrees with the real forward
    fp32 = mhaudit.audit(model, inputs, dtype="fp32").totals.peak_activation_bytes
    assert fp32 is not None
    scaled = replace(report, totals=replace(report.totals, peak_activation_bytes=fp32 // 2))
    again = checks.verify(scaled, model, (), inputs)
    assert not {r.figure: r for r in again.rows}[checks.PEAK].agrees


def test_routed_expert_flops_come_from_the_routed_forward() -> None:
    with torch.device("meta"):
        model = _mixtral()
    report, inputs = _audit(model)
    flops = _rows(report)["matmul + conv flops"]
    assert report.experts and flops.agrees and "real CPU forward" in flops.how
    # the router now sends each token to one expert: the report's table still says two
    for module in model.modules():
        if hasattr(module, "top_k"):
            module.top_k = 1
    again = checks.verify(report, model, (), inputs)
    routed = {r.figure: r for r in again.rows}["matmul + conv flops"]
    assert routed.reference < routed.ours and not routed.agrees


def test_a_forward_over_the_limit_checks_flops_on_fake_tensors_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "FORWARD_LIMIT_FLOPS", 1)
    monkeypatch.setattr(checks, "real_forward", lambda *a: pytest.fail("ran"))
    with torch.device("meta"):
        model = _mixtral()
    report, _ = _audit(model)
    checked = report.verification
    assert checked is not None and checked.agrees
    assert "as dispatched on fake tensors" in _rows(report)["matmul + conv flops"].how
    assert {u.figure for u in checked.unchecked} == {checks.PEAK, checks.KV}
    assert all("over the 1 limit" in u.reason for u in checked.unchecked)


def test_decode_bytes_meet_a_real_generation_step() -> None:
    from mhaudit.verify.decode import FIGURE

    with torch.device("meta"):
        model = _llama()
    report, inputs = _audit(model, decode=True, context=48)
    row = _rows(report)[FIGURE]
    assert report.decode is not None and row.agrees and row.tolerance == 0.01
    # the cache part by hand: 2 layers · (K + V) · 2 KV heads · 16 · 2 B per position,
    # 48 read and 1 written per sequence, 2 sequences
    assert f"{2 * 2 * 2 * 16 * 2 * 49 * 2:,} B of keys and values" in row.how
    # a report that read the weights twice a step disagrees
    twice = replace(report.decode, bytes_per_step=report.decode.bytes_per_step
                    + report.decode.weight_bytes)
    again = checks.verify(replace(report, decode=twice), model, (), inputs)
    assert not {r.figure: r for r in again.rows}[FIGURE].agrees
