"""``whatif --gpus``: the plan search over a GPU count on a tiny Llama, in each format."""

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
def test_json_searches_both_phases_over_the_gpus(llama: str, gpus: int) -> None:
    data = json.loads(_run(llama, "--gpus", str(gpus), "--train", "--decode",
                           "--format", "json"))
    assert data["gpus"] == gpus and set(data["phases"]) == {"train", "decode"}
    for phase, plans in data["phases"].items():
        for p in plans:
            assert p["plan"]["world_size"] == gpus
            held = p["per_device_bytes"]
            tensors = ("params", "grads", "optimizer_states", "activations", "kv_cache",
                       "temporaries")
            pipe = p["pipeline"]
            if pipe is None:
                assert held["tensor_peak"] == sum(held[k] for k in tensors)
            else:  # the worst stage's peak, at the moment it is reached
                assert held["tensor_peak"] == pipe["stages"][pipe["worst_stage"]]["peak_bytes"]
            beyond = {t["name"]: t["bytes"] for t in p["memory_terms"]}
            assert held["peak"] == held["tensor_peak"] + sum(beyond.values())
            assert all(held[k] == v for k, v in beyond.items())
            # a plan is offered exactly when it fits and no rule refuses it
            assert (p["dropped"] is None) is p["fits"]
            assert p["fits"] is (held["peak"] <= data["memory_bytes"]
                                 and not any(" error on " in n for n in p["notes"]))
        offered = [p for p in plans if p["dropped"] is None]
        per_sample = [p["step_time_s"] / (p["plan"]["fsdp"] * p["plan"]["dp"]) for p in offered]
        # offered first, most throughput first (step time per sample across the GPUs); the
        # first is the one best plan
        assert plans[:len(offered)] == offered and per_sample == sorted(per_sample)
        assert [p["best"] for p in plans] == [True] + [False] * (len(plans) - 1)
        # the search covers the tp × fsdp splits inside a node, among the other axes
        plain = {p["plan"]["tp"]: p for p in plans if p["plan"]["dp"] == p["plan"]["cp"]
                 == p["plan"]["pp"] == 1 and not p["plan"]["sp"] and p["checkpointing"] == "none"}
        assert sorted(plain) == [t for t in (1, 2, 4, 8) if t <= gpus]
        assert all(p["plan"]["fsdp"] == gpus // t for t, p in plain.items())
        if phase == "train":
            assert {p["checkpointing"] for p in plans} == {"none", "selective", "layers"}
            assert all(p["per_device_bytes"]["kv_cache"] == 0 for p in plans)
            # t = 1: FSDP alone, no TP traffic
            assert plain[1]["comm_bytes_per_step"]["all_reduce"] == 0
            assert plain[2]["comm_bytes_per_step"]["all_reduce"] > 0
        else:
            kv = [plain[t]["per_device_bytes"]["kv_cache"] for t in (1, 2, 4, 8)]
            # 4 KV heads: halved by t = 2 and 4, then one whole head replicated per rank
            assert kv[1] * 2 == kv[0] and kv[2] * 2 == kv[1] and kv[3] == kv[2]


def test_table_marks_the_best_plan_within_100_columns(llama: str) -> None:
    text = _run(llama, "--gpus", "16", "--sp", "--decode")
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "Decode step per device (analytic):" in text
    rows = [line.split() for line in lines if line.lstrip().startswith(("best", "tp="))]
    assert rows[0][0] == "best" and all(r[0] != "best" for r in rows[1:])
    assert "plans tried" in text and "KV" in text


KEPT = ("plan", "peak", "step", "fit")


@pytest.mark.parametrize("width", [80, 100])
def test_table_fits_columns_and_keeps_the_key_columns(llama: str, width: int) -> None:
    done = CliRunner().invoke(cli, ["whatif", llama, "--gpus", "64", "--sp", "--train",
                                    "--decode"], env={"COLUMNS": str(width)})
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= width, done.stdout
    for title in ("Training step", "Decode step"):
        head = lines[lines.index(f"{title} per device (analytic):") + 1].split()
        assert all(column in head for column in KEPT), (width, head)


def test_a_narrow_terminal_gets_one_record_per_plan(llama: str) -> None:
    done = CliRunner().invoke(cli, ["whatif", llama, "--gpus", "8", "--train"],
                              env={"COLUMNS": "60"})
    assert done.exit_code == 0, done.output
    assert max(len(line) for line in done.stdout.splitlines()) <= 60, done.stdout


def test_markdown_has_one_table_per_phase(llama: str) -> None:
    text = _run(llama, "--gpus", "8", "--train", "--format", "markdown")
    assert "### Training step per device" in text and "| best | `" in text
    assert "Decode" not in text


@pytest.mark.parametrize(("args", "message"), [
    (["--gpus", "8", "--format", "html"], "'html'"),
    (["--format", "markdown"], "the head-layout sweep writes table, json"),
    (["--gpus", "8", "--plot", "x.png"], "--plot"),
    (["--sp"], "--gpus was not given"),
    (["--reserve", "cuda_context=1GB"], "--gpus was not given"),
    (["--gpus", "8", "--reserve", "context=1GB"], "unknown memory term"),
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


def test_reserve_sets_a_term_of_every_plan(llama: str) -> None:
    data = json.loads(_run(llama, "--gpus", "8", "--reserve", "cuda_context=1GB",
                           "--format", "json"))
    for p in data["phases"]["train"]:
        terms = {t["name"]: t for t in p["memory_terms"]}
        assert terms["cuda_context"]["bytes"] == 10**9  # 1 GB, decimal
        assert terms["cuda_context"]["source"] == "set by --reserve"
        assert p["per_device_bytes"]["cuda_context"] == 10**9
