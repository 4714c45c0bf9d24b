"""Third-party models whose shapes depend on the data end in an answer, never exit 3 or 4.

Switch Transformers routes tokens through ``nonzero``; Longformer pads to its window by a
length read with ``.item()``. Each is built from its tiny zoo config, audited on meta, and
answered by a real forward of its CPU build; the figures are checked by the zoo harness
(parameters, matmul + conv FLOPs against FlopCounterMode on the same seeded build).
Longformer's chunked sliding-window attention is not yet found as a block (detection).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from zoo_harness.sweep import run_all
from zoo_harness.tiny import tiny_config
from zoo_harness.worker import FLOP_TOLERANCE, preload, run_one

from mhaudit.api import audit_target

CASES = {
    "switch_transformers": "aten.nonzero in the expert routing",
    "longformer": "aten._local_scalar_dense: a padding length read with .item()",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_a_data_dependent_model_is_answered_by_a_real_forward(tmp_path: Path, name: str
                                                               ) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_config(name), default=str))
    report = audit_target(str(path), seq_len=16, batch_size=1)
    dependence = report.coverage.data_dependent
    assert report.model.trace_method == "dispatch-real"
    assert dependence is not None and dependence.exact
    assert dependence.real_forward is not None and dependence.real_forward.ran
    assert [rung for rung, _ in dependence.causes] == ["dispatch-record"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_a_data_dependent_model_is_exact_in_the_zoo_harness(name: str) -> None:
    preload()
    (result,) = run_all([name], run_one, jobs=1, timeout_s=240)
    assert result.status not in ("exit 3", "exit 4"), result.reason
    assert result.checks["params"] == result.checks["params_module"]
    flops, counted = result.checks["flops"], result.checks["flops_counter"]
    assert abs(flops - counted) <= FLOP_TOLERANCE * counted
    if name == "switch_transformers":
        assert result.status == "exact", result.reason
