"""``--verify`` runs its references down the path the audit traced, at the audited dtype
where the model's code allows it."""

from __future__ import annotations

import torch
from fixtures import mixed_dtype
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import mhaudit

D, H, N, LAYERS = 32, 4, 6, 2


def test_mixed_float32_code_is_checked_at_float32_and_says_so() -> None:
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():  # a real float32 forward: the matmul FLOPs torch counts
        mixed_dtype.build_model()(*mixed_dtype.example_inputs())
    report = mhaudit.audit_target(mixed_dtype.__file__, verify=True, dtype="bfloat16")
    checked = report.verification
    assert checked is not None and checked.agrees, checked
    (flops,) = checked.rows
    assert flops.reference == flops.ours == counter.get_total_flops()
    assert "mixes float32 with bfloat16" in (flops.how or "")
    reasons = {u.figure: u.reason for u in checked.unchecked}
    assert set(reasons) == {"inference peak activation bytes", "kv cache bytes per token"}
    for reason in reasons.values():
        assert "mixes float32 with bfloat16" in reason
        assert reason.endswith("rerun with --dtype float32 to check it")
    at_float32 = mhaudit.audit_target(mixed_dtype.__file__, verify=True,
                                      dtype="float32").verification
    assert at_float32 is not None and at_float32.agrees and not at_float32.unchecked


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(D, H, dim_feedforward=2 * D, dropout=0.0,
                                       batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=LAYERS, enable_nested_tensor=True).eval()


def test_torch_encoder_with_a_padding_mask_is_checked_down_the_path_the_audit_took() -> None:
    padding = torch.tensor([[False] * N, [False] * 4 + [True] * 2])  # (b, n): 2 keys padded
    src = torch.randn(2, N, D)
    counter = FlopCounterMode(display=False)
    torch.backends.mha.set_fastpath_enabled(False)
    try:  # torch counts the pieces' linear layers on a real forward
        with counter, torch.no_grad():
            _encoder()(src, src_key_padding_mask=padding)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    # its CPU SDPA kernel it leaves out: QKᵀ and PV, 2·b·h·n·n·d_k each, per layer
    # 2 layers · 2 products · 2·2·4·6·6·8 = 4 · 4608 = 18,432
    sdpa = LAYERS * 2 * (2 * 2 * H * N * N * (D // H))
    report = mhaudit.audit(_encoder(), {"src": src, "src_key_padding_mask": padding},
                           verify=True)
    checked = report.verification
    assert checked is not None and checked.agrees, checked
    flops, peak = checked.rows[:2]
    assert flops.reference == flops.ours == counter.get_total_flops() + sdpa
    assert peak.counter == "MemTracker"
    assert torch.backends.mha.get_fastpath_enabled()  # left as it was
