"""``--format html``: one self-contained page with its charts, opened in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fixtures.reports import hand_report

from mhaudit.cost.devices import get_profile
from mhaudit.render import render, render_reports
from mhaudit.render.style import RenderOptions
from mhaudit.whatif import spec_from_block, whatif

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def _page() -> str:
    report = hand_report()
    block = report.blocks[0]
    sweep = whatif(spec_from_block(block, "bfloat16"), get_profile("h100"))
    return render(report, "html", RenderOptions(sweeps=(sweep,)))


def test_page_is_self_contained_with_labelled_charts() -> None:
    page = _page()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    links = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", page)
    assert links == []  # nothing to fetch
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls == {"http://www.w3.org/2000/svg"}  # the SVG namespace, never fetched
    titles = re.findall(r"<svg[^>]*><title>([^<]+)</title>", page)
    assert titles == [
        "Roofline on NVIDIA H100 SXM (bfloat16)", "Memory breakdown",
        "Forward FLOPs per block", "HBM bytes moved per block",
        "estimated time vs h", "score matrix vs h", "KV cache vs h_kv (h = 4)",
    ]
    for label in ("arithmetic intensity [FLOP/B]", "attainable throughput [FLOP/s]",
                  "bytes (log scale)", "query heads h (log₂)", "roofline time [s]",
                  "KV cache per token [bytes]"):
        assert label in page
    assert page.count("current layout") >= 3  # marked on every what-if chart
    assert "What if: the head layout of layers.0.attn" in page
    assert "MHA005" in page and "Parameters and target" in page


def test_several_models_share_one_page_with_a_summary() -> None:
    page = render_reports([hand_report(), hand_report()], "html")
    assert page.count("<!DOCTYPE html>") == 1
    assert "<h1>mhaudit: 2 models</h1>" in page
    assert page.count("<title>Roofline on NVIDIA H100 SXM") == 2  # one per model


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (scripts/test.sh installs Debian's package "
                    "with apt-get when it runs as root)")
    return found


@pytest.mark.slow
def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    chromium = _chromium()
    page = tmp_path / "report.html"
    page.write_text(_page(), encoding="utf-8")
    shot = tmp_path / "shot.png"
    base = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run([*base, "--window-size=1280,2000", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1280)
    ink = (pixels.mean(axis=2) < 0.9).mean()
    assert ink > 0.03, f"screenshot is nearly blank ({ink:.1%} non-white pixels)"
    assert pixels.std() > 0.05
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert dom.count("<svg") == 7
    assert dom.count("<circle") > 10 and "<polyline" in dom


def test_new_renderers_do_not_import_torch() -> None:
    import sys

    code = ("import sys, mhaudit.render, mhaudit.render.gate, mhaudit.render.whatif, "
            "mhaudit.render.whatif_plot, mhaudit.render.rules.text; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
