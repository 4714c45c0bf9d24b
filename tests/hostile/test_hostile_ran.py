"""A model that did not run is not a pass: generators, None, weightless forwards are exit 3."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_helpers import assert_one_error, invoke, model_file

import mhaudit
from mhaudit.errors import TraceError


def _forward(tmp_path: Path, body: str, header: str = "") -> Path:
    lines = "\n".join(f"        {line}" for line in body.splitlines())
    return model_file(tmp_path, f"{header}\nclass Odd(Attention):\n"
                      f"    def forward(self, x):\n{lines}\n\n"
                      "def build_model():\n    return Odd()\n")


CASES = [
    ("yield self.o(self.q(x))", "generator"),
    ("return None", "returned no tensors"),
    ("return 'done'", "returned no tensors"),
    ("return {'loss': 0.0}", "returned no tensors"),
    ("return x * 2", "never read any of the model's 4,224 parameters"),
    ("return x.new_zeros(x.shape)", "never read"),
]


@pytest.mark.parametrize(("body", "needle"), CASES)
def test_report_refuses_a_forward_that_did_not_run(tmp_path: Path, body: str,
                                                   needle: str) -> None:
    run = invoke("report", _forward(tmp_path, body))
    assert_one_error(run, 3, needle)
    assert run.stdout == ""


@pytest.mark.parametrize(("body", "needle"), CASES[:3])
def test_check_never_passes_a_forward_that_did_not_run(tmp_path: Path, budget: Path,
                                                       body: str, needle: str) -> None:
    assert_one_error(invoke("check", _forward(tmp_path, body), "--budget", budget), 3, needle)


def test_async_forward_is_refused(tmp_path: Path) -> None:
    model = model_file(tmp_path, "class Odd(Attention):\n    async def forward(self, x):\n"
                       "        return self.o(x)\n\ndef build_model():\n    return Odd()\n")
    assert_one_error(invoke("report", model), 3, "coroutine")


def test_library_refuses_a_generator_forward(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="generator"):
        mhaudit.audit_target(str(_forward(tmp_path, "yield self.o(self.q(x))")))


def test_a_module_without_parameters_still_audits(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import torch.nn.functional as F\n\n"
                       "class Bare(nn.Module):\n    def forward(self, x):\n"
                       "        return F.scaled_dot_product_attention(x, x, x)\n\n"
                       "def build_model():\n    return Bare()\n\n"
                       "def example_inputs():\n    return (torch.zeros(1, 2, 8, 16),)\n")
    run = invoke("report", model)
    assert run.code == 0, run.stderr
