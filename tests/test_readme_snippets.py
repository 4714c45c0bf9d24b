"""Every ```python block of README.md runs as pasted (a block after ``<!-- snippet: skip -->``
is left out), and its ``test_*`` functions pass."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SKIP = "<!-- snippet: skip -->"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def snippets() -> list[tuple[int, str]]:
    """(line number, code) of each runnable python block."""
    text = README.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        before = text[:match.start()].rstrip().splitlines()
        if before and before[-1].strip() == SKIP:
            continue
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def test_the_readme_has_a_library_snippet() -> None:
    assert any("mhaudit.audit(" in code for _, code in snippets())


@pytest.mark.parametrize(("line", "code"), snippets(), ids=lambda v: f"line{v}"
                         if isinstance(v, int) else "")
def test_readme_snippet_runs_as_pasted(line: int, code: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"readme_line_{line}"}
    exec(compile(code, f"README.md:{line}", "exec"), namespace)
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            value()


# Every console and bash block line that runs mhaudit, run as printed from the repository
# root (a scratch copy of it: the files a command writes land there); a console block's
# output, where shown, must be what the command prints at 100 columns.
_SHELL = re.compile(r"^```(console|bash)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
_RANGE = re.compile(r"MHA(\d{3})-MHA(\d{3})")


def commands() -> list[tuple[int, list[tuple[str, str | None]]]]:
    """(line number, [(command, shown output or None)]) of each block that runs mhaudit."""
    text = README.read_text(encoding="utf-8")
    found = []
    for match in _SHELL.finditer(text):
        console, runs = match.group(1) == "console", []
        lines = match.group(2).splitlines()
        for i, line in enumerate(lines):
            command = line[2:] if console and line.startswith("$ ") else line
            if not command.startswith("mhaudit "):
                continue
            shown = None
            if console:
                rest = lines[i + 1:]
                end = next((j for j, r in enumerate(rest) if r.startswith("$ ")), len(rest))
                shown = "\n".join(rest[:end])
            runs.append((shlex.join(shlex.split(command, comments=True)), shown))
        if runs:
            found.append((text.count("\n", 0, match.start()) + 1, runs))
    return found


def test_the_readme_runs_check_and_report_from_its_blocks() -> None:
    every = [c for _, runs in commands() for c, _ in runs]
    assert sum(c.startswith("mhaudit check ") for c in every) >= 6
    assert any("--format sarif" in c for c in every)


@pytest.mark.slow
@pytest.mark.parametrize(("line", "runs"), commands(), ids=lambda v: f"line{v}"
                         if isinstance(v, int) else "")
def test_readme_command_runs_as_printed(line: int, runs: list[tuple[str, str | None]],
                                        tmp_path: Path) -> None:
    root = README.parent
    for entry in root.iterdir():
        if not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(root)}
    for command, shown in runs:
        args = [sys.executable, "-m", "mhaudit", *shlex.split(command)[1:]]
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        allowed = (0, 1) if command.startswith("mhaudit check ") else (0,)
        assert done.returncode in allowed, f"README.md:{line}: `{command}` exited " \
            f"{done.returncode}: {done.stderr.strip()[-400:]}"
        if shown is not None:
            assert done.stdout.rstrip() == shown.rstrip(), f"README.md:{line}: `{command}`"


def test_rule_code_ranges_in_the_readme_span_the_rules() -> None:
    from mhaudit.rules import REGISTRY

    codes = sorted(REGISTRY.codes())
    ranges = _RANGE.findall(README.read_text(encoding="utf-8"))
    assert ranges
    for first, last in ranges:
        assert (f"MHA{first}", f"MHA{last}") == (codes[0], codes[-1])
