"""``--parallel`` on the command line: the binding JSON in each phase, the table line, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mhaudit.cli import main as cli

MODEL = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d=64, h=8, h_kv=2):
        super().__init__()
        self.h, self.h_kv, self.d_k = h, h_kv, d // h
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, h_kv * self.d_k, bias=False)
        self.v = nn.Linear(d, h_kv * self.d_k, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.h, self.d_k).transpose(1, 2)  # (B, h, n, d_k)
        k = self.k(x).view(b, n, self.h_kv, self.d_k).transpose(1, 2)  # (B, h_kv, n, d_k)
        v = self.v(x).view(b, n, self.h_kv, self.d_k).transpose(1, 2)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                       enable_gqa=True)
        return self.o(y.transpose(1, 2).reshape(b, n, d))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


def build_model():
    return Model()


def example_inputs():
    return (torch.zeros(2, 16, 64),)
'''

BINDING = {"plan", "per_device_bytes", "comm_bytes_per_step", "step_time_s", "fits",
           "max_batch_size", "source"}


@pytest.fixture()
def model_file(tmp_path: Path) -> str:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    return str(path)


def test_each_phase_with_a_plan_carries_the_binding_section(model_file: str) -> None:
    done = CliRunner().invoke(cli, ["report", model_file, "--train", "--decode",
                                    "--parallel", "tp=2,sp,fsdp=2", "--format", "json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    for phase in ("training", "decode"):
        section = report[phase]["parallel"]
        assert set(section) >= BINDING
        assert section["plan"] == {"tp": 2, "sp": True, "fsdp": 2, "pp": 1, "world_size": 4,
                                       "ep": 1, "cp": 1, "dp": 1, "pp_schedule": "1f1b",
                                       "microbatches": 1}
        assert set(section["per_device_bytes"]) >= {
            "params", "grads", "optimizer_states", "activations", "kv_cache", "temporaries",
            "peak"}
        assert set(section["comm_bytes_per_step"]) >= {
            "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send_recv"}
        assert section["source"] in ("torch.distributed", "analytic")
    # a rank holds a quarter of the weights' bytes at most, a tensor-parallel half of them
    assert report["training"]["parallel"]["per_device_bytes"]["params"] < \
        report["training"]["breakdown_bytes"]["params"]


def test_the_table_has_a_line_per_phase_with_a_plan(model_file: str) -> None:
    done = CliRunner().invoke(cli, ["report", model_file, "--train", "--parallel", "tp=2"])
    assert done.exit_code == 0, done.output
    assert "training step per device, tp=2,fsdp=1,pp=1 (2 GPUs" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--parallel", "tp=2"], "training or the decode step"),
    (["--train", "--parallel", "tp=zero"], "tp"),
    (["--train", "--parallel", "tp=2", "--tensor-parallel", "4"], "disagrees"),
])
def test_bad_plans_are_configuration_errors(model_file: str, args: list[str],
                                            message: str) -> None:
    done = CliRunner().invoke(cli, ["report", model_file, *args])
    assert done.exit_code == 2, done.output
    assert message in done.output
