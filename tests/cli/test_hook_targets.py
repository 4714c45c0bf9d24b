"""The pre-commit hooks run with no file names: the targets come from ``[tool.mhaudit]``."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mhaudit.cli.main import main as cli

ROOT = Path(__file__).resolve().parents[2]
MODEL = (ROOT / "examples" / "textbook_mha.py").read_text(encoding="utf-8")


def _hooks() -> dict[str, dict[str, object]]:
    yaml = pytest.importorskip("yaml")
    return {h["id"]: h for h in yaml.safe_load(
        (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}


def _repo(tmp_path: Path, tool: str) -> Path:
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(tool, encoding="utf-8")
    return tmp_path


CONFIGURED = '[tool.mhaudit]\ntargets = ["model.py"]\n\n[tool.mhaudit.budget]\nmax_params = "10M"\n'


def test_hooks_declare_entry_language_files_and_no_file_names() -> None:
    hooks = _hooks()
    for hook_id, hook in hooks.items():
        assert str(hook["entry"]).startswith("mhaudit "), hook_id
        assert hook["language"] == ("python" if hook_id.endswith("-isolated") else "system")
        assert hook["pass_filenames"] is False  # targets come from [tool.mhaudit]
        assert "args" not in hook
        assert hook["files"] == r"\.(py|toml|json)$"


# the textbook model is within 10M parameters, and its eager scores are a warning (MHA005)
@pytest.mark.parametrize(("hook_id", "code", "shown"), [
    ("mhaudit-check", 0, "PASS"), ("mhaudit-report", 1, "MHA005")])
def test_the_hook_command_line_audits_the_configured_targets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook_id: str, code: int,
        shown: str) -> None:
    """What pre-commit runs: the entry split as a shell would, with no file names after it."""
    monkeypatch.chdir(_repo(tmp_path, CONFIGURED))
    argv = shlex.split(str(_hooks()[hook_id]["entry"]))[1:]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == code, result.output
    assert shown in result.output


def test_no_target_and_none_configured_is_a_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_repo(tmp_path, '[tool.mhaudit]\nselect = ["MHA"]\n'))
    result = CliRunner().invoke(cli, ["report"])
    assert result.exit_code == 2
    assert "[tool.mhaudit] targets" in result.output


def test_configured_targets_must_be_a_list_of_strings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_repo(tmp_path, '[tool.mhaudit]\ntargets = "model.py"\n'))
    result = CliRunner().invoke(cli, ["report"])
    assert result.exit_code == 2 and "must be a non-empty list" in result.output


@pytest.mark.slow
def test_pre_commit_try_repo_runs_the_system_hook(tmp_path: Path) -> None:
    pre_commit = shutil.which("pre-commit") or shutil.which(
        "pre-commit", path=str(Path(sys.executable).parent))
    if pre_commit is None:
        pytest.skip("pre-commit is not installed here")
    repo = _repo(tmp_path, CONFIGURED)
    for args in (["init", "-q"], ["add", "."]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    done = subprocess.run([pre_commit, "try-repo", str(ROOT), "mhaudit-check", "--all-files"],
                          cwd=repo, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
