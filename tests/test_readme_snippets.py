"""Every ```python block of README.md runs as pasted (a block after ``<!-- snippet: skip -->``
is left out), and its ``test_*`` functions pass."""

from __future__ import annotations

import re
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
