"""Rule configuration: select/ignore, severities, thresholds, suppression, pyproject, CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from mhaudit.data import Severity
from mhaudit.errors import ConfigError
from mhaudit.rules import RuleConfig, config_from_table, find_pyproject, load_config


def _pyproject(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_pyproject_is_found_upward_and_cli_merges_over_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pyproject(tmp_path, """
[tool.mhaudit]
select = ["MHA00"]
ignore = ["MHA005"]

[tool.mhaudit.severity]
MHA004 = "error"

[tool.mhaudit.thresholds.MHA007]
min_bytes_per_token = 16384

[tool.mhaudit.per-module-ignores]
"encoder.*" = ["MHA004"]
""")
    nested = tmp_path / "src" / "models"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    config = load_config()
    assert config.source == str(tmp_path / "pyproject.toml")
    assert config.select == ("MHA00",) and config.ignore == ("MHA005",)
    assert config.severity == {"MHA004": Severity.ERROR}
    assert config.thresholds == {"MHA007": {"min_bytes_per_token": 16384.0}}
    assert config.suppressed("encoder.layers.3", "MHA004")
    assert not config.suppressed("decoder.layers.3", "MHA004")
    cli = load_config(select=["MHA"], ignore=["MHA010"], severity=["MHA004=info"],
                      thresholds=["MHA007.min_bytes_per_token=1"],
                      per_module_ignores=["decoder.*=MHA001,MHA002"])
    assert cli.select == ("MHA",) and cli.ignore == ("MHA010",)
    assert cli.severity["MHA004"] is Severity.INFO
    assert cli.thresholds["MHA007"]["min_bytes_per_token"] == 1.0
    assert cli.suppressed("encoder.x", "MHA004") and cli.suppressed("decoder.x", "MHA002")


def test_pyproject_without_section_is_skipped(tmp_path: Path) -> None:
    outer = _pyproject(tmp_path, "[tool.mhaudit]\nignore = ['MHA010']\n")
    inner = tmp_path / "pkg"
    inner.mkdir()
    _pyproject(inner, "[project]\nname = 'x'\n")
    assert find_pyproject(inner) == outer
    assert load_config(inner).ignore == ("MHA010",)
    assert load_config(inner, use_pyproject=False).ignore == ()


def test_bad_toml_is_a_config_error(tmp_path: Path) -> None:
    _pyproject(tmp_path, "[tool.mhaudit\n")
    with pytest.raises(ConfigError, match="cannot read"):
        find_pyproject(tmp_path)


@pytest.mark.parametrize(
    ("table", "names"),
    [
        ({"selct": ["MHA001"]}, "'selct'"),
        ({"select": ["MHA9"]}, "select"),
        ({"severity": {"MHA001": "fatal"}}, "severity.MHA001"),
        ({"severity": {"MHA999": "error"}}, "severity.MHA999"),
        ({"thresholds": {"MHA007": {"min_bytes": 1}}}, "thresholds.MHA007.min_bytes"),
        ({"thresholds": {"MHA007": {"min_bytes_per_token": "lots"}}}, "min_bytes_per_token"),
        ({"thresholds": {"MHA007": {"min_bytes_per_token": True}}}, "min_bytes_per_token"),
        ({"per-module-ignores": {"enc.*": ["XYZ"]}}, "per-module-ignores.enc.*"),
    ],
)
def test_bad_configuration_names_the_key(table: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_from_table(table, "pyproject.toml")
    assert names in error.value.one_line()
    assert error.value.exit_code == 2


def test_other_stages_keys_can_be_let_through() -> None:
    config = config_from_table({"gpu": "a100", "ignore": ["MHA010"]}, other_keys={"gpu"})
    assert config.ignore == ("MHA010",)


def test_cli_values_are_checked_too() -> None:
    with pytest.raises(ConfigError, match="--threshold"):
        RuleConfig().merged(thresholds=["MHA007=3"])
    with pytest.raises(ConfigError, match="--severity"):
        RuleConfig().merged(severity=["MHA007"])


def test_retired_codes_are_refused_with_their_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from mhaudit.rules import REGISTRY

    monkeypatch.setattr(REGISTRY, "_retired", {"MHA099": "0.2.0"})
    for table in ({"ignore": ["MHA099"]}, {"severity": {"MHA099": "error"}}):
        with pytest.raises(ConfigError, match=r"MHA099 was retired in mhaudit 0\.2\.0"):
            config_from_table(table)
