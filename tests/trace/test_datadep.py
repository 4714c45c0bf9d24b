"""Data-dependent shapes end in an answer: a real forward of the CPU build, else stated bounds."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fixtures import zoo_datadep
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from mhaudit.api import audit, audit_target
from mhaudit.data import Report
from mhaudit.trace import real

_FILE = '''
import torch
from fixtures.zoo_datadep import {name}, inputs_with_mask

def build_model():
    return {name}()

def example_inputs():
    {inputs}
'''

_MASKED = "return inputs_with_mask()"
_PLAIN = "return (torch.randn(2, 12, 32),)"
CASES = [("ItemLength", _MASKED), ("NonzeroRouted", _PLAIN), ("GuardedLength", _MASKED)]


def _inputs(body: str) -> tuple[Any, ...]:
    if body == _MASKED:
        return zoo_datadep.inputs_with_mask()
    return (torch.randn(2, 12, 32),)


def _model_file(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name.lower()}.py"
    path.write_text(_FILE.format(name=name, inputs=body))
    return path


def _counted(build: Callable[[], nn.Module], body: str) -> int:
    """FlopCounterMode's count on a real CPU forward, built as the audit's CPU build is."""
    def cpu_flash(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return int(sdpa_flop_count(query, key, value))

    torch.manual_seed(0)
    model = build().eval()
    args = _inputs(body)
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    counter = FlopCounterMode(display=False, custom_mapping={op: cpu_flash})
    with counter:  # with grad on, nn.MultiheadAttention takes its composite path
        model(*args)
    return int(counter.get_total_flops())


def _matmul_conv(report: Report) -> int:
    families = report.totals.flops_by_family
    return families["matmul"] + families["conv"]


@pytest.mark.parametrize(("name", "body"), CASES, ids=[c[0] for c in CASES])
def test_a_meta_model_file_is_answered_by_a_real_forward_of_its_cpu_build(
        tmp_path: Path, name: str, body: str) -> None:
    report = audit_target(str(_model_file(tmp_path, name, body)))
    dependence = report.coverage.data_dependent
    assert report.model.trace_method == "dispatch-real"
    assert dependence is not None and dependence.rung == "dispatch-real" and dependence.exact
    assert dependence.real_forward is not None and dependence.real_forward.ran
    assert dependence.real_forward.weights_bytes <= dependence.real_forward.limit_bytes
    # the record met a value read from the data: the real forward answered next
    assert [rung for rung, _ in dependence.causes] == ["dispatch-record"]
    # every figure at the given size: the FLOPs of the real forward, op for op
    assert _matmul_conv(report) == _counted(getattr(zoo_datadep, name), body)
    assert [(b.layout.num_heads, b.layout.head_dim) for b in report.blocks] == [(4, 8)]
    assert report.to_dict()["coverage"]["data_dependent"]["answered_by"] == "dispatch-real"


def test_routed_tokens_are_the_real_routing(tmp_path: Path) -> None:
    report = audit_target(str(_model_file(tmp_path, "NonzeroRouted", _PLAIN)))
    # 24 tokens, each through exactly one expert of 2·(32·64 + 64·32) FLOPs per token
    experts = 24 * 2 * (32 * 64 + 64 * 32)
    attention = 2 * 24 * 32 * 32 * 4 + 2 * 2 * 4 * 12 * 12 * 8 * 2  # projections, QKᵀ + PV
    router = 2 * 24 * 32 * 4
    assert _matmul_conv(report) == experts + attention + router


def test_a_model_too_big_for_the_limit_is_bounded_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real, "REAL_FORWARD_MAX_BYTES", 1024)
    report = audit_target(str(_model_file(tmp_path, "NonzeroRouted", _PLAIN)))
    dependence = report.coverage.data_dependent
    assert dependence is not None and dependence.rung.startswith("dispatch-fake")
    assert dependence.real_forward is not None and not dependence.real_forward.ran
    assert "exceed the real-forward limit (1,024 B)" in dependence.real_forward.reason
    assert not dependence.exact
    (bound,) = dependence.bounds
    assert re.fullmatch(r"\d+ aten::nonzero call\(s\) at their upper bound: as many index "
                        r"rows as its input has elements", bound)
    # an upper bound: every expert is charged every token
    assert _matmul_conv(report) >= _counted(zoo_datadep.NonzeroRouted, _PLAIN)
    assert re.fullmatch(r"dispatch-fake \(\d+ data-dependent size\(s\) at their upper bound\)",
                        report.model.trace_method)


@pytest.mark.parametrize(("name", "body"), CASES[1:], ids=[c[0] for c in CASES[1:]])
def test_a_meta_model_without_its_constructor_reads_sizes_at_stated_bounds(
        name: str, body: str) -> None:
    with torch.device("meta"):
        model = getattr(zoo_datadep, name)().eval()
        args = _inputs(body)
    report = audit(model, args)
    dependence = report.coverage.data_dependent
    assert dependence is not None and not dependence.exact
    assert dependence.real_forward is not None and not dependence.real_forward.ran
    assert "does not know its constructor" in dependence.real_forward.reason
    assert any("aten::nonzero" in bound for bound in dependence.bounds)
    assert _matmul_conv(report) >= _counted(getattr(zoo_datadep, name), body)


def test_a_cpu_model_runs_its_own_forward() -> None:
    torch.manual_seed(0)
    model = zoo_datadep.GuardedLength().eval()
    report = audit(model, zoo_datadep.inputs_with_mask())
    dependence = report.coverage.data_dependent
    assert dependence is not None and dependence.real_forward is not None
    assert dependence.real_forward.reason.startswith("the model holds real weights")
    assert _matmul_conv(report) == _counted(zoo_datadep.GuardedLength, _MASKED)
