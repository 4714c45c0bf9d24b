"""KV replication under TP: a Llama shape with h_kv = 8 holds one whole KV head per rank at
t = 16, as at t = 8 (twice the even 1/16 share), and MHA011 fires with those numbers."""

from __future__ import annotations

import os

import pytest
import torch

from mhaudit.api import audit
from mhaudit.cost.devices import get_profile
from mhaudit.parallel import plan_costs

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama() -> tuple[torch.nn.Module, torch.Tensor]:
    # Llama-3-70B's head layout (64 query heads, 8 KV heads of 128) on a 2-layer body
    cfg = transformers.LlamaConfig(hidden_size=8192, intermediate_size=256,
                                   num_hidden_layers=2, num_attention_heads=64,
                                   num_key_value_heads=8, vocab_size=128)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    return model, torch.zeros((1, 256), dtype=torch.long, device="meta")


def test_t16_holds_one_whole_kv_head_per_rank(llama) -> None:  # type: ignore[no-untyped-def]
    model, ids = llama
    report = audit(model, (ids,), tensor_parallel=16)
    h100 = get_profile("h100")
    kv = {t: plan_costs(model, (ids,), {}, report.blocks, f"tp={t}", h100, "decode",
                        context=4096).per_device_bytes.kv_cache for t in (1, 8, 16)}
    # one head, one layer, one token: K and V · 128 · 2 B = 512 B; 2 layers · 4,096 tokens:
    # 4 MiB per head, 32 MiB for all 8 heads
    assert kv[1] == 8 * 4 * 2**20
    assert kv[8] == kv[16] == 4 * 2**20 == 2 * kv[1] // 16
    flags = [f for b in report.blocks for f in b.findings if f.code == "MHA011"]
    assert len(flags) == 2  # one per layer
    numbers = flags[0].numbers
    # per rank: one head's cache at 1 × 256 tokens (512 B · 256 = 128 KiB) and its W_K, W_V
    # (2 · 8,192 · 128 · 2 B = 4 MiB); the even share is half of it
    assert numbers["copies"] == 2 and numbers["tensor_parallel"] == 16
    assert numbers["kv_bytes_per_rank"] == 128 * 2**10 + 4 * 2**20
    assert numbers["replicated_bytes_per_rank"] == numbers["kv_bytes_per_rank"] // 2
    assert numbers["group_copy_bytes"] == 8 * numbers["kv_bytes_per_rank"]
    assert "h_kv = 16 at t = 16" in flags[0].fix


def test_t8_does_not_replicate(llama) -> None:  # type: ignore[no-untyped-def]
    model, ids = llama
    report = audit(model, (ids,), tensor_parallel=8)
    assert not [f for b in report.blocks for f in b.findings if f.code == "MHA011"]
