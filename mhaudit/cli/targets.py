"""Several targets in one process: audit each, keep going past failures, worst exit code wins."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhaudit.cli.common import (
    audit_quietly,
    errors_to_exit,
    require_torch,
    warn_unused_shape_options,
)
from mhaudit.cli.guard import report_stream
from mhaudit.cli.inputs import target_files
from mhaudit.cli.progress import Status, status_label
from mhaudit.cli.terminal import terminal_width, use_color
from mhaudit.contain.state import clean_state
from mhaudit.render.formats import OutputFormat
from mhaudit.render.style import RenderOptions

if TYPE_CHECKING:
    from mhaudit.data import Report, WhatIf
    from mhaudit.options import AuditOptions

INTERRUPTED = 130


@dataclass(frozen=True)
class Failed:
    """A target that gave no report: its exit code and the line printed for it."""

    index: int
    """Position among the targets given."""
    target: str
    exit_code: int
    error: str

    def data(self) -> dict[str, Any]:
        """The entry a JSON list of several targets holds in this target's place."""
        return {"source": self.target, "error": self.error, "exit_code": self.exit_code}


def audit_each(
    targets: Sequence[str], make_options: Callable[[Callable[[int, int], None]], AuditOptions],
    verbose: bool = False,
) -> tuple[list[tuple[str, Report]], int, list[Failed]]:
    """Audit every target; a failure prints its one line and the others still run.

    Each target starts from the same torch and module state (:func:`clean_state`).
    Returns the reports that were made, the worst exit code of the failures (0 if none)
    and the failures.
    """
    require_torch()
    done: list[tuple[str, Report]] = []
    failed: list[Failed] = []
    worst = 0
    for index, target in enumerate(targets):
        try:
            folders = [Path(os.path.realpath(p)).parent for p in target_files(target)]
            with errors_to_exit(verbose), clean_state(folders), \
                    Status(status_label(target, index, len(targets))) as status:
                options = replace(make_options(status.measured), on_stage=status.stage)
                report = audit_quietly(target, options)
            warn_unused_shape_options(report)
            done.append((target, report))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            if code == INTERRUPTED:
                raise
            line = str(getattr(exc, "line", ""))
            failed.append(Failed(index, target, code, line.removeprefix("error: ")))
            worst = max(worst, code)
    return done, worst, failed


def with_failed(form: OutputFormat, text: str | None, count: int,
                failed: Sequence[Failed]) -> str | None:
    """``text`` as the format lists several targets, each failed one in its place; as it
    is for one target or a format that does not list them (failures are on stderr)."""
    if form.listing is None or count < 2:
        return text
    return form.listing(text, count, {f.index: f.data() for f in failed})


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
