"""A forward that raises hostile text: the error line stays one short line with no repr."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hostile_helpers import invoke, model_file

from mhaudit.errors import MAX_LINE_CHARS, without_reprs

RAISES = '''
import dataclasses


class Opaque:
    pass


@dataclasses.dataclass
class Settings:
    name: str = "a-very-long-setting-name"
    sizes: tuple = tuple(range(40))


class Raising(Attention):
    def forward(self, x):
        raise {kind}({text})


def build_model():
    return Raising()
'''
"""A model file whose forward raises ``kind(text)`` on every rung."""

MESSAGES = {
    "default-repr": 'f"state {Opaque()!r} is wrong"',
    "module-repr": 'f"bad layer {self!r}"',
    "dataclass-dump": 'f"cannot use {Settings()!r}"',
    "bound-method": 'f"hook {self.forward!r} failed"',
    "newlines": '"first\\nsecond\\n\\nthird " + repr(Opaque())',
    "two-thousand": '"x" * 2000',
    "long-words": '" ".join(["y" * 300] * 7)',
}


@pytest.mark.parametrize("kind", ["RuntimeError", "ValueError", "AttributeError"])
@pytest.mark.parametrize("case", sorted(MESSAGES))
def test_a_hostile_message_gives_one_short_line(tmp_path: Path, case: str, kind: str) -> None:
    path = model_file(tmp_path, RAISES.format(kind=kind, text=MESSAGES[case]))
    run = invoke("report", path)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.code == 3, run.stderr
    assert len(lines) == 1, run.stderr
    (line,) = lines
    assert len(line) <= MAX_LINE_CHARS, len(line)
    assert "0x" not in line and " object at " not in line, line
    assert "in_features=" not in line and "sizes=(" not in line, line  # no long dumps
    assert f"got furthest and raised {kind}" in line, line  # the first error, by its type
    assert "Make example_inputs() match forward()" in line, line  # the fix


def test_verbose_lists_each_tracer_after_the_line(tmp_path: Path) -> None:
    path = model_file(tmp_path, RAISES.format(kind="RuntimeError", text=MESSAGES["module-repr"]))
    run = invoke("report", "--verbose", path)
    assert run.code == 3
    for rung in ("dispatch-record:", "torch.export:", "dispatch-fake:"):
        assert re.search(rf"^{re.escape(rung)} RuntimeError", run.stderr, re.M), run.stderr
    assert run.stderr.rstrip().splitlines()[-1].startswith("mhaudit: error: could not trace")


@pytest.mark.parametrize(("text", "plain"), [
    ("at <pkg.mod.Thing object at 0x7f00aa12bc>", "at <Thing>"),
    ("<bound method M.f of <m.M object at 0x7fabcdef>>", "<bound method M.f of <M>>"),
    ("<function f at 0x7fabcdef>", "<function f>"),
    ("Linear(in_features=8, out_features=8, bias=True) x", "Linear(…) x"),
    ("Cfg(a=1) and sys.exit(3)", "Cfg(a=1) and sys.exit(3)"),  # short calls stay
    ("Seq(\n  (0): Linear(in_features=8, out_features=8)\n) tail", "Seq(…) tail"),
    ("Unclosed(aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "Unclosed(…)"),
    ("id 0xdeadbeef12", "id an address"),
])
def test_reprs_are_replaced_by_their_names(text: str, plain: str) -> None:
    assert without_reprs(text) == plain
