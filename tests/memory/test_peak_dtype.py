"""The inference peak at the audited dtype: upcasts in model code count as they happen."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from mhaudit.api import audit
from mhaudit.trace.export import TRACER_ENV


class _Upcast(nn.Module):
    """A projection whose output the code upcasts, as ``logits.float()`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).float()  # (2, 16, 64): a copy at bf16, the same tensor at fp32


@pytest.mark.parametrize("tracer", ["dispatch-record", "torch.export"])
def test_an_upcast_costs_a_copy_at_bf16_and_nothing_at_fp32(
        tracer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRACER_ENV, tracer)  # the record counts; export runs its own pass
    with torch.device("meta"):
        model = _Upcast()
        x = torch.zeros(2, 16, 64)
    peak = {dtype: audit(model, (x,), dtype=dtype).totals.peak_activation_bytes
            for dtype in ("float32", "bfloat16")}
    # fp32: the projection's 2·16·64·4 = 8,192 B; .float() returns it
    assert peak["float32"] == 8192
    # bf16: the projection's 2·16·64·2 = 4,096 B and its fp32 copy 8,192 B, both alive;
    # an fp32 run scaled to 2 bytes said 4,096
    assert peak["bfloat16"] == 4096 + 8192


def test_fp8_keeps_the_scaled_count() -> None:
    # the CPU computes no fp8 matmuls: the pass keeps fp32 and the bytes are scaled, 8,192 / 4
    with torch.device("meta"):
        model = _Upcast()
        x = torch.zeros(2, 16, 64)
    assert audit(model, (x,), dtype="fp8").totals.peak_activation_bytes == 2048


def test_a_gqa_llama_with_labels_at_bf16_meets_a_real_bf16_forward() -> None:
    transformers = pytest.importorskip("transformers")
    from torch.distributed._tools.mem_tracker import MemTracker

    def build() -> nn.Module:
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, vocab_size=500,
            max_position_embeddings=256))

    with torch.device("meta"):
        meta = build()
        ids = torch.zeros(2, 64, dtype=torch.long)
    ours = audit(meta, {"input_ids": ids, "labels": ids}, dtype="bf16")
    assert ours.totals.peak_activation_bytes is not None
    # the oracle: a real bf16 CPU forward, its live storages tracked by torch
    torch.manual_seed(0)
    real = build().to(torch.bfloat16).eval()
    real_ids = torch.zeros(2, 64, dtype=torch.long)
    tracker = MemTracker()
    tracker.track_external(real, real_ids)  # inputs as "other", not activations
    with torch.no_grad(), tracker:
        out = real(input_ids=real_ids, labels=real_ids)
    del out
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    (activations,) = [v for k, v in peak.items() if str(k).endswith("ACT")]
    # the fp32 logits and the loss's fp32 log-softmax: an fp32 count scaled to 2 bytes
    # was −51% here
    assert ours.totals.peak_activation_bytes == pytest.approx(activations, rel=0.03)
