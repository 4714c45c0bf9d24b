"""Source locations: the class line of user attention modules, else the line building the model."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from torch import nn

from mhaudit.data import SourceLocation
from mhaudit.detect.locate import block_locations, class_location, is_library, model_location

MODEL = """import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2)


def make_small():
    return Block()


model = Block()
"""


@pytest.fixture
def model_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "pkg" / "model.py"
    path.parent.mkdir()
    path.write_text(MODEL, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return path


def test_model_line_follows_the_target(model_file: Path) -> None:
    assert model_location("pkg/model.py:make_small") == SourceLocation("pkg/model.py", 11,
                                                                        "make_small")
    assert model_location("pkg/model.py") == SourceLocation("pkg/model.py", 15, "model")
    assert model_location("pkg/model.py:missing") == SourceLocation("pkg/model.py", 1, "missing")


def test_config_targets_point_at_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}), encoding="utf-8")
    assert model_location("config.json") == SourceLocation("config.json", 1, "config.json")
    assert model_location("no_such_module_here:build") is None


def test_module_targets_resolve_to_their_file() -> None:
    where = model_location("mhaudit.testing:assert_within_budget")
    assert where is not None and where.path.endswith("mhaudit/testing.py")
    assert where.line == inspect.getsourcelines(
        __import__("mhaudit.testing", fromlist=["x"]).assert_within_budget)[1]


class Local(nn.Module):
    """A user-defined module, defined in this test file inside the working tree."""


def test_user_classes_in_the_tree_and_library_classes_outside() -> None:
    root = Path(__file__).resolve().parents[2]
    here = class_location(Local, root)
    assert here == SourceLocation("tests/detect/test_locate.py", inspect.getsourcelines(Local)[1],
                                  "Local")
    assert class_location(nn.MultiheadAttention, root) is None  # torch's own class
    assert is_library(inspect.getsourcefile(nn.Linear) or "")
    assert class_location(Local, root / "mhaudit") is None  # outside the given tree


def test_block_locations_fall_back_per_block() -> None:
    root = Path(__file__).resolve().parents[2]
    model = nn.Sequential(Local(), nn.MultiheadAttention(8, 2))
    fallback = SourceLocation("model.py", 3, "build_model")
    found = block_locations(model, ["0", "1", "missing"], fallback, root)
    assert found[0] is not None and found[0].symbol == "Local"
    assert found[1:] == [fallback, fallback]
