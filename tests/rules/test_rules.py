"""Rules MHA001–MHA010: one firing and one passing fixture each, plus the known layouts."""

from __future__ import annotations

import pytest
from fixtures.blocks import make_block

from mhaudit.data import AttentionBlock, Finding, Severity
from mhaudit.rules import REGISTRY, RuleConfig, RuleContext, check_block, evaluate

H100 = RuleContext.for_target("h100", "bfloat16")
A100 = RuleContext.for_target("a100", "bfloat16")


def codes(block: AttentionBlock, ctx: RuleContext = H100,
          config: RuleConfig | None = None) -> set[str]:
    return {f.code for f in check_block(block, ctx, config or RuleConfig())}


def finding(code: str, block: AttentionBlock, ctx: RuleContext = H100) -> Finding:
    found = [f for f in check_block(block, ctx, RuleConfig(select=(code,))) if f.code == code]
    assert len(found) == 1, f"{code} did not fire"
    return found[0]


# --- the registry -------------------------------------------------------------------------

BINDING = {
    "MHA001": "head-dim-not-multiple-of-8",
    "MHA002": "head-dim-kernel-padding",
    "MHA003": "head-dim-above-kernel-limit",
    "MHA004": "head-dim-too-small",
    "MHA005": "materialized-attention-scores",
    "MHA006": "kv-heads-do-not-divide-heads",
    "MHA007": "kv-cache-heavy",
    "MHA008": "heads-not-divisible-by-tensor-parallel",
    "MHA009": "inner-width-differs-from-d-model",
    "MHA010": "unfused-qkv-projections",
    "MHA011": "kv-heads-replicated-by-tensor-parallel",
}


def test_codes_and_names_are_binding() -> None:
    assert {r.code: r.name for r in REGISTRY} == BINDING
    assert REGISTRY.get("MHA009") is not None
    assert REGISTRY.get("kv-cache-heavy") is REGISTRY.get("mha007")
    assert REGISTRY.get("MHA999") is None


def test_every_rule_is_documented() -> None:
    for rule in REGISTRY:
        assert rule.summary and rule.why and rule.example and rule.fix
        assert isinstance(rule.severity, Severity)


def test_registry_rejects_duplicates() -> None:
    rule = REGISTRY.get("MHA001")
    assert rule is not None
    with pytest.raises(ValueError, match="duplicate rule code"):
        REGISTRY.add(rule)
    from dataclasses import replace

    with pytest.raises(ValueError, match="duplicate rule name"):
        REGISTRY.add(replace(rule, code="MHA999"))
    with pytest.raises(ValueError, match="kebab-case"):
        REGISTRY.add(replace(rule, code="MHA998", name="Not_Kebab"))
    assert "MHA999" not in REGISTRY.codes()


# --- the known layouts ------------------------------------------------------------

def test_seed_textbook_layout() -> None:
    # d = 64, h = 8, d_k = 8, eager, separate W_Q, W_K, W_V
    seed = make_block(heads=8, head_dim=8, implementation="eager", fused=False, seq=10)
    assert codes(seed) == {"MHA004", "MHA005", "MHA010"}


def test_llama_sdpa_gqa_layout_is_clean() -> None:
    # Llama-3-8B: d = 4096, h = 32, h_kv = 8, d_k = 128, SDPA, causal, separate projections
    llama = make_block(heads=32, kv_heads=8, head_dim=128, causal=True, fused=False, seq=4096)
    found = codes(llama)
    assert not found & {f"MHA00{i}" for i in range(1, 8)}
    assert found == {"MHA010"}


EXPECTED = {
    # d_k: (codes with SDPA, codes eager), on A100 in bf16 (SDPA runs FlashAttention 2),
    # MHA, fused QKV; eager code runs no flash kernel, so it pays no flash padding
    8: ({"MHA004"}, {"MHA004", "MHA005"}),
    20: ({"MHA001", "MHA004"}, {"MHA001", "MHA004", "MHA005"}),
    80: ({"MHA002"}, {"MHA005"}),
    128: (set(), {"MHA005"}),
    320: ({"MHA003"}, {"MHA003", "MHA005"}),
}


@pytest.mark.parametrize("d_k", sorted(EXPECTED))
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_known_head_dims(d_k: int, implementation: str) -> None:
    block = make_block(heads=8, head_dim=d_k, implementation=implementation, gpu="a100")
    assert codes(block, A100) == EXPECTED[d_k][implementation == "eager"]


def test_math_fallback_on_t4_is_flagged() -> None:
    ctx = RuleContext.for_target("t4", "float16")
    block = make_block(heads=32, head_dim=20, seq=1024, gpu="t4", dtype="float16")
    found = finding("MHA005", block, ctx)
    # 1·32·1024·1024 scores · 4 B (fp32 in the math fallback) = 134,217,728 B
    assert found.numbers["scores_bytes"] == 134_217_728
    assert "128 MiB" in found.message and "math" in found.message


# --- one firing and one passing fixture per rule --------------------------------------------

def test_mha001() -> None:
    found = finding("MHA001", make_block(head_dim=20))
    # 20 pads to 24: 4 / 24 = 16.7 % wasted
    assert found.numbers["padded_head_dim"] == 24
    assert "16.7%" in found.message
    assert "MHA001" not in codes(make_block(head_dim=64))
    assert "MHA001" in codes(make_block(head_dim=64, v_head_dim=36))


def test_mha002() -> None:
    found = finding("MHA002", make_block(head_dim=80, gpu="a100"), A100)
    assert found.numbers["kernel_head_dim"] == 96
    assert found.numbers["padding_waste_fraction"] == pytest.approx(1 / 6)
    # (scores + context) = 2·(2·1·8·128·128·80) = 41,943,040; padding adds 16/80 of it
    assert found.numbers["wasted_flops"] == pytest.approx(41_943_040 * 0.2)
    assert "16.7%" in found.message and "96" in found.message and "flash" in found.message
    # the hint names head counts whose d_k is a compiled FA2 size: 640 = 5·128 = 10·64
    assert "h = 5 (d_k = 128), h = 10 (d_k = 64)" in found.fix
    assert "MHA002" not in codes(make_block(head_dim=128, gpu="a100"), A100)
    assert "MHA002" not in codes(make_block(head_dim=80), RuleContext.for_target("t4", "fp16"))


def test_mha002_speaks_of_the_kernel_the_block_gets() -> None:
    # H100 bf16: SDPA runs cuDNN (no head-dim table); fp32 on A100: mem-efficient, no flash
    assert "MHA002" not in codes(make_block(head_dim=80))
    fp32 = RuleContext.for_target("a100", "float32")
    assert "MHA002" not in codes(make_block(head_dim=80, gpu="a100", dtype="float32"), fp32)


def test_mha003() -> None:
    found = finding("MHA003", make_block(head_dim=320))
    assert found.numbers["head_dim"] == 320
    assert "mem_efficient" in found.message
    assert "MHA003" not in codes(make_block(head_dim=256))


def test_mha004() -> None:
    found = finding("MHA004", make_block(head_dim=8, seq=128))
    # 2·(8 + 8) = 32 FLOPs per 2-byte score -> 16 FLOP/B; H100 ridge 989e12 / 3350e9 ≈ 295
    assert found.numbers["flops_per_score"] == 32
    assert found.numbers["flops_per_score_byte"] == 16
    assert found.numbers["ridge_flops_per_byte"] == pytest.approx(295.2, abs=0.1)
    assert "rank ≤ 8" in found.message and "pads" not in found.message  # cuDNN on H100
    # A100: FlashAttention 2 runs d_k = 8 in its 32 kernel, 75% padding
    on_a100 = finding("MHA004", make_block(head_dim=8, gpu="a100"), A100)
    assert on_a100.numbers["kernel_head_dim"] == 32 and "75.0% wasted" in on_a100.message
    assert "MHA004" not in codes(make_block(head_dim=32))


def test_mha005() -> None:
    found = finding("MHA005", make_block(heads=8, head_dim=8, implementation="eager", seq=128))
    # 1·8·128·128 scores · 2 B = 262,144 B = 256 KiB
    assert found.numbers["scores_bytes"] == 262_144
    assert "256 KiB" in found.message
    assert "scaled_dot_product_attention" in found.fix
    assert "MHA005" not in codes(make_block(heads=8, head_dim=128))


def test_mha006() -> None:
    found = finding("MHA006", make_block(heads=12, kv_heads=5))
    assert found.numbers["remainder"] == 2
    assert "1, 2, 3, 4, 6, 12" in found.fix
    assert "MHA006" not in codes(make_block(heads=12, kv_heads=4))


def test_mha007() -> None:
    block = make_block(heads=32, head_dim=128, causal=True, seq=4096)
    found = finding("MHA007", block)
    # 2·32·128·2 B = 16,384 B per token; h_kv = 8 keeps 1/4: saves 12,288; h_kv = 4 saves 14,336
    assert found.numbers["kv_cache_bytes_per_token"] == 16_384
    assert found.numbers["saving_bytes_per_token_quarter"] == 12_288
    assert found.numbers["saving_bytes_per_token_eighth"] == 14_336
    assert "16 KiB" in found.message and "12 KiB" in found.message
    assert "MHA007" not in codes(make_block(heads=32, head_dim=128, causal=False))
    assert "MHA007" not in codes(make_block(heads=32, kv_heads=8, head_dim=128, causal=True))
    assert "MHA007" not in codes(make_block(heads=32, head_dim=128, causal=True, kind="cross"))
    # GPT-2 small in bf16: 2·12·64·2 = 3,072 B per token, under the 8 KiB threshold
    assert "MHA007" not in codes(make_block(heads=12, head_dim=64, causal=True))


def test_mha008() -> None:
    ctx = RuleContext.for_target("h100", "bf16", tensor_parallel=8)
    found = finding("MHA008", make_block(heads=12), ctx)
    assert found.numbers["heads_per_gpu"] == 1.5
    assert "{2, 4}" in found.fix
    assert "MHA008" not in codes(make_block(heads=32, kv_heads=8), ctx)
    assert "MHA008" not in codes(make_block(heads=32, kv_heads=2), ctx)  # KV heads replicate
    assert "MHA008" not in codes(make_block(heads=12))  # no --tensor-parallel
    stuck = finding("MHA008", make_block(heads=12, kv_heads=5), ctx)
    assert stuck.fix.startswith("Change the head counts")


def test_mha009() -> None:
    found = finding("MHA009", make_block(heads=16, head_dim=256, d_model=3072))
    assert found.numbers["inner_width"] == 4096
    # 2·3072·4096 (Q, K) + 4096·3072 (V) + 4096·3072 (O) = 4·3072·4096 vs 4·3072²: 1.33×
    assert found.numbers["params_ratio"] == pytest.approx(4096 / 3072)
    assert found.severity is Severity.INFO
    assert "MHA009" not in codes(make_block(heads=16, head_dim=256))


def test_mha010() -> None:
    found = finding("MHA010", make_block(fused=False, seq=128))
    # input 1·128·512 · 2 B = 131,072 B, read twice more than needed
    assert found.numbers["extra_read_bytes"] == 262_144
    assert "nn.Linear(512, 1536)" in found.fix
    assert "MHA010" not in codes(make_block(fused=True))
    assert "MHA010" not in codes(make_block(fused=False, kind="cross"))


def test_every_finding_has_numbers_and_a_fix() -> None:
    blocks = [make_block(head_dim=d, implementation=i, gpu="a100") for d in (8, 20, 80, 320)
              for i in ("sdpa", "eager")]
    blocks += [make_block(heads=12, kv_heads=5, gpu="a100"),
               make_block(heads=16, head_dim=256, d_model=3072, gpu="a100"),
               make_block(heads=32, head_dim=128, causal=True, gpu="a100"),
               make_block(fused=False, gpu="a100"),
               make_block(heads=32, kv_heads=4, causal=True, gpu="a100")]
    ctx = RuleContext.for_target("a100", "bf16", tensor_parallel=8)
    seen = set()
    for block in evaluate(blocks, ctx):
        for flag in block.findings:
            seen.add(flag.code)
            assert flag.numbers and flag.fix and flag.block == block.name
            assert any(ch.isdigit() for ch in flag.message)
    assert seen == set(BINDING)


# --- evaluate and configuration -------------------------------------------------------------

def test_evaluate_fills_flags_and_is_idempotent() -> None:
    block = make_block(head_dim=8, implementation="eager")
    other = Finding("COV001", "coverage", Severity.INFO, "x", "y")
    from dataclasses import replace

    once = evaluate([replace(block, findings=(other,))], H100)
    twice = evaluate(once, H100)
    assert once == twice
    assert [f.code for f in once[0].findings] == ["COV001", "MHA004", "MHA005"]


def test_select_and_ignore_by_prefix() -> None:
    block = make_block(head_dim=20, implementation="eager", fused=False)
    assert codes(block) == {"MHA001", "MHA004", "MHA005", "MHA010"}
    assert codes(block, config=RuleConfig(select=("MHA00",))) == {"MHA001", "MHA004", "MHA005"}
    assert codes(block, config=RuleConfig(ignore=("MHA00",))) == {"MHA010"}
    # the longer prefix wins: ignore MHA00 but select MHA005
    config = RuleConfig(select=("MHA", "MHA005"), ignore=("MHA00",))
    assert codes(block, config=config) == {"MHA005", "MHA010"}


def test_severity_and_threshold_overrides() -> None:
    block = make_block(heads=32, head_dim=128, causal=True)
    config = RuleConfig(severity={"MHA007": Severity.ERROR})
    (flag,) = [f for f in check_block(block, H100, config) if f.code == "MHA007"]
    assert flag.severity is Severity.ERROR
    high = RuleConfig(thresholds={"MHA007": {"min_bytes_per_token": 32768}})
    assert "MHA007" not in codes(block, config=high)
    low = RuleConfig(thresholds={"MHA004": {"min_head_dim": 64}})
    assert "MHA004" in codes(make_block(head_dim=48), config=low)


def test_suppression_by_module_pattern() -> None:
    enc = make_block(head_dim=8, name="encoder.layers.0.attn")
    dec = make_block(head_dim=8, name="decoder.layers.0.attn")
    config = RuleConfig(per_module_ignores={"encoder.*": ("MHA004",)})
    flagged = {b.name: {f.code for f in b.findings} for b in evaluate([enc, dec], H100, config)}
    assert flagged == {"encoder.layers.0.attn": set(), "decoder.layers.0.attn": {"MHA004"}}

