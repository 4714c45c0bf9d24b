"""The speed benchmark runs end to end on a tiny model: every contender, the floor, the ratios."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("fvcore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import speed

TINY = '''
import torch
from torch import nn

class Tiny(nn.Module):
    def __init__(self, attn_implementation="sdpa"):
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]

def build_model(attn_implementation="sdpa"):
    return Tiny(attn_implementation).eval()

def example_inputs():
    return (torch.randn(1, 8, 32),)
'''


@pytest.mark.slow
def test_speed_benchmark_times_every_contender(tmp_path: Path) -> None:
    model = tmp_path / "tiny.py"
    model.write_text(TINY)
    work = speed.Workload("tiny", str(model), real_weights=True)
    found = speed.measure(work, repeats=1)
    assert set(found) == {"floor", "mhaudit", "FlopCounterMode", "MemTracker", "fvcore"}
    assert all(r["wall_s"] > 0 and r["peak_rss_bytes"] > 0 for r in found.values())
    lines = speed.table(work, found)
    assert lines[0] == f"tiny ({model})"
    assert "mhaudit/fvcore: work" in lines[-1] and "mhaudit/FlopCounterMode" in lines[-1]
