"""Escaping per output format, and the ASCII fallback for streams that cannot encode."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st

from mhaudit.render import escape

HOSTILE = "a\n::error::b <i>&c\x1b[2J\x0bd|e*f"


def test_plain_shows_control_characters_and_defuses_workflow_commands() -> None:
    assert escape.plain(HOSTILE) == "a\\n::error::b <i>&c\\x1b[2J\\x0bd|e*f"
    assert escape.plain("::warning::x") == "\\::warning::x"


def test_defuse_lines_leaves_no_line_starting_with_two_colons() -> None:
    text = escape.defuse_lines("ok\n::error::x\n   ::notice::y")
    assert all(not line.lstrip().startswith("::") for line in text.splitlines())


def test_markdown_escapes_specials_but_not_underscores_inside_words() -> None:
    assert escape.markdown("layers.0.self_attn") == "layers.0.self_attn"
    assert escape.markdown("_x_ <b> a|b") == "\\_x\\_ \\<b\\> a\\|b"


def test_summary_is_html_escaped() -> None:
    assert escape.summary("<script>&") == "&lt;script&gt;&amp;"


def test_github_encoding_of_data_and_properties() -> None:
    assert escape.github_data("50%\r\nx") == "50%25%0D%0Ax"
    assert escape.github_property("a:b,c") == "a%3Ab%2Cc"


@given(st.text())
def test_xml_text_always_parses(text: str) -> None:
    element = ET.Element("case", name=escape.xml_text(text))
    element.text = escape.xml_text(text)
    ET.fromstring(ET.tostring(element, encoding="unicode"))


@given(st.text())
def test_plain_never_leaves_control_characters(text: str) -> None:
    shown = escape.plain(text)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert "\n" not in shown


def test_encodable_spells_symbols_in_ascii() -> None:
    assert escape.encodable("Δ 4·d² ×2 ≤ 8 µs — ok", "ascii") == "delta 4*d^2 x2 <= 8 us - ok"
    assert escape.encodable("Δ ×", "cp1252") == "delta ×"  # cp1252 has ×, not Δ
    assert escape.encodable("Δ", "utf-8") == "Δ"


def test_no_format_lets_a_raw_escape_sequence_through() -> None:
    from mhaudit.render.escape import github_data, github_property, html, markdown, plain

    name = "evil\x1b[31mRED\x1b[0m\u2028x"
    for shown_by in (plain, markdown, html, github_data, github_property):
        shown = shown_by(name)
        assert "\x1b" not in shown and "\u2028" not in shown, shown_by.__name__
    assert github_data("a\nb") == "a%0Ab"  # a workflow message keeps its line breaks
    assert html("a\nb") == "a\nb"  # a <pre> block keeps its lines
