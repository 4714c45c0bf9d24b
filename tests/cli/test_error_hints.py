"""Error lines read as sentences: one stop between message and hint, never ``?.`` or ``..``."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from mhaudit import errors
from mhaudit.cli.main import main as cli
from mhaudit.errors import MhauditError, end_sentence, sentences

ERROR_CLASSES = sorted(
    (c for c in vars(errors).values()
     if isinstance(c, type) and issubclass(c, MhauditError)), key=lambda c: c.__name__)
DOUBLED = re.compile(r"[.?!]\s*\.|\.\s*[?!]")

MESSAGES = ["no such option '--tensor-paralel'. Did you mean '--tensor-parallel'?",
            "the budget file is missing.", "the model raised!", "cannot trace  the model"]
TIPS = ["Run `mhaudit report --help`.", "Add example_inputs() to the file", "", "Really?"]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("message", MESSAGES)
@pytest.mark.parametrize("tip", TIPS)
def test_every_error_class_joins_message_and_tip_with_one_stop(
        cls: type[MhauditError], message: str, tip: str) -> None:
    line = cls(message, tip).one_line()
    assert not DOUBLED.search(line), line
    assert line.endswith((".", "?", "!")), line
    assert "  " not in line


def test_a_question_keeps_its_mark_and_a_sentence_gets_one_stop() -> None:
    assert end_sentence("Did you mean '--tensor-parallel'?") == "Did you mean '--tensor-parallel'?"
    assert end_sentence("done..") == "done."
    assert end_sentence("done") == "done."
    assert sentences("a?", "", "b.") == "a? b."


def test_a_misspelt_option_reads_did_you_mean_then_the_help_hint() -> None:
    result = CliRunner().invoke(cli, ["report", "x.py", "--tensor-paralel", "2"])
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert "Did you mean" in line and "--help" in line
    assert not DOUBLED.search(line), line


def test_a_question_inside_brackets_gets_no_extra_stop() -> None:
    # click words a misspelt option as "No such option '--bogus'. (Did you mean …?)"
    assert end_sentence("(Did you mean one of: '--gpu', '--verbose'?)") == (
        "(Did you mean one of: '--gpu', '--verbose'?)")
    assert end_sentence("(see above)") == "(see above)."
