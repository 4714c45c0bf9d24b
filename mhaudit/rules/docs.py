"""Generate docs/rules/ from the rule objects: ``python -m mhaudit.rules.docs [--check]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mhaudit.rules import REGISTRY, Rule

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs" / "rules"
"""Where the generated pages live in a source checkout."""

GENERATED_NOTE = "<!-- Generated from the rule objects by `python -m mhaudit.rules.docs`. -->"


def _number(value: float) -> str:
    return f"{value:g}"


def rule_page(rule: Rule) -> str:
    """The markdown page of one rule (also what ``mhaudit rules CODE`` prints)."""
    lines = [
        f"# {rule.code}: {rule.name}",
        "",
        f"**Default severity:** {rule.severity.value}",
        "",
        "## What it does",
        "",
        rule.summary,
        "",
        "## Why is this bad",
        "",
        rule.why,
        "",
        "## Example",
        "",
        rule.example,
        "",
        "## Fix",
        "",
        rule.fix,
        "",
        "## Configuration",
        "",
    ]
    if rule.thresholds:
        lines += ["| threshold | default | meaning |", "| --- | --- | --- |"]
        lines += [f"| `{t.key}` | {_number(t.default)} | {t.description} |"
                  for t in rule.thresholds]
        lines.append("")
    else:
        lines += ["This rule has no thresholds.", ""]
    lines += [
        "```toml",
        "[tool.mhaudit]",
        f'ignore = ["{rule.code}"]',
        "",
        "[tool.mhaudit.severity]",
        f'{rule.code} = "{rule.severity.value}"',
    ]
    if rule.thresholds:
        lines += ["", f"[tool.mhaudit.thresholds.{rule.code}]"]
        lines += [f"{t.key} = {_number(t.default)}" for t in rule.thresholds]
    lines += [
        "",
        "[tool.mhaudit.per-module-ignores]",
        f'"encoder.*" = ["{rule.code}"]',
        "```",
        "",
    ]
    return "\n".join(lines)


def index_page(rules: Sequence[Rule]) -> str:
    """The markdown index of every rule."""
    lines = [
        "# mhaudit rules",
        "",
        "Every flag mhaudit raises comes from one of these rules. Each page says what the "
        "rule flags, why it costs, an example, the fix and its configuration. "
        "`mhaudit rules` lists them and `mhaudit rules CODE` explains one.",
        "",
        "| code | name | severity | summary |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| [{r.code}]({r.code}.md) | {r.name} | {r.severity.value} | {r.summary} |"
              for r in rules]
    return "\n".join(lines) + "\n"


def generate() -> dict[str, str]:
    """File name to content of every generated page."""
    rules = list(REGISTRY)
    pages = {f"{r.code}.md": f"{GENERATED_NOTE}\n\n{rule_page(r)}" for r in rules}
    pages["README.md"] = f"{GENERATED_NOTE}\n\n{index_page(rules)}"
    return pages


def stale_files(folder: Path) -> list[str]:
    """Names of pages in ``folder`` that are missing, differ or should not be there."""
    pages = generate()
    stale = [name for name, text in pages.items()
             if not (folder / name).is_file()
             or (folder / name).read_text(encoding="utf-8") != text]
    found = folder.glob("MHA*.md") if folder.is_dir() else ()
    extra = [p.name for p in found if p.name not in pages]
    return sorted(stale + extra)


def write(folder: Path) -> list[str]:
    """Write every page into ``folder``, remove pages of unknown codes; return changed names."""
    changed = stale_files(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pages = generate()
    for name in changed:
        path = folder / name
        if name in pages:
            path.write_text(pages[name], encoding="utf-8")
        else:
            path.unlink()
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Write the docs, or with ``--check`` exit 1 when they are not current."""
    parser = argparse.ArgumentParser(prog="python -m mhaudit.rules.docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the docs are not current")
    parser.add_argument("--out", type=Path, default=DOCS_DIR, help="folder of the rule pages")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.out)
        if stale:
            sys.stderr.write(f"rule docs in {args.out} are out of date: {', '.join(stale)}. "
                             "Run `python -m mhaudit.rules.docs` to regenerate them.\n")
            return 1
        return 0
    changed = write(args.out)
    sys.stderr.write(f"wrote {len(changed)} file(s) to {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
