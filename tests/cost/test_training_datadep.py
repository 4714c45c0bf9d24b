"""A training step of a model whose shapes depend on the data: real on CPU, else bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fixtures.zoo_datadep import D, E, ItemLength, NonzeroRouted, inputs_with_mask

from mhaudit.api import audit, audit_target
from mhaudit.errors import TraceError
from mhaudit.verify.step import memtracker_step

_FILE = '''
import torch
from fixtures.zoo_datadep import NonzeroRouted

def build_model():
    return NonzeroRouted()

def example_inputs():
    return (torch.randn(2, 12, 32),)
'''


def _tracked_peak() -> int:
    """MemTracker's peak of a real AdamW step of the model built as the CPU build is
    (seed 0, the model first, then its inputs)."""
    torch.manual_seed(0)
    model = NonzeroRouted()
    x = torch.randn(2, 12, D)  # (B, n, d)
    return memtracker_step(model, (x,), {})["Total"]


def test_a_meta_model_file_trains_for_real_on_its_cpu_build(tmp_path: Path) -> None:
    path = tmp_path / "routed.py"
    path.write_text(_FILE)
    training = audit_target(str(path), train=True).training
    assert training is not None and training.rung == "real-cpu" and not training.bounds
    assert "for real on a CPU build" in training.convention
    # the same step under torch's MemTracker, on the same seeded build
    assert training.peak_bytes == pytest.approx(_tracked_peak(), rel=0.01)


def test_a_meta_model_without_its_constructor_trains_at_the_upper_bound() -> None:
    torch.manual_seed(0)
    real = audit(NonzeroRouted(), (torch.randn(2, 12, D),), train=True, device="cpu").training
    with torch.device("meta"):
        meta = NonzeroRouted()
    bounded = audit(meta, (torch.randn(2, 12, D, device="meta"),), train=True).training
    assert real is not None and real.rung == "real-cpu"
    assert bounded is not None and bounded.rung == "fake-bounded"
    assert bounded.bounds == (f"{E} aten::nonzero call(s) at their upper bound: as many "
                              "index rows as its input has elements",)
    # routed for real, the 24 tokens pass one expert each; at the bound every expert sees
    # all 24: 72 more passes of 2·(32·64 + 64·32) = 8,192 forward FLOPs, ×3 with the
    # backward (input and weight gradients): 1,769,472 FLOPs at least
    assert bounded.flops - real.flops >= 72 * 8_192 * 3
    assert bounded.peak_bytes >= real.peak_bytes


def test_a_value_read_from_the_data_without_a_cpu_build_is_one_clear_error() -> None:
    with torch.device("meta"):
        model = ItemLength()
    x, mask = inputs_with_mask()
    with pytest.raises(TraceError, match="no real CPU step may run") as info:
        audit(model, (x.to("meta"), mask.to("meta")), train=True)
    assert info.value.exit_code == 3 and "--device cpu" in info.value.tip


_LLAVA = '''
import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

def build_model():
    text = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, image_size=32, patch_size=8)
    return LlavaForConditionalGeneration(
        LlavaConfig(text_config=text, vision_config=vision, image_token_index=300))

def example_inputs():
    ids = torch.randint(0, 299, (1, 40))
    ids[0, 2:18] = 300  # the 16 patches of a 32×32 image at patch size 8
    return {"input_ids": ids, "pixel_values": torch.randn(1, 3, 32, 32)}
'''


def test_a_llava_model_trains_for_real_where_transformers_reads_its_image_tokens(
        tmp_path: Path) -> None:
    """transformers checks the image tokens against the image features with a value read
    from the data (``.item()``): fake tensors hold none, the CPU build answers."""
    pytest.importorskip("transformers")
    path = tmp_path / "llava.py"
    path.write_text(_LLAVA)
    training = audit_target(str(path), train=True).training
    assert training is not None and training.rung == "real-cpu"
    namespace: dict[str, object] = {}
    exec(compile(_LLAVA, str(path), "exec"), namespace)
    torch.manual_seed(0)  # as the CPU build: the model first, then its inputs
    model = namespace["build_model"]()  # type: ignore[operator]
    inputs = namespace["example_inputs"]()  # type: ignore[operator]
    tracked = memtracker_step(model, (), inputs)["Total"]
    assert training.peak_bytes == pytest.approx(tracked, rel=0.02)
