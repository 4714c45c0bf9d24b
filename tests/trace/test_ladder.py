"""The tracer ladder: the fake-tensor record, export, strict export, the record reading
data-dependent values as 0, a real forward."""

from __future__ import annotations

import pytest
import torch
from fixtures.zoo import POSITIVE_CASES
from fixtures.zoo_legacy import DataDependent, LegacyEinsum
from fixtures.zoo_patterns import PATTERNS

from mhaudit.detect.blocks import detect
from mhaudit.detect.params import count
from mhaudit.errors import TraceError
from mhaudit.load.target import normalize_inputs
from mhaudit.trace.export import trace
from mhaudit.trace.guards import move_stray_tensors, plain_autocast, stray_tensors
from mhaudit.trace.recorder import record

_SAMPLE = [*POSITIVE_CASES, *PATTERNS]


def _summary(layouts: list) -> list[tuple[object, ...]]:
    return [(lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.v_head_dim, lay.kind,
             count(lay).total) for lay in layouts]


@pytest.mark.parametrize("case", _SAMPLE, ids=[c.id for c in _SAMPLE])
def test_fake_recorder_reads_what_export_reads(case: object) -> None:
    with torch.device("meta"):
        model = case.build().eval()  # type: ignore[attr-defined]
        args, kwargs = normalize_inputs(case.inputs())  # type: ignore[attr-defined]
    exported = detect(trace(model, args, kwargs), model)
    recorded = record(model, args, kwargs, fake=True)
    assert recorded.method == "dispatch-fake"
    assert _summary(detect(recorded, model)) == _summary(exported)
    # Module paths come from the hook stack: block names match export's.
    assert [lay.name for lay in detect(recorded, model)] == [lay.name for lay in exported]


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_legacy_constructors_and_autocast_trace_exactly(device: str) -> None:
    with torch.device(device):
        model = LegacyEinsum().eval()
        x = torch.randn(2, 6, 32)
    traced = trace(model, (x,), {})
    (layout,) = detect(traced, model)
    # h = 4, d_k = 8 from the (32, 4, 8) weights; 4 weights of 32·4·8 = 4,096 in all.
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.v_head_dim,
            layout.kind, bool(layout.causal), count(layout).total) == (
        4, 4, 8, 8, "self", False, 4 * 32 * 4 * 8)
    assert traced.method == "dispatch-record"


def test_stray_cpu_parameters_move_to_meta() -> None:
    with torch.device("meta"):
        model = LegacyEinsum()
        x = torch.randn(2, 6, 32)
    assert sorted(stray_tensors(model, (x,))) == ["wk", "wo", "wq", "wv"]
    assert move_stray_tensors(model, (x,)) == ["wk", "wo", "wq", "wv"]
    assert {p.device.type for p in model.parameters()} == {"meta"}
    cpu = LegacyEinsum()
    assert stray_tensors(cpu, (torch.randn(2, 6, 32),)) == []


def test_autocast_on_meta_runs_as_plain_code() -> None:
    x = torch.randn(2, 3, device="meta")
    with pytest.raises(RuntimeError), torch.autocast("meta"):
        pass
    with plain_autocast(), torch.autocast(x.device.type):
        y = x * 2
    assert y.device.type == "meta"
    with torch.autocast("cpu", enabled=False):  # restored afterwards
        pass


def test_data_dependent_branch_traces_on_cpu_through_a_real_forward() -> None:
    model = DataDependent().eval()
    traced = trace(model, (torch.randn(2, 6, 32),), {})
    (layout,) = detect(traced, model)
    assert traced.method in ("torch.export", "torch.export-strict", "dispatch-real")
    assert (layout.num_heads, layout.head_dim, count(layout).total) == (4, 8, 4 * (32 * 32 + 32))


def test_every_rung_failing_names_each_cause() -> None:
    class Broken(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("no forward here")

    with pytest.raises(TraceError) as info:
        trace(Broken(), (torch.randn(2, 3),), {})
    # The line names the rung that got furthest; --verbose's detail names every rung.
    assert "record got furthest and raised ValueError: no forward here" in str(
        info.value)
    for rung in ("torch.export:", "torch.export-strict:", "dispatch-fake:", "dispatch-real:"):
        assert rung in info.value.detail


def test_data_dependent_branch_on_meta_reads_the_value_as_zero() -> None:
    with torch.device("meta"):
        model = DataDependent().eval()
        x = torch.randn(2, 6, 32)
    traced = trace(model, (x,), {})
    (layout,) = detect(traced, model)
    assert traced.method == "dispatch-fake (1 data-dependent value(s) read as 0)"
    assert (layout.num_heads, layout.head_dim, count(layout).total) == (4, 8, 4 * (32 * 32 + 32))


def test_an_error_of_the_model_code_builds_no_cpu_twin() -> None:
    import contextlib

    from mhaudit.trace.real import CpuTwin

    class NoField(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(3, 3)
            self.config = object()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.proj(x) * self.config.num_layers  # type: ignore[attr-defined]

    built: list[bool] = []

    @contextlib.contextmanager
    def build():  # type: ignore[no-untyped-def]
        built.append(True)
        yield NoField(), (torch.randn(2, 3),), {}

    with torch.device("meta"):
        model = NoField()
        x = torch.randn(2, 3)
    with pytest.raises(TraceError) as info:
        trace(model, (x,), {}, twin=CpuTwin(build, 48))
    # The record and export raise the same AttributeError: the real forward is not tried,
    # and the model is not built again on CPU for it; the message still names the rung.
    assert built == []
    assert "dispatch-real: NotRun: the record and export both raised" in info.value.detail
    assert "dispatch-fake: AttributeError" in info.value.detail
    assert "record got furthest and raised AttributeError" in str(info.value)


def test_an_error_about_meta_tensors_still_tries_the_real_forward() -> None:
    from mhaudit.trace.export import _raised_by_the_model

    # The same error on both rungs, but about the tensors they ran on: a real CPU forward
    # may well run, so the ladder still tries it.
    error = TypeError("can't convert meta device type tensor to numpy")
    assert not _raised_by_the_model([("dispatch-record", error), ("torch.export", error)])
    same = AttributeError("'Config' object has no attribute 'num_layers'")
    assert _raised_by_the_model([("dispatch-record", same), ("torch.export", same)])
    other = AttributeError("'Config' object has no attribute 'depth'")
    assert not _raised_by_the_model([("dispatch-record", same), ("torch.export", other)])
