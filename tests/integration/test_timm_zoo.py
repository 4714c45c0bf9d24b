"""The timm sweep's own logic (any venv), and a few timm models through it (where timm imports).

The harness reads each attention module's declared layout (``num_heads``, ``head_dim``, a
fused ``qkv``) from the module, so its checks are tested on plain torch modules here; the
timm cases skip where ``import timm`` fails (the main venv's torchvision does not load).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fixtures.zoo_fused import FusedKeywordCatBias, FusedUnbind, MultiQueryAttention
from zoo_harness.timm_expect import Declared, compare_layouts, declared_modules
from zoo_harness.timm_worker import Built, classify, model_file
from zoo_harness.timm_zoo import family, mixed_order, pick_families


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.num_heads = 4  # repeated on the block, as Swin's blocks do
        self.attn = FusedUnbind(64, 4)
        self.mha = nn.MultiheadAttention(32, 2)


def _block(name: str, h: int, kv: int, d: int, width: int, total: int = 0) -> dict[str, Any]:
    return {"name": name, "num_heads": h, "num_kv_heads": kv, "head_dim": d, "d_model": width,
            "kind": "self", "params": {"total": total}}


def test_declared_modules_are_the_innermost_with_heads() -> None:
    found = {d.name: d for d in declared_modules(_Block())}
    assert set(found) == {"attn", "mha"}
    # FusedUnbind(64, 4): head_dim 64 / 4 = 16, qkv Linear(64, 192); params 64*192 + 192 +
    # 64*64 + 64 = 16640
    assert found["attn"] == Declared("attn", 4, None, 16, 64, 16640)
    # nn.MultiheadAttention(32, 2): head_dim 16, embed_dim 32; in_proj 32*96 + 96, out 32*32 + 32
    assert found["mha"] == Declared("mha", 2, None, 16, 32, 4224)


class _Rope(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.num_heads = 4  # learned frequencies per head, no projection
        self.freqs = nn.Parameter(torch.zeros(4, 8))


def test_a_module_without_projections_declares_no_attention() -> None:
    assert declared_modules(_Rope()) == []


def test_fused_qkv_without_head_dim_gives_it() -> None:
    module = FusedKeywordCatBias(48, 3)
    del module.head_dim
    # qkv Linear(48, 144): 144 / (3 * 3 heads) = 16
    (declared,) = declared_modules(module)
    assert (declared.heads, declared.head_dim, declared.width) == (3, 16, 48)


def test_key_projection_width_gives_kv_heads() -> None:
    # MultiQueryAttention(64, 8): head_dim 8, k_proj Linear(64, 8): 8 / 8 = 1 KV head
    (declared,) = declared_modules(MultiQueryAttention(64, 8))
    assert (declared.heads, declared.kv_heads, declared.head_dim) == (8, 1, 8)


def test_blocks_outside_declared_modules_must_have_one_head() -> None:
    assert compare_layouts([_block("mixer", 1, 1, 32, 32)], []) == []
    (extra,) = compare_layouts([_block("mixer", 2, 2, 16, 32)], [])
    assert "block 'mixer' of 2 heads where no module declares heads" in extra


def test_compare_layouts_passes_a_fitting_block_and_names_what_differs() -> None:
    declared = [Declared("blocks.0.attn", 4, None, 16, 64, 16640)]
    assert compare_layouts([_block("blocks.0.attn", 4, 4, 16, 64, 16640)], declared) == []
    # a block named at a child (the projections sit deeper) still belongs to the module
    assert compare_layouts([_block("blocks.0.attn.inner", 4, 4, 16, 64)], declared) == []
    (wrong,) = compare_layouts([_block("blocks.0.attn", 1, 1, 64, 64)], declared)
    assert "heads 1 (module 4)" in wrong and "head dim 64 (module 16)" in wrong
    (more,) = compare_layouts([_block("blocks.0.attn", 4, 4, 16, 64, 16641)], declared)
    assert "block params 16641 (module holds 16640)" in more
    assert compare_layouts([], declared) == ["no block for 'blocks.0.attn'"]


def _report(blocks: list[dict[str, Any]], params: int, matmul: int) -> dict[str, Any]:
    return {"blocks": blocks, "model": {"params_total": params},
            "totals": {"flops_by_family": {"matmul": matmul, "conv": 0}}}


def test_classify() -> None:
    built = Built(64, {"img_size": 64}, 3, 100, 1000, [Declared("attn", 4, None, 16, 64, 90)])
    fits = [_block("attn", 4, 4, 16, 64, 90)]
    assert classify("m", 0, _report(fits, 100, 1000), "", built).status == "exact"
    assert classify("m", 0, _report(fits, 100, 1000 + 11), "", built).status == "wrong"
    assert classify("m", 0, _report(fits, 101, 1000), "", built).status == "wrong"
    assert classify("m", 0, _report([], 100, 1000), "", built).status == "missed"
    assert classify("m", 3, None, "cannot trace", built).status == "exit 3"
    assert classify("m", 4, None, "internal error", built).status == "exit 4"
    plain = Built(64, {}, 3, 100, 1000, [])
    assert classify("m", 0, _report([], 100, 1000), "", plain).status == "exact"
    assert classify("m", 0, _report(fits, 100, 1000), "", plain).status == "wrong"


def test_model_file_builds_what_the_reference_ran() -> None:
    text = model_file("vit_tiny_patch16_224", Built(64, {"img_size": 64}, 3))
    compile(text, "model.py", "exec")
    assert "create_model('vit_tiny_patch16_224', pretrained=False, **{'img_size': 64})" in text
    assert "torch.randn(1, 3, 64, 64)" in text


def test_one_model_per_family_its_smallest() -> None:
    models = [("vit_base_patch16_224", "vision_transformer"),
              ("vit_tiny_patch16_224", "vision_transformer"),
              ("vit_large_patch16_224", "vision_transformer"),
              ("resnet50d", "resnet"), ("resnet18", "resnet"),
              ("cait_m36_384", "cait"), ("cait_xxs24_224", "cait")]
    assert family("resnet50x4_clip", "byobnet") == "byobnet/resnet"
    assert pick_families(models) == {"cait/cait": "cait_xxs24_224", "resnet/resnet": "resnet18",
                                     "vision_transformer/vit": "vit_tiny_patch16_224"}
    names = ["a", "b", "c", "d"]
    assert sorted(mixed_order(names)) == names and mixed_order(names) == mixed_order(names[::-1])


TIMM_CASES = {
    "vit_tiny_patch16_224": "fused qkv unbound after a (B, N, 3, h, d) view",
    "eva02_tiny_patch14_224": "F.linear by keyword with a cat(q_bias, 0, v_bias) bias",
    "swin_tiny_patch4_window7_224": "window attention with a relative position table",
    "halonet26t": "halo windows unfolded from a fused kv conv, a strided 1x1 query conv",
    "resnet18": "no attention",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TIMM_CASES), ids=list(TIMM_CASES))
def test_timm_model_is_exact(name: str) -> None:
    pytest.importorskip("timm")
    from zoo_harness.sweep import run_all
    from zoo_harness.timm_worker import preload, run_one

    preload()
    (result,) = run_all([name], run_one, jobs=1, timeout_s=240)
    assert result.status == "exact", f"{result.status}: {result.reason}"
