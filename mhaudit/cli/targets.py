"""Several targets in one process: audit each, keep going past failures, worst exit code wins."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mhaudit.cli.common import audit_quietly, errors_to_exit, warn_unused_shape_options
from mhaudit.cli.guard import report_stream
from mhaudit.cli.progress import Status
from mhaudit.cli.terminal import terminal_width, use_color
from mhaudit.render.formats import OutputFormat
from mhaudit.render.style import RenderOptions

if TYPE_CHECKING:
    from mhaudit.data import Report, WhatIf
    from mhaudit.options import AuditOptions

INTERRUPTED = 130


def audit_each(
    targets: Sequence[str], make_options: Callable[[Callable[[int, int], None]], AuditOptions],
    verbose: bool = False,
) -> tuple[list[tuple[str, Report]], int]:
    """Audit every target; a failure prints its one line and the others still run.

    Returns the reports that were made and the worst exit code of the failures (0 if none).
    """
    done: list[tuple[str, Report]] = []
    worst = 0
    for target in targets:
        try:
            with errors_to_exit(verbose), Status(f"mhaudit: {target}") as status:
                report = audit_quietly(target, make_options(status.measured))
            warn_unused_shape_options(report)
            done.append((target, report))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            if code == INTERRUPTED:
                raise
            worst = max(worst, code)
    return done, worst


def render_options(fmt: OutputFormat, wide: bool, to_stdout: bool,
                   sweeps: tuple[WhatIf, ...] = ()) -> RenderOptions:
    """Width and colour for a terminal format; plain for files and the other formats."""
    if not fmt.terminal:
        return RenderOptions(wide=wide, sweeps=sweeps)
    return RenderOptions(width=None if wide else terminal_width(), wide=wide,
                         color=to_stdout and use_color(report_stream()), sweeps=sweeps)


def flagged_sweeps(fmt: OutputFormat, reports: Sequence[Report], limit: int = 4
                   ) -> tuple[WhatIf, ...]:
    """What-if sweeps of the blocks that findings name, for a format that charts them."""
    from mhaudit.cost.devices import get_profile
    from mhaudit.errors import MhauditError
    from mhaudit.whatif import spec_from_block, whatif

    sweeps: list[WhatIf] = []
    if not fmt.charts:
        return ()
    for report in reports:
        named = {f.block for f in report.findings}
        for group in report.groups:
            block = group.block
            if block.name not in named or block.target is None or len(sweeps) >= limit:
                continue
            try:
                spec = spec_from_block(block, report.model.dtype)
                sweeps.append(whatif(spec, get_profile(block.target.gpu)))
            except MhauditError:
                continue
    return tuple(sweeps)
