"""The pre-commit hooks run with no file names: the targets come from ``[tool.mhaudit]``."""

from __future__ import annotations

import os
import re
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


def _repo(tmp_path: Path, tool: str, model: str = MODEL) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "model.py").write_text(model, encoding="utf-8")
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


def _pre_commit() -> str:
    found = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which(
        "pre-commit")
    if found is None:
        pytest.skip("pre-commit is not installed here (the dev extra installs it)")
    return found


def _hook_env(tmp_path: Path) -> dict[str, str]:
    """The environment pre-commit runs a system hook in: this interpreter's mhaudit first
    on PATH, its own cache."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PRE_COMMIT_HOME": str(tmp_path / "cache")}


def test_pre_commit_validates_the_hook_manifest(tmp_path: Path) -> None:
    done = subprocess.run([_pre_commit(), "validate-manifest",
                           str(ROOT / ".pre-commit-hooks.yaml")], capture_output=True,
                          text=True, timeout=120, check=False, env=_hook_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr


# mhaudit-check: the textbook model within its budget; mhaudit-report fails on warnings,
# so it audits a model with none (the small Llama)
@pytest.mark.slow
@pytest.mark.parametrize(("hook_id", "example"), [
    ("mhaudit-check", "textbook_mha.py"), ("mhaudit-report", "llama_gqa.py")])
def test_pre_commit_try_repo_runs_the_system_hook(tmp_path: Path, hook_id: str,
                                                  example: str) -> None:
    pre_commit = _pre_commit()
    if shutil.which("git") is None:
        pytest.skip("git is not installed here (pre-commit runs hooks in a git repository)")
    repo = _repo(tmp_path / "repo", CONFIGURED,
                 (ROOT / "examples" / example).read_text(encoding="utf-8"))
    for args in (["init", "-q"], ["add", "."]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    done = subprocess.run([pre_commit, "try-repo", str(ROOT), hook_id, "--all-files"],
                          cwd=repo, capture_output=True, text=True, timeout=600, check=False,
                          env=_hook_env(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"mhaudit attention (budget|report)\.+Passed", out), out
