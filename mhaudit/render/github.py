"""GitHub workflow annotations for ``report --format github``: each finding on its source line."""

from __future__ import annotations

from collections.abc import Sequence

from mhaudit.data import Report, Severity, SourceLocation
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


def report_annotations(report: Report) -> list[str]:
    """One annotation per finding of ``report``."""
    lines = []
    for f in report.findings:
        block = "(root)" if f.block == "" else f.block
        where = f"{block}: " if block is not None else ""
        lines.append(annotation(f.severity, f"mhaudit {f.code} {f.name}",
                                f"{where}{f.message}. Fix: {f.fix}",
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
    lines.append(f"mhaudit: {count} finding(s){models}")
    return "\n".join(lines) + "\n"
