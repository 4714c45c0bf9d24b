"""A model that ends or doubles the process, or a target that is a link to nowhere."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.hostile.hostile_helpers import (
    assert_one_error,
    model_file,
    run_process,
)

EXITS = {
    "at import": "import os\nos._exit(0)\n\ndef build_model():\n    return Attention()\n",
    "in build_model": "import os\n\ndef build_model():\n    os._exit(1)\n",
    "in forward": ("import os\n\nclass Quits(Attention):\n    def forward(self, x):\n"
                   "        os._exit(0)\n\ndef build_model():\n    return Quits()\n"),
}


@pytest.mark.slow
@pytest.mark.parametrize("where", sorted(EXITS))
def test_os_exit_in_model_code_is_a_model_failure(tmp_path: Path, where: str) -> None:
    # os._exit would end the process with the model's code (0 reads as a pass, 1 as over
    # budget); while model code runs it raises instead, and the run says so: exit 3
    model = model_file(tmp_path, EXITS[where])
    budget = tmp_path / "budget.toml"
    budget.write_text('[budget]\nmax_params = "1M"\n', encoding="utf-8")
    assert_one_error(run_process("check", model, "--budget", budget), 3, "os._exit(")


@pytest.mark.slow
def test_os_exit_of_one_target_keeps_the_others_in_the_list(tmp_path: Path) -> None:
    good = model_file(tmp_path, "def build_model():\n    return Attention()\n", "good.py")
    bad = model_file(tmp_path, EXITS["in forward"], "bad.py")
    run = run_process("report", good, bad, "--format", "json")
    assert run.code == 3
    listed = json.loads(run.stdout)
    assert [entry.get("exit_code") for entry in listed] == [None, 3]
    assert listed[0]["blocks"]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_model_that_forks_is_refused_and_prints_one_report(tmp_path: Path) -> None:
    model = model_file(tmp_path, "import os\n\ndef build_model():\n    os.fork()\n"
                                 "    return Attention()\n")
    run = run_process("report", model, "--format", "json")
    assert_one_error(run, 3, "forked")
    assert run.stdout.strip() == ""  # no second process appended a report


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_a_target_link_to_nowhere_is_a_load_error(tmp_path: Path, kind: str) -> None:
    from tests.hostile.hostile_helpers import invoke

    link = tmp_path / "model.py"
    if kind == "loop":
        other = tmp_path / "other.py"
        link.symlink_to(other)
        other.symlink_to(link)
    else:
        link.symlink_to(tmp_path / "gone.py")
    assert_one_error(invoke("report", link), 3, "symbolic link")


def test_output_never_replaces_a_module_the_model_file_imports(tmp_path: Path) -> None:
    from tests.hostile.hostile_helpers import invoke

    helper = model_file(tmp_path, "def build_model():\n    return Attention()\n", "helper.py")
    before = helper.read_bytes()
    model = tmp_path / "model.py"
    model.write_text("import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\n"
                     "from helper import *\n", encoding="utf-8")
    assert_one_error(invoke("report", model, "--output", helper), 2, "imports")
    assert helper.read_bytes() == before


def test_phase_options_without_their_phase_are_named_on_stderr(tmp_path: Path) -> None:
    from tests.hostile.hostile_helpers import invoke

    model = model_file(tmp_path, "def build_model():\n    return Attention()\n")
    run = invoke("report", model, "--context", "100", "--optimizer", "sgd")
    assert run.code == 0
    assert "warning: --optimizer, --context change nothing here" in run.stderr
    quiet = invoke("report", model, "--train", "--optimizer", "sgd")
    assert "change nothing" not in quiet.stderr
