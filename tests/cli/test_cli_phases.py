"""``--train`` and ``--decode`` on ``report`` and ``check``: sections, lines and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mhaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]
LLAMA = str(ROOT / "examples" / "llama_gqa.py")


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.slow
def test_json_has_the_binding_phase_fields() -> None:
    code, out, err = _run("report", LLAMA, "--train", "--decode", "--context", "2048",
                          "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    training, decode = data["training"], data["decode"]
    for key in ("peak_bytes", "breakdown_bytes", "flops", "blocks", "fits", "max_batch_size"):
        assert key in training
    assert set(training["breakdown_bytes"]) >= {"params", "grads", "optimizer_states",
                                                 "activations", "temporaries"}
    assert sum(training["breakdown_bytes"].values()) == training["peak_bytes"]
    assert [b["name"] for b in training["blocks"]] == [b["name"] for b in data["blocks"]]
    assert set(training["blocks"][0]) == {"name", "saved_bytes", "scores_saved_bytes"}
    for key in ("context", "batch_size", "flops_per_step", "bytes_per_step", "time_per_step_s",
                "tokens_per_s", "bound", "kv_cache_bytes", "blocks", "fits"):
        assert key in decode
    assert decode["context"] == 2048
    # 2 layers · 2 KV heads · (32 + 32) · 2 B per token at 2048 tokens, batch 1
    assert decode["kv_cache_bytes"] == 2 * 2 * 64 * 2 * 2048
    assert set(decode["blocks"][0]) == {"name", "flops", "kv_read_bytes", "time_s"}


@pytest.mark.slow
def test_table_has_one_line_per_phase() -> None:
    code, out, err = _run("report", LLAMA, "--train", "--decode", "--optimizer", "sgd",
                          "--precision", "bf16", "--checkpointing", "layers")
    assert code == 0, err
    assert "Phases:" in out
    assert "prefill forward:" in out and "decode step:" in out
    assert "training step (sgd, bf16, checkpointing layers" in out


def test_bad_phase_options_exit_2() -> None:
    code, _, err = _run("report", LLAMA, "--decode", "--context", "-1")
    assert code == 2
    code, _, err = _run("report", LLAMA, "--train", "--optimizer", "lion")
    assert code == 2 and "lion" in err


@pytest.mark.slow
def test_check_runs_the_phase_a_budget_limits(tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    budget.write_text('[budget]\nmax_train_peak_bytes = "1KiB"\nmax_decode_step_ms = 1000\n')
    code, out, err = _run("check", LLAMA, "--budget", str(budget), "--format", "json")
    assert code == 1, err
    data = json.loads(out)
    assert "training" in data and "decode" in data
    results = {r["metric"]: r for r in data["budget"]["results"]}
    assert results["train_peak_bytes"]["passed"] is False
    assert results["decode_step_ms"]["passed"] is True
