"""Integer inputs whose values the loader made stay real in a fake pass: a packed vision
tower reads its grid, and the model its placeholder tokens, on a meta model of any size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from mhaudit.fake.mode import FakeMode, mark_known


def test_ops_over_known_integers_run_for_real_and_floats_stay_fake() -> None:
    grid = mark_known(torch.tensor([[1, 4, 4], [1, 2, 6]]))
    mode = FakeMode(allow_non_fake_inputs=True)
    with mode:
        x = torch.empty(28, 8)  # a float made from nothing: fake
        lengths = grid[:, 1] * grid[:, 2]  # known values: 16 and 12
        cu = torch.repeat_interleave(lengths, grid[:, 0]).cumsum(0)
        index = torch.arange(int(cu[-1]))  # an index tensor made from nothing: real
        rows = x[index]
    assert isinstance(x, FakeTensor) and isinstance(rows, FakeTensor)
    assert type(cu) is torch.Tensor and cu.tolist() == [16, 28]  # 16, 16 + 12
    assert type(index) is torch.Tensor and index.tolist() == list(range(28))
    assert rows.shape == (28, 8)


def _config(path: Path, scale: dict[str, Any]) -> str:
    """A Qwen2-VL config written as a user writes one: ``Qwen2VLConfig`` at ``scale``'s
    sizes, ``architectures`` set, ``to_json_file``."""
    tf = pytest.importorskip("transformers")
    vision = {k: scale[k] for k in ("depth", "embed_dim", "num_heads")}
    config = tf.Qwen2VLConfig(
        hidden_size=scale["hidden"], num_hidden_layers=scale["layers"],
        num_attention_heads=scale["heads"], num_key_value_heads=scale["kv_heads"],
        intermediate_size=scale["intermediate"], vocab_size=scale["vocab"],
        rope_scaling={"type": "mrope", "mrope_section": scale["mrope"]},
        vision_config={**vision, "hidden_size": scale["hidden"], "patch_size": 14,
                       "spatial_merge_size": 2, "temporal_patch_size": 2},
        architectures=["Qwen2VLForConditionalGeneration"])
    config.to_json_file(str(path / "config.json"))
    return str(path / "config.json")


def _audits_on_fake_tensors(path: str, scale: dict[str, Any]) -> None:
    from mhaudit import audit_target

    report = audit_target(path)
    assert report.model.trace_method == "dispatch-record"
    assert report.model.inputs["image_grid_thw"]["shape"] == [1, 3]
    text = [b.layout for b in report.blocks if "language_model" in b.name]
    vision = [b.layout for b in report.blocks if ".visual." in b.name]
    # the config's own numbers: head dim = hidden / heads
    assert [(t.num_heads, t.num_kv_heads, t.head_dim) for t in text] == \
        [(scale["heads"], scale["kv_heads"], scale["hidden"] // scale["heads"])] * scale["layers"]
    # the tower runs twice, on the image and on the clip beside the text: 2 · depth blocks
    assert [(v.num_heads, v.num_kv_heads, v.head_dim) for v in vision] == \
        [(scale["num_heads"], scale["num_heads"], scale["embed_dim"] // scale["num_heads"])] \
        * (2 * scale["depth"])


SMALL = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 128,
         "vocab": 1000, "mrope": [2, 3, 3], "depth": 2, "embed_dim": 64, "num_heads": 4}
"""Qwen2-VL's shape at toy sizes: mrope sections summing to half the head dim 16."""

QWEN2_VL_2B = {"hidden": 1536, "layers": 28, "heads": 12, "kv_heads": 2,
               "intermediate": 8960, "vocab": 151936, "mrope": [16, 24, 24], "depth": 32,
               "embed_dim": 1280, "num_heads": 16}
"""Qwen2-VL-2B's published dimensions."""


def test_a_packed_vision_model_too_big_for_the_cpu_audits_on_fake_tensors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mhaudit.load.rows as rows
    import mhaudit.trace.real as real

    monkeypatch.setattr(rows, "CPU_COPY_LIMIT", 0)  # no CPU copy counts the image tokens
    monkeypatch.setattr(real, "forward_limit", lambda: 0)  # and no real forward traces
    _audits_on_fake_tensors(_config(tmp_path, SMALL), SMALL)


@pytest.mark.slow
def test_a_qwen2_vl_2b_config_audits(tmp_path: Path) -> None:
    _audits_on_fake_tensors(_config(tmp_path, QWEN2_VL_2B), QWEN2_VL_2B)
