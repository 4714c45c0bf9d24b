"""Tables that fit a terminal width: columns dropped in a stated order, then records."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate


def text_width(text: str) -> int:
    """Columns of the widest line of ``text``."""
    return max((len(line) for line in text.splitlines()), default=0)


def simple_table(rows: Sequence[Sequence[str]], headers: Sequence[str]) -> str:
    """``rows`` under ``headers`` in tabulate's ``simple`` style, cells never reflowed."""
    return tabulate([list(r) for r in rows], headers=list(headers), tablefmt="simple",
                    disable_numparse=True)


def pick(rows: Sequence[Sequence[str]], headers: Sequence[str], keep: Sequence[str]
         ) -> list[list[str]]:
    """The cells of ``rows`` under the headers in ``keep``, in ``keep``'s order."""
    where = [list(headers).index(h) for h in keep]
    return [[row[i] for i in where] for row in rows]


def dropping(
    rows: Sequence[Sequence[str]], headers: Sequence[str], drop_order: Sequence[str],
    width: int,
) -> str | None:
    """The table with the columns of ``drop_order`` given up, first to last, until it fits
    ``width``; None when it does not fit even without all of them."""
    shown = list(headers)
    for dropped in (None, *drop_order):
        if dropped is not None:
            shown.remove(dropped)
        text = simple_table(pick(rows, headers, shown), shown)
        if text_width(text) <= width:
            return text
    return None


def record(title: str, pairs: Sequence[tuple[str, str]], width: int, indent: int = 2
           ) -> list[str]:
    """``title`` on its own line, then ``name: value`` pairs joined by ``; `` on lines of at
    most ``width`` (a pair is never broken; one longer than a line stands alone)."""
    lines = [title]
    lead = " " * indent
    current = ""
    for name, value in pairs:
        item = f"{name}: {value}"
        if current and len(lead) + len(current) + 2 + len(item) > width:
            lines.append(lead + current)
            current = ""
        current = f"{current}; {item}" if current else item
    if current:
        lines.append(lead + current)
    return lines


def records(
    rows: Sequence[Sequence[str]], headers: Sequence[str], width: int, suffix: str = ""
) -> str:
    """One record per row: its first cell as the title, the others as ``header: value``."""
    out: list[str] = []
    for row in rows:
        pairs = [(h, cell) for h, cell in zip(headers[1:], row[1:], strict=True) if h]
        out.extend(record(row[0] + suffix, pairs, width))
    return "\n".join(out)


def fitted(
    rows: Sequence[Sequence[str]], headers: Sequence[str], drop_order: Sequence[str],
    width: int | None,
) -> str:
    """The table at ``width``: all of it when it fits (or no width), else with columns
    dropped in ``drop_order``, else every row as a record of all its cells."""
    text = simple_table(rows, headers)
    if width is None or text_width(text) <= width:
        return text
    return dropping(rows, headers, drop_order, width) or records(rows, headers, width)


def column_groups(
    rows: Sequence[Sequence[str]], headers: Sequence[str], keys: int, width: int
) -> list[str]:
    """Every column at ``width``: the first ``keys`` columns repeated in each of as few
    tables as hold the others in order, each table fitting ``width`` where a column can."""
    tables: list[str] = []
    start = keys
    while start < len(headers):
        end = start + 1
        while end < len(headers):
            shown = [*range(keys), *range(start, end + 1)]
            text = simple_table([[r[i] for i in shown] for r in rows],
                                [headers[i] for i in shown])
            if text_width(text) > width:
                break
            end += 1
        shown = [*range(keys), *range(start, end)]
        tables.append(simple_table([[r[i] for i in shown] for r in rows],
                                   [headers[i] for i in shown]))
        start = end
    return tables
