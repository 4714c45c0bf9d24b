"""The CLI answers at once: help, version, rules and completion never import torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import sys
from mhaudit.cli import main
try:
    main(sys.argv[1:], prog_name="mhaudit")
except SystemExit as exit:
    code = exit.code
else:
    code = 0
print("TORCH-LOADED" if "torch" in sys.modules else "TORCH-ABSENT", file=sys.stderr)
"""


def _probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env=full, timeout=120, check=False)


@pytest.mark.parametrize("args", [
    ("--help",), ("-h",), ("--version",), ("-V",), ("rules",), ("rules", "MHA004"),
    ("rules", "--format", "json"), ("whatif", "--help"), ("report", "--help"),
    ("check", "--help"),
])
def test_command_imports_no_torch(args: tuple[str, ...]) -> None:
    done = _probe(*args)
    assert done.stderr.strip().splitlines()[-1] == "TORCH-ABSENT", done.stderr
    assert done.stdout.strip()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_imports_no_torch(shell: str) -> None:
    source = _probe(env={"_MHAUDIT_COMPLETE": f"{shell}_source"})
    assert source.stderr.strip().splitlines()[-1] == "TORCH-ABSENT"
    assert "_MHAUDIT_COMPLETE" in source.stdout
    cword = "r" if shell == "fish" else "1"  # fish passes the word being completed
    complete = _probe(env={"_MHAUDIT_COMPLETE": f"{shell}_complete", "COMP_WORDS": "mhaudit r",
                           "COMP_CWORD": cword})
    assert complete.stderr.strip().splitlines()[-1] == "TORCH-ABSENT"
    assert "report" in complete.stdout and "rules" in complete.stdout


def test_version_comes_from_the_package() -> None:
    from mhaudit import __version__

    assert _probe("-V").stdout.strip() == f"mhaudit, version {__version__}"


def test_every_command_help_has_examples() -> None:
    for command in ("report", "check", "whatif", "rules"):
        text = _probe(command, "--help").stdout
        assert "Examples:" in text and f"mhaudit {command} " in text, command
    top = _probe("--help").stdout
    assert "Examples:" in top and "Shell completion" in top
    assert "..." not in top.split("Commands:")[1].split("Examples:")[0]  # summaries not cut


LOADED = """
import sys
from mhaudit.cli import main
try:
    main(sys.argv[1:], prog_name="mhaudit")
except SystemExit:
    pass
print("LOADED " + " ".join(sorted(sys.modules)), file=sys.stderr)
"""
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "textbook_mha.py")


def _loaded(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", LOADED, *args], capture_output=True,
                          text=True, timeout=300, check=False)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("LOADED ")]
    assert lines, done.stderr
    assert '"blocks"' in done.stdout or "attention" in done.stdout.lower(), done.stdout[-500:]
    return set(lines[-1].split()[1:])


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "absent"), [
    ("json", {"transformers", "fvcore", "tabulate", "jinja2", "mhaudit.render.html",
              "mhaudit.render.svg", "mhaudit.render.table", "mhaudit.render.markdown",
              "mhaudit.flops.fvcore_backend", "mhaudit.measure.device"}),
    ("table", {"transformers", "fvcore", "jinja2", "mhaudit.render.html",
               "mhaudit.render.svg"}),
])
def test_report_imports_only_what_its_format_uses(fmt: str, absent: set[str]) -> None:
    loaded = _loaded("report", EXAMPLE, "--format", fmt)
    assert "torch" in loaded  # the audit itself ran
    assert not absent & loaded, sorted(absent & loaded)
