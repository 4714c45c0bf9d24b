"""``benchmarks/training.py`` runs end to end on a toy model, one repetition."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]

TOY = '''
import torch, transformers
def build_model():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, use_cache=False))
def example_inputs():
    ids = torch.zeros(1, 16, dtype=torch.long)
    return {"input_ids": ids, "labels": ids}
'''


@pytest.mark.slow
def test_the_training_benchmark_prints_each_contender_and_the_ratio(tmp_path: Path) -> None:
    model = tmp_path / "toy.py"
    model.write_text(TOY)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "training.py"),
                           "--repeats", "1", str(model)], capture_output=True, text=True,
                          check=False, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "toy.py, 1 repetitions (medians)"
    for name in ("floor (import, build on meta)", "mhaudit training audit",
                 "MemTracker fake step"):
        assert any(line.strip().startswith(name) for line in lines), done.stdout
    (ratio,) = [line for line in lines if "mhaudit / MemTracker above the floor" in line]
    assert "(goal <= 0.25)" in ratio and "+0.0" in ratio  # the two peaks agree
