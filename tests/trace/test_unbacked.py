"""Data-dependent sizes: read at their upper bound, and never a bug of mhaudit (exit 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, ShapeEnv

from mhaudit.trace.graphs import concrete
from tests.hostile.hostile_helpers import assert_one_error, invoke, model_file


def test_an_unbacked_size_reads_as_its_upper_bound() -> None:
    env = ShapeEnv()
    size = env.create_unbacked_symint()
    torch._check(size <= 96)  # as nonzero() bounds its count by its input's numel
    torch._check(size >= 0)
    assert concrete(size) == 96
    assert concrete(7) == 7
    assert concrete(env.create_unbacked_symint()) == 0  # no finite bound: unknown


def test_a_data_dependent_guard_is_a_trace_error(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import mhaudit.api

    def guarded(*args: object, **kwargs: object) -> object:
        raise GuardOnDataDependentSymNode("Could not guard on data-dependent expression u0 > 3")

    monkeypatch.setattr(mhaudit.api, "detect", guarded)
    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    assert_one_error(invoke("report", model), 3, "a shape depends on the data")
