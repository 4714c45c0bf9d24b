"""Shared pytest configuration: golden-file regeneration and test paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--regen-golden", action="store_true", default=False,
        help="Rewrite the golden files under tests/golden/ from the current output.",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run (the whole tree, no ``-m``) keeps a stable sample of the slow tests
    and skips the others with a reason that names the command that runs them."""
    from slowset import SKIP_REASON, default_run, sampled

    from_testpaths = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if not default_run(config.option.markexpr, from_testpaths,
                       os.environ.get("MHAUDIT_SLOW", "")):
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if item.get_closest_marker("slow") is not None and not sampled(item.nodeid):
            item.add_marker(skip)


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    """True when golden files should be rewritten instead of compared."""
    return bool(request.config.getoption("--regen-golden"))


def _load_textbook_example() -> None:
    """``import examples_textbook``: the bundled textbook example, for source-line checks."""
    import importlib.util

    path = TESTS.parent / "examples" / "textbook_mha.py"
    spec = importlib.util.spec_from_file_location("examples_textbook", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["examples_textbook"] = module
    spec.loader.exec_module(module)


_load_textbook_example()
