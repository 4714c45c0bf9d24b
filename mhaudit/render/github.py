"""GitHub workflow annotations for ``report --format github``: each finding on its source line."""

from __future__ import annotations

from collections.abc import Sequence

from mhaudit.data import Finding, Report, Severity, SourceLocation
from mhaudit.errors import sentences
from mhaudit.render.escape import github_data as _escape_data
from mhaudit.render.escape import github_property as _escape_property
from mhaudit.render.sarif import finding_location
from mhaudit.render.style import PLAIN, RenderOptions

COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def annotation(level: Severity, title: str, message: str,
               where: SourceLocation | None) -> str:
    """``::warning file=F,line=N,title=T::message`` (file and line when known)."""
    props = []
    if where is not None:
        props += [f"file={_escape_property(where.path)}", f"line={where.line}"]
    props.append(f"title={_escape_property(title)}")
    return f"::{COMMANDS[level]} {','.join(props)}::{_escape_data(message)}"


def folded_findings(report: Report) -> list[tuple[str | None, int, Finding]]:
    """Each finding once per folded group: (block label, blocks it stands for, finding).

    A repeated layer's findings are reported on the group's first block, under the group's
    pattern (``layers.{0..31}.self_attn``); the other members' copies are left out.
    """
    first: dict[str, tuple[str, int]] = {}
    others: set[str] = set()
    for g in report.groups:
        if g.names:
            first[g.names[0]] = (g.pattern, g.count)
            others.update(g.names[1:])
    items: list[tuple[str | None, int, Finding]] = []
    for f in report.findings:
        if f.block is not None and f.block in others:
            continue
        label, count = first.get(f.block, (f.block, 1)) if f.block is not None else (None, 1)
        items.append(("(root)" if label == "" else label, count, f))
    return items


def report_annotations(report: Report) -> list[str]:
    """One annotation per finding of ``report``, a repeated layer's once for its group."""
    lines = []
    for label, count, f in folded_findings(report):
        where = "" if label is None else f"{label}{f' ({count} blocks)' if count > 1 else ''}: "
        lines.append(annotation(f.severity, f"mhaudit {f.code} {f.name}",
                                where + sentences(f.message, f"Fix: {f.fix}"),
                                finding_location(report, f)))
    return lines


def render_github(report: Report, options: RenderOptions = PLAIN) -> str:
    """Annotations for one report, then a one-line count."""
    return render_github_many([report], options)


def render_github_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """Annotations for every report, then a one-line count."""
    lines = [line for r in reports for line in report_annotations(r)]
    count = sum(len(r.findings) for r in reports)
    models = f" in {len(reports)} models" if len(reports) > 1 else ""
    folded = f", {len(lines)} annotation(s)" if len(lines) != count else ""
    lines.append(f"mhaudit: {count} finding(s){models}{folded}")
    return "\n".join(lines) + "\n"
