"""``whatif --gpus``: every tp × fsdp split of a GPU count on a tiny Llama, in each format."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from mhaudit.cli import main as cli

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

MODEL = '''
import torch
import transformers


def build_model():
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=520, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=4,
                                   vocab_size=1003)
    return transformers.LlamaForCausalLM(cfg)


def example_inputs():
    return (torch.zeros((2, 64), dtype=torch.long),)
'''


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("llama")) / "llama.py"
    path.write_text(MODEL)
    return str(path)


def _run(*args: str) -> str:
    done = CliRunner().invoke(cli, ["whatif", *args])
    assert done.exit_code == 0, done.output
    return done.stdout


@pytest.mark.parametrize("gpus", [8, 16])
def test_json_sweeps_both_phases_over_the_gpus(llama: str, gpus: int) -> None:
    data = json.loads(_run(llama, "--gpus", str(gpus), "--train", "--decode",
                           "--format", "json"))
    assert data["gpus"] == gpus and set(data["phases"]) == {"train", "decode"}
    for phase, plans in data["phases"].items():
        splits = [(p["plan"]["tp"], p["plan"]["fsdp"]) for p in plans]
        assert splits == [(t, gpus // t) for t in (1, 2, 4, 8, 16) if t <= gpus]
        for p in plans:
            assert p["plan"]["world_size"] == gpus
            held = p["per_device_bytes"]
            tensors = ("params", "grads", "optimizer_states", "activations", "kv_cache",
                       "temporaries")
            assert held["tensor_peak"] == sum(held[k] for k in tensors)
            beyond = {t["name"]: t["bytes"] for t in p["memory_terms"]}
            assert held["peak"] == held["tensor_peak"] + sum(beyond.values())
            assert all(held[k] == v for k, v in beyond.items())
            # h = 8, h_kv = 4: t = 16 leaves half a query head per GPU (MHA008), no fit
            t = p["plan"]["tp"]
            shards = 8 % t == 0 and (4 % t == 0 or t % 4 == 0)
            assert p["fits"] is (held["peak"] <= data["memory_bytes"] and shards)
            assert shards or any(n.startswith("MHA008") for n in p["notes"])
        if phase == "train":
            assert all(p["per_device_bytes"]["kv_cache"] == 0 for p in plans)
            # t = 1: FSDP alone, no TP traffic; each step of t doubles the TP share of a rank
            assert plans[0]["comm_bytes_per_step"]["all_reduce"] == 0
            assert plans[1]["comm_bytes_per_step"]["all_reduce"] > 0
        else:
            kv = [p["per_device_bytes"]["kv_cache"] for p in plans]
            # 4 KV heads: halved by t = 2 and 4, then one whole head replicated per rank
            assert kv[1] * 2 == kv[0] and kv[2] * 2 == kv[1] and kv[3] == kv[2]


def test_table_marks_fits_and_batch_within_100_columns(llama: str) -> None:
    text = _run(llama, "--gpus", "16", "--sp", "--decode")
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "Decode step per device (analytic):" in text
    rows = [line.split() for line in lines if line.startswith("tp=")]
    assert [r[0] for r in rows] == ["tp=1,fsdp=16", "tp=2,sp,fsdp=8", "tp=4,sp,fsdp=4",
                                    "tp=8,sp,fsdp=2", "tp=16,sp,fsdp=1"]
    assert "KV" in text and "yes" in rows[0]


KEPT = {"train": ("plan", "peak", "fit", "batch"), "decode": ("plan", "peak", "fit", "batch")}


@pytest.mark.parametrize("width", [60, 80, 100])
def test_table_fits_columns_and_keeps_the_key_columns(llama: str, width: int) -> None:
    done = CliRunner().invoke(cli, ["whatif", llama, "--gpus", "64", "--sp", "--train",
                                    "--decode"], env={"COLUMNS": str(width)})
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= width, done.stdout
    for phase, title in (("train", "Training step"), ("decode", "Decode step")):
        head = lines[lines.index(f"{title} per device (analytic):") + 1].split()
        assert all(column in head for column in KEPT[phase]), (width, head)
    if width == 100:  # every column where they all fit
        assert "grads" in done.stdout and "temps" in done.stdout


def test_markdown_has_one_table_per_phase(llama: str) -> None:
    text = _run(llama, "--gpus", "8", "--train", "--format", "markdown")
    assert "### Training step per device" in text and "| `tp=8,fsdp=1` |" in text
    assert "Decode" not in text


@pytest.mark.parametrize(("args", "message"), [
    (["--gpus", "8", "--format", "html"], "'html'"),
    (["--format", "markdown"], "the head-layout sweep writes table, json"),
    (["--gpus", "8", "--plot", "x.png"], "--plot"),
    (["--sp"], "--gpus was not given"),
    (["--gpus", "0"], "0"),
])
def test_bad_sweeps_are_configuration_errors(llama: str, args: list[str], message: str
                                             ) -> None:
    done = CliRunner().invoke(cli, ["whatif", llama, *args])
    assert done.exit_code == 2, done.output
    assert message in done.output


def test_gpus_needs_a_model() -> None:
    done = CliRunner().invoke(cli, ["whatif", "--gpus", "8"])
    assert done.exit_code == 2 and "no model was given" in done.output
