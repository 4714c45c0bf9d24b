"""The rule docs under docs/rules/ are generated from the rule objects and are current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mhaudit.rules import REGISTRY
from mhaudit.rules.docs import DOCS_DIR, generate, main, rule_page, stale_files


def test_docs_are_current() -> None:
    assert stale_files(DOCS_DIR) == [], "run `python -m mhaudit.rules.docs` to regenerate"


def test_one_page_per_rule_and_an_index() -> None:
    pages = generate()
    assert set(pages) == {f"{code}.md" for code in REGISTRY.codes()} | {"README.md"}
    for rule in REGISTRY:
        assert f"[{rule.code}]({rule.code}.md)" in pages["README.md"]
        page = rule_page(rule)
        for text in (rule.code, rule.name, rule.summary, rule.why, rule.example, rule.fix):
            assert text in page
        for threshold in rule.thresholds:
            assert f"`{threshold.key}`" in page


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
