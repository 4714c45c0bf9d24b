"""The table names a block's score form beside its implementation when it is no softmax."""

from __future__ import annotations

from dataclasses import replace

from fixtures.reports import hand_report

from mhaudit.data import BlockGroup
from mhaudit.render.table import block_rows


def test_a_channel_block_reads_channel_beside_its_implementation() -> None:
    report = hand_report()
    group = report.groups[0]
    impl = group.block.layout.implementation
    channel = replace(group.block, layout=replace(group.block.layout, score_form="channel"))
    changed = replace(report, groups=(BlockGroup(group.pattern, group.names, channel),
                                      *report.groups[1:]))
    assert block_rows(report)[0][4] == impl  # softmax: the implementation alone
    assert block_rows(changed)[0][4] == f"{impl} channel"
