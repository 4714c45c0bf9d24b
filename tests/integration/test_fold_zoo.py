"""Folded equals unfolded on a sample of transformers architectures with per-layer settings.

The same harness as ``benchmarks/zoo.py --fold-check``: each tiny config made eight layers
deep with sliding windows narrower than the audited length, audited with a decode step
folded and with ``--no-fold``; the two reports must agree in every field but the one that
says what was folded. The sample holds the per-layer settings folding must key on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from zoo_harness.fold_worker import first_difference, run_one
from zoo_harness.sweep import run_all
from zoo_harness.worker import preload

SAMPLE = {
    "gemma3_text": "five sliding layers to one global, rope chosen by layer type",
    "gpt_neo": "global and local layers alternating",
    "cohere2": "sliding layers with a global one, read from layer_types by index",
    "gpt_oss": "sliding and full layers, routed experts",
    "deepseek_v3": "a dense first layer before routed-expert layers",
    "llama": "identical layers: one representative",
}


@pytest.mark.parametrize("name", list(SAMPLE), ids=list(SAMPLE))
def test_folded_and_unfolded_reports_are_equal(name: str) -> None:
    preload()
    (result,) = run_all([name], run_one, jobs=1, timeout_s=240)
    assert result.status == "equal", f"{result.status}: {result.reason}"


def test_the_comparison_names_the_first_field_that_differs() -> None:
    folded = {"folded_layers": [1], "blocks": [{"window": 8}, {"window": 8}]}
    unfolded = {"blocks": [{"window": 8}, {"window": None}]}
    assert first_difference(folded, unfolded) == ".blocks[1].window: 8 folded, None unfolded"
    assert first_difference(folded, {"blocks": folded["blocks"]}) is None
