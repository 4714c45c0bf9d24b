"""The rule docs under docs/rules/ and README's rule table are generated from the rule
objects and are current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mhaudit.rules import REGISTRY
from mhaudit.rules.docs import (
    DOCS_DIR,
    README,
    README_BEGIN,
    README_END,
    generate,
    main,
    readme_is_stale,
    rule_page,
    stale_files,
    with_readme_table,
)


def test_docs_are_current() -> None:
    assert stale_files(DOCS_DIR) == [], "run `python -m mhaudit.rules.docs` to regenerate"
    assert not readme_is_stale(README), "run `python -m mhaudit.rules.docs` to regenerate"


def test_one_page_per_rule_and_an_index() -> None:
    pages = generate()
    assert set(pages) == {f"{code}.md" for code in REGISTRY.codes()} | {"README.md"}
    for rule in REGISTRY:
        assert f"[{rule.code}]({rule.code}.md)" in pages["README.md"]
        page = rule_page(rule)
        for text in (rule.code, rule.name, rule.summary, rule.why, rule.example, rule.fix,
                     rule.known_problems, rule.since, *rule.references):
            assert text in page
        for threshold in rule.thresholds:
            assert f"`{threshold.key}`" in page
        for spec in rule.numbers:
            assert f"| `{spec.key}` | {spec.unit} |" in page


def test_readme_table_lists_every_rule(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{README_BEGIN}\n| old |\n{README_END}\n\nafter\n",
                      encoding="utf-8")
    assert readme_is_stale(readme)
    assert main(["--check", "--out", str(DOCS_DIR), "--readme", str(readme)]) == 1
    assert main(["--out", str(tmp_path / "rules"), "--readme", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert not readme_is_stale(readme) and text.endswith(f"{README_END}\n\nafter\n")
    for rule in REGISTRY:
        assert f"| {rule.code} | {rule.name} | {rule.severity.value} |" in text
    with pytest.raises(ValueError, match="markers"):
        with_readme_table("no markers here\n")


def test_check_fails_on_stale_docs(tmp_path: Path) -> None:
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "MHA001.md").write_text("edited by hand\n", encoding="utf-8")
    (tmp_path / "MHA099.md").write_text("a retired page\n", encoding="utf-8")
    assert stale_files(tmp_path) == ["MHA001.md", "MHA099.md"]
    assert main(["--out", str(tmp_path)]) == 0
    assert stale_files(tmp_path) == []
    assert not (tmp_path / "MHA099.md").exists()


def test_module_entry_point_checks() -> None:
    done = subprocess.run([sys.executable, "-m", "mhaudit.rules.docs", "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
