"""A fixed sample of the fresh corpus, each entry audited on meta and checked against its truth.

Each entry runs through the same harness as ``benchmarks/corpus.py``: the module built from
an installed package, ``mhaudit.audit`` on meta in a forked process, the constructor's
heads, KV heads, head dims, widths, kind and projection parameters, the module's parameter
count and FlopCounterMode over a real CPU forward. Exact means every check holds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from corpus_harness.check import block_problems, compare
from corpus_harness.entry import Entry, mha
from corpus_harness.registry import ENTRIES
from zoo_harness.sweep import run_all

FAST = ["nn_mha_kdim_vdim", "xt_gqa_small_heads", "df_flux_single_block"]
SLOW = ["df_stable_audio_gqa_block", "pp_perceiver_io", "hf_qwen3_attention_wide_heads",
        "df_attention_added_kv"]


def _check(name: str) -> None:
    pytest.importorskip({"x-transformers": "x_transformers", "perceiver-pytorch":
                         "perceiver_pytorch"}.get(ENTRIES[name].package, ENTRIES[name].package))
    from corpus import run_named

    (result,) = run_all([name], run_named, jobs=1, timeout_s=240)
    assert result.status == "exact", f"{result.status}: {result.reason}"


@pytest.mark.parametrize("name", FAST)
def test_fast_sample_is_exact(name: str) -> None:
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_slow_sample_is_exact(name: str) -> None:
    _check(name)


def test_every_entry_declares_a_block_and_a_known_kind() -> None:
    assert len(ENTRIES) >= 60
    for entry in ENTRIES.values():
        assert entry.wants, entry.name
        assert all(w.kind in ("self", "cross") and w.params > 0 for w in entry.wants)


def test_compare_names_each_figure_that_differs() -> None:
    want = mha(32, 4, 3072, kv_heads=2)
    block = {"name": "attn", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
             "v_head_dim": 8, "d_model": 32, "kind": "self", "params": {"total": 3072}}
    assert block_problems(block, want) == []
    assert block_problems({**block, "num_kv_heads": 4, "params": {"total": 4096}}, want) == [
        "kv_heads 4 (declared 2)", "params 4096 (declared 3072)"]
    entry = Entry("e", "torch", lambda: (None, (), {}), (want, want))
    report = {"blocks": [block], "model": {"params_total": 10},
              "totals": {"flops_by_family": {"matmul": 100, "conv": 0}}}
    assert compare(report, entry, 10, 100) == ["1 blocks for 2 declared"]
    assert compare(report, entry, 12, 200)[1:] == [
        "params_total 10 (module 12)", "matmul+conv FLOPs 100 (FlopCounterMode 200)"]
