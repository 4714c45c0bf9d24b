"""Fixtures every hostile test file shares: a good model file and a budget it is within."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_helpers import model_file

GOOD_BODY = "def build_model():\n    return Attention()\n"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A model file with one tiny attention layer (4,224 parameters)."""
    return model_file(tmp_path, GOOD_BODY)


@pytest.fixture
def budget(tmp_path: Path) -> Path:
    """A budget the model is within."""
    path = tmp_path / "budget.toml"
    path.write_text('[budget]\nmax_params = "1M"\n', encoding="utf-8")
    return path
