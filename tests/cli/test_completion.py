"""Shell completion of targets, rule codes, GPUs and dtypes; one option grammar."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mhaudit.cli import main
from mhaudit.rules import REGISTRY


def _complete(words: str) -> list[tuple[str, str]]:
    """What bash completion offers for the last of ``words`` (``type,value`` pairs)."""
    parts = words.split(" ")
    env = {"_MHAUDIT_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(parts) - 1)}
    done = CliRunner().invoke(main, [], env=env, prog_name="mhaudit")
    lines = done.output.splitlines()
    return [(kind, value) for kind, value in (line.split(",", 1) for line in lines)]


@pytest.mark.parametrize("command", ["report", "check", "whatif"])
def test_target_completes_file_paths(command: str) -> None:
    assert _complete(f"mhaudit {command} exam") == [("file", "exam")]


def test_rules_code_completes_from_the_registry() -> None:
    offered = [value for _, value in _complete("mhaudit rules MHA00")]
    expected = [r.code for r in REGISTRY if r.code.startswith("MHA00")]
    assert offered == expected and len(expected) >= 9
    assert ("plain", "kv-cache-heavy") in _complete("mhaudit rules kv-cache")


@pytest.mark.parametrize("command", ["report", "check", "whatif"])
def test_gpu_and_dtype_complete_on_every_command(command: str) -> None:
    assert ("plain", "h100") in _complete(f"mhaudit {command} --gpu h1")
    dtypes = {value for _, value in _complete(f"mhaudit {command} --dtype bf")}
    assert dtypes == {"bfloat16", "bf16"}


def test_whatif_seq_len_takes_the_list_report_takes() -> None:
    args = ["whatif", "--d-model", "256", "--heads", "4", "--try-heads", "2,4", "-f", "json"]
    one = CliRunner().invoke(main, [*args, "--seq-len", "128"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["spec"]["seq_len"] == 128
    several = CliRunner().invoke(main, [*args, "-n", "128,512"])
    assert several.exit_code == 0, several.output
    assert [s["spec"]["seq_len"] for s in json.loads(several.stdout)] == [128, 512]
    table = CliRunner().invoke(main, [*args[:-2], "--seq-len", "128,512"])
    assert [line.split("; input: ")[1].split(",")[0] for line in table.stdout.splitlines()
            if line.startswith("what-if for")] == ["b 1 × n 128", "b 1 × n 512"]
    bad = CliRunner().invoke(main, [*args, "--seq-len", "128,,512"])
    assert bad.exit_code == 2 and "empty item" in bad.output
