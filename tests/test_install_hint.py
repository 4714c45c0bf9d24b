"""Install hints name the source the user has: the clone's root for a local install, the
package index otherwise (read from the distribution's ``direct_url.json``, PEP 610)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mhaudit import errors as install
from mhaudit.cli.main import main
from mhaudit.errors import InstallSource, install_hint, read_source

EDITABLE = json.dumps({"dir_info": {"editable": True}, "url": "file:///home/me/mhaudit"})
LOCAL = json.dumps({"dir_info": {}, "url": "file:///home/me/my%20clone"})
WHEEL = json.dumps({"archive_info": {}, "url": "https://example.org/mhaudit-0.1.0.whl"})


@pytest.mark.parametrize(("text", "expected"), [
    (EDITABLE, InstallSource("/home/me/mhaudit", True)),
    (LOCAL, InstallSource("/home/me/my clone", False)),
    (WHEEL, InstallSource(None, False)),
    (None, InstallSource(None, False)),  # from an index: pip writes no direct_url.json
    ("{not json", InstallSource(None, False)),
])
def test_the_recorded_source_is_read(text: str | None, expected: InstallSource) -> None:
    assert read_source(text) == expected


def test_hints_for_each_source() -> None:
    assert install_hint("hf", read_source(EDITABLE)) == (
        "pip install -e '.[hf]' (from the clone's root, /home/me/mhaudit)")
    assert install_hint("plot", read_source(LOCAL)) == (
        "pip install '.[plot]' (from the clone's root, /home/me/my clone)")
    assert install_hint("hf", read_source(None)) == "pip install 'mhaudit[hf]' (from PyPI)"


def installed_as(monkeypatch: pytest.MonkeyPatch, text: str | None) -> None:
    """Make the installed mhaudit distribution record ``text`` as its direct_url.json."""
    monkeypatch.setattr(install, "direct_url_text", lambda: text)


def test_this_checkout_reads_its_own_record() -> None:
    # scripts/test.sh installs the clone editable: pip recorded the clone's directory
    source = install.installed_source()
    assert source.local_dir is None or (Path(source.local_dir) / "pyproject.toml").is_file()


def _missing_transformers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    monkeypatch.setitem(sys.modules, "transformers", None)
    return CliRunner().invoke(main, ["report", str(config)])


@pytest.mark.parametrize(("text", "hint"), [
    (EDITABLE, "pip install -e '.[hf]' (from the clone's root, /home/me/mhaudit)"),
    (None, "pip install 'mhaudit[hf]' (from PyPI)"),
])
def test_a_config_without_transformers_names_the_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str | None, hint: str
) -> None:
    installed_as(monkeypatch, text)
    done = _missing_transformers(monkeypatch, tmp_path)
    assert done.exit_code == 3, done.output
    assert "needs transformers" in done.stderr and hint in done.stderr
    other = "(from PyPI)" if text else "-e '.[hf]'"
    assert other not in done.stderr


def test_a_clone_egg_info_ahead_on_the_path_does_not_hide_the_record(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # ``python -m mhaudit`` from a clone's root puts its mhaudit.egg-info (no source
    # recorded) ahead of the venv's dist-info, which holds pip's direct_url.json
    egg = tmp_path / "clone" / "mhaudit.egg-info"
    egg.mkdir(parents=True)
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: mhaudit\nVersion: 0.1.0\n")
    info = tmp_path / "site" / "mhaudit-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mhaudit\nVersion: 0.1.0\n")
    (info / "direct_url.json").write_text(EDITABLE)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "clone"), str(tmp_path / "site")])
    assert install.installed_source() == InstallSource("/home/me/mhaudit", True)
