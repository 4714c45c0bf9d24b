"""``--format html``: one self-contained page with its charts, opened in headless Chromium."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fixtures.reports import hand_report, layer_block

from mhaudit.cost.devices import get_profile
from mhaudit.data import BlockDecode, BlockGroup, DecodeCost, LayoutSpec, Report
from mhaudit.render import render, render_reports
from mhaudit.render.html.labels import Box, LabelLayout, text_box
from mhaudit.render.html.whatif import whatif_block
from mhaudit.render.style import RenderOptions
from mhaudit.units import nbytes
from mhaudit.whatif import spec_from_block, whatif

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def _page() -> str:
    report = hand_report()
    block = report.blocks[0]
    sweep = whatif(spec_from_block(block, "bfloat16"), get_profile("h100"))
    return render(report, "html", RenderOptions(sweeps=(sweep,)))


def _svgs(page: str) -> dict[str, str]:
    """Each chart's SVG by its title."""
    return {m.group(1): m.group(0) for m in
            re.finditer(r"<svg[^>]*><title>([^<]+)</title>.*?</svg>", page, re.S)}


@pytest.fixture(scope="module")
def phased() -> Report:
    """A small Llama audited with a training step, a decode step and a parallel plan."""
    from mhaudit.api import audit_target

    return audit_target(str(ROOT / "examples" / "llama_gqa.py"), train=True, decode=True,
                        parallel="tp=2,fsdp=2")


def test_page_is_self_contained_with_labelled_charts() -> None:
    page = _page()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    links = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", page)
    assert links and all(link.startswith("#report-") for link in links)  # in-page only
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls == {"http://www.w3.org/2000/svg"}  # the SVG namespace, never fetched
    assert list(_svgs(page)) == [
        "Roofline on NVIDIA H100 SXM (bfloat16)", "What makes up the peak",
        "Forward FLOPs per block", "HBM bytes moved per block",
        "estimated time vs h", "score matrix vs h", "KV cache vs h_kv (h = 4)",
    ]
    for label in ("arithmetic intensity [FLOP/B] (log scale)", "bytes alive together",
                  "query heads h (log₂ spacing)", "roofline time [s]",
                  "KV cache per token [bytes]", "HBM bytes moved</dt>"):
        assert label in page
    assert page.count("current layout") >= 3  # marked on every what-if chart
    assert "What if: the head layout of layers.0.attn" in page
    assert "MHA005" in page and "Parameters and target" in page
    for target in set(links):
        assert f'id="{target[1:]}"' in page


def test_what_if_table_stands_beside_its_charts() -> None:
    page = _page()
    pair = page[page.index('<div class="whatif-pair">'):]
    table, charts = pair.index('<table class="whatif">'), pair.index("<svg")
    assert table < charts
    assert '<tr class="current"><td>4</td><td>4</td><td>64</td>' in pair


def test_peak_is_drawn_as_what_is_alive_together_and_scores_stand_apart() -> None:
    page = _page()
    peak = _svgs(page)["What makes up the peak"]
    assert "activations live at the peak 1.5 MiB" in peak and "parameters 1.91 MiB" in peak
    assert "scores" not in peak  # never a bar beside quantities it is not live with
    table = page[page.index('<table class="per-block">'):]
    assert "<td>layers.{0..1}.attn ×2</td><td>128 KiB</td>" in table
    assert "not live together" in table


def _many_layers(n: int) -> Report:
    """The hand report with ``n`` identical layers folded into one group, and a decode step."""
    base = hand_report()
    layers = tuple(layer_block(i) for i in range(n))
    group = BlockGroup(f"layers.{{0..{n - 1}}}.attn", tuple(b.name for b in layers), layers[0])
    decode = DecodeCost(
        context=128, batch_size=1, flops_per_step=50_000_000, weight_bytes=2_000_000,
        kv_read_bytes=n * 131_072, kv_write_bytes=n * 1_024, bytes_per_step=0,
        time_per_step_s=2e-6, tokens_per_s=5e5, bound="memory", kv_cache_bytes=n * 131_072,
        param_bytes=2_000_000, memory_bytes=80 * 2**30, fits=True,
        blocks=tuple(BlockDecode(b.name, 1_200_000, 131_072, 1.5e-7) for b in layers))
    decode = dataclasses.replace(decode, bytes_per_step=2_000_000 + n * 132_096)
    return dataclasses.replace(base, blocks=layers, groups=(group,), findings=(),
                               decode=decode)


def test_folded_groups_are_drawn_once_with_their_count() -> None:
    page = render(_many_layers(32), "html")
    charts = _svgs(page)
    for title in ("Forward FLOPs per block", "HBM bytes moved per block"):
        assert charts[title].count("<rect") == 1
        assert ">layers.{0..31}.attn ×32</text>" in charts[title]
    roof = charts["Roofline on NVIDIA H100 SXM (bfloat16)"]
    for name in ("decode layers.{0..31}.attn ×32", "prefill layers.{0..31}.attn ×32"):
        assert roof.count(f">{name}</text>") == 1  # 32 points drawn once, one label
        assert roof.count(f"<title>{name}</title>") == 1


def test_decode_points_sit_at_their_own_intensity() -> None:
    report = _many_layers(4)
    page = render(report, "html")
    roof = _svgs(page)["Roofline on NVIDIA H100 SXM (bfloat16)"]
    circles = re.findall(r'<circle class="mark" cx="([\d.]+)" cy="([\d.]+)" r="5"', roof)
    assert len(circles) == 3  # prefill group, decode group, whole decode step
    xs = {float(x) for x, _ in circles}
    assert len(xs) == 3  # none pinned to the axis floor beside another
    assert min(xs) > 96 + 1  # inside the plot, right of its left edge


def test_bar_axes_are_linear_from_zero_with_readable_ticks() -> None:
    charts = _svgs(_page())
    flops = charts["Forward FLOPs per block"]
    ticks = re.findall(r'text-anchor="middle">([^<]+)</text>', flops)
    assert ticks[:3] == ["0 FLOP", "20 MFLOP", "40 MFLOP"]
    moved = re.findall(r'text-anchor="middle">([^<]+)</text>',
                       charts["HBM bytes moved per block"])
    assert moved[0] == "0 B" and "256 KiB" in moved
    spec = LayoutSpec(d_model=2048, heads=16, kv_heads=16, seq_len=128, name="attn")
    block = whatif_block(whatif(spec, get_profile("h100")))
    assert ">1,024</text>" in block and " k</text>" not in block


def test_an_encoder_gets_no_kv_chart() -> None:
    pool = hand_report().blocks[2]  # cross-attention: no cache grows with tokens
    sweep = whatif(spec_from_block(pool, "bfloat16"), get_profile("h100"))
    block = whatif_block(sweep)
    assert "KV cache vs h_kv" in block and "not applicable" in block
    assert "<title>KV cache vs h_kv" not in block


def test_several_models_share_one_page_with_linked_summary() -> None:
    page = render_reports([hand_report(), hand_report()], "html")
    assert page.count("<!DOCTYPE html>") == 1
    assert "<h1>mhaudit: 2 models</h1>" in page
    assert page.count("<title>Roofline on NVIDIA H100 SXM") == 2  # one per model
    summary = page[:page.index("<section>")]
    assert summary.count('<a href="#model-1">') == 1 and '<a href="#model-2">' in summary
    assert 'id="model-1"' in page and 'id="model-2"' in page
    assert 'id="model-2-costs"' in page


FIGURE = re.compile(r"\d[\d,.]*(?: ?(?:[kMGTP]?FLOP|[KMGT]iB|B|[µnm]?s|tokens/s|GPUs))?")


def test_phase_figures_of_the_table_are_on_the_page(phased: Report) -> None:
    table = render(phased, "table")
    phases = table[table.index("Phases:"):].split("\n\n")[0]
    page = render(phased, "html")
    lines = [line.strip() for line in phases.splitlines()[1:]]
    assert any(line.startswith("training step (") for line in lines)
    shown = re.sub(r"<[^>]+>", " ", page).replace("&amp;", "&")
    for figure in {f for line in lines for f in FIGURE.findall(line)}:
        assert figure in shown, figure
    t, d = phased.training, phased.decode
    assert t is not None and d is not None
    charts = _svgs(page)
    training = next(svg for title, svg in charts.items() if title.startswith("Training step"))
    for part in ("params", "grads", "optimizer states", "activations", "temporaries"):
        assert f">{part} " in training
    assert f"Training step: peak {nbytes(t.peak_bytes)} in the {t.peak_phase}" in charts
    decode = next(svg for title, svg in charts.items() if title.startswith("Decode step"))
    assert "KV cache read" in decode and "weights read" in decode
    assert 'id="report-phases"' in page


def test_parallel_section_per_device_and_by_collective(phased: Report) -> None:
    page = render(phased, "html")
    assert 'id="report-parallel"' in page
    cost = phased.training.parallel if phased.training else None
    assert cost is not None
    charts = _svgs(page)
    devices = charts["training step: bytes per device, tp=2,fsdp=2,pp=1"]
    for part in ("params", "grads", "optimizer states", "temporaries"):
        assert f">{part} " in devices
    sent = charts["training step: bytes each device sends per step"]
    for kind in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send/recv"):
        assert f">{kind}</text>" in sent
    assert f"{cost.comm_calls_per_step.all_reduce:,} calls" in sent
    facts = page[page.index('<table class="facts">'):]
    assert "<th>plan</th><td>tp=2,fsdp=2,pp=1 on 4 GPUs</td>" in facts
    assert f"<th>max batch per replica</th><td>{cost.max_batch_size:,}</td>" in facts
    assert "decode step: bytes per device, tp=2,fsdp=2,pp=1" in charts


def test_labels_placed_in_one_spot_never_overlap() -> None:
    layout = LabelLayout(Box(0, 0, 400, 300))
    boxes = []
    for i in range(30):
        spot = layout.place(200, 150, f"decode layers.{i}.attn")
        if spot is not None:
            boxes.append(text_box(spot.x, spot.y, f"decode layers.{i}.attn", spot.anchor))
    assert len(boxes) >= 20
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (scripts/test.sh installs Debian's package "
                    "with apt-get when it runs as root)")
    return found


OVERLAPS = """<script>
const texts = [...document.querySelectorAll('svg text')]
  .map(t => [t.textContent, t.getBoundingClientRect()]).filter(([, r]) => r.width > 0);
const hits = [];
for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
  const a = texts[i][1], b = texts[j][1];
  const ox = Math.min(a.right, b.right) - Math.max(a.left, b.left);
  const oy = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
  if (ox > 1 && oy > 1) hits.push(texts[i][0] + ' | ' + texts[j][0]);
}
const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
const out = document.createElement('pre');
out.id = 'measured';
out.textContent = JSON.stringify({labels: texts.length, overlaps: hits, ids: ids});
document.body.appendChild(out);
</script>"""


def _measure(chromium: str, html: str, tmp_path: Path) -> dict[str, object]:
    """The page opened in headless Chromium: its anchors and every pair of chart labels
    whose rendered boxes overlap."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    page = tmp_path / "measure.html"
    page.write_text(html.replace("</body>", OVERLAPS + "</body>"), encoding="utf-8")
    dom = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p'}",
                          "--window-size=1400,3000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, "the measuring script did not run"
    return dict(json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<")
                           .replace("&gt;", ">").replace("&quot;", '"')))


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


@pytest.mark.slow
def test_every_section_is_there_and_no_two_labels_overlap(phased: Report,
                                                          tmp_path: Path) -> None:
    chromium = _chromium()
    control = ('<html><body><svg width="200" height="50"><text x="10" y="20">label one</text>'
               '<text x="14" y="22">label two</text></svg></body></html>')
    assert _measure(chromium, control, tmp_path / "control")["overlaps"] == [
        "label one | label two"]  # the measure sees an overlap when there is one
    pages = {"hand": _page(), "phases": render(phased, "html"),
             "folded": render(_many_layers(32), "html"),
             "many": render_reports([hand_report(), phased], "html")}
    sections = {"hand": ("findings", "costs", "whatif-0", "details", "units"),
                "phases": ("costs", "phases", "parallel", "details", "units"),
                "folded": ("costs", "phases", "details", "units")}
    for title in ("Live memory over the training step", "Decode bytes per step vs context",
                  "Decode time per step vs context"):
        assert f"<title>{title}" in pages["phases"], title  # measured with the rest
    for name, html in pages.items():
        measured = _measure(chromium, html, tmp_path / name)
        assert measured["overlaps"] == [], name
        assert isinstance(measured["labels"], int) and measured["labels"] > 30
        found = measured["ids"]
        assert isinstance(found, list)
        ids = set(found)
        prefixes = ("model-1", "model-2") if name == "many" else ("report",)
        for prefix in prefixes:
            wanted = sections.get(name, ("costs", "details", "units"))
            assert {f"{prefix}-{s}" for s in wanted} <= ids, (name, ids)


def test_new_renderers_do_not_import_torch() -> None:
    import sys

    code = ("import sys, mhaudit.render, mhaudit.render.gate, mhaudit.render.whatif, "
            "mhaudit.render.whatif_plot, mhaudit.render.html, mhaudit.render.rules.text; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_training_timeline_marks_its_peak_and_decode_runs_over_context(phased: Report) -> None:
    t, d = phased.training, phased.decode
    assert t is not None and d is not None and t.timeline_peak_index is not None
    charts = _svgs(render(phased, "html"))
    timeline = charts[f"Live memory over the training step (peak {nbytes(t.peak_bytes)})"]
    assert f"peak {nbytes(t.peak_bytes)} ({t.peak_phase})" in timeline
    assert timeline.count("<polyline") >= 2  # forward and backward, the update a point
    for step in ("forward", "backward", "optimizer"):
        assert f">{step}</text>" in timeline
    page = render(phased, "html")
    assert len(d.by_context) >= 5 and d.context in [p.context for p in d.by_context]
    table = page[page.index("<th>context</th>"):]
    for point in d.by_context:
        assert f"<td>{point.context:,}</td><td>{nbytes(point.kv_read_bytes)}</td>" in table
    assert '<tr class="current"><td>128</td>' in table
    for title in ("Decode bytes per step vs context", "Decode time per step vs context"):
        assert "context 128" in charts[title]
    assert "not traced" in page


def test_no_timeline_or_context_curve_without_their_data(phased: Report) -> None:
    assert phased.training is not None and phased.decode is not None
    bare = dataclasses.replace(
        phased, training=dataclasses.replace(phased.training, timeline=(),
                                             timeline_peak_index=None),
        decode=dataclasses.replace(phased.decode, by_context=()))
    page = render(bare, "html")
    assert "Live memory over the training step" not in page
    assert "vs context" not in page and "Training step: peak" in page


def test_every_table_scrolls_inside_its_section_and_headers_wrap(phased: Report) -> None:
    """A wide table scrolls in its own box instead of being cut by its grid cell, and a
    long header wraps rather than widening its column past the cell ("KV cache p…")."""
    sweep = whatif(spec_from_block(phased.blocks[0], "bfloat16"), get_profile("h100"))
    page = render(phased, "html", RenderOptions(sweeps=(sweep,)))
    tables = [m.start() for m in re.finditer(r"<table", page)]
    assert len(tables) >= 5
    for at in tables:
        assert page[:at].endswith('<div class="scroll">'), page[at - 60:at + 40]
    css = page[page.index("<style>"):page.index("</style>")]
    th = re.search(r"\nth \{([^}]*)\}", css)
    assert th and "white-space: normal" in th[1]
    assert re.search(r"\.scroll \{[^}]*overflow-x: auto", css)


def _long_names(n: int) -> Report:
    """The hand report with ``n`` blocks under long, distinct paths, one group each."""
    base = hand_report()
    names = [f"model.language_model.layers.{i}.self_attn" for i in range(n)]
    names.append("model.vision_tower.encoder.layers.0.self_attn")
    blocks = tuple(dataclasses.replace(layer_block(0), layout=dataclasses.replace(
        layer_block(0).layout, name=name)) for name in names)
    groups = tuple(BlockGroup(b.name, (b.name,), b) for b in blocks)
    return dataclasses.replace(base, blocks=blocks, groups=groups, findings=())


def _row_labels(svg: str) -> list[tuple[str, str]]:
    """Each text of the chart with the full name its title gives (the text itself when it
    has no title)."""
    import xml.etree.ElementTree as ET

    ns = "{http://www.w3.org/2000/svg}"
    out = []
    for node in ET.fromstring(svg).iter(f"{ns}text"):
        title = node.find(f"{ns}title")
        out.append((node.text or "", title.text or "" if title is not None else node.text or ""))
    return out


@pytest.mark.parametrize("report", [_long_names(12), _many_layers(4), hand_report()],
                         ids=["long", "folded", "hand"])
def test_no_label_is_cut_where_it_is_unique(report: Report) -> None:
    html = render(report, "html")
    svgs = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    assert svgs
    cut = 0
    for svg in svgs:
        labels = _row_labels(svg)
        full_names = {full for _, full in labels}
        for shown, full in labels:
            if "…" not in shown or shown == full:
                continue
            cut += 1
            head, tail = shown.split("…", 1)
            # a cut label is the full name's own start and end, its full name in the title
            assert full.startswith(head) and full.endswith(tail), (shown, full)
            others = [f for f in full_names if f != full]
            # ... and reads unlike every other name in the chart
            assert not any(o.startswith(head) and o.endswith(tail) and len(o) >= len(shown)
                           for o in others), (shown, others)
    if report.groups and report.groups[0].pattern.startswith("model."):
        assert cut > 0  # the long names are cut here, so the check above has run
        assert "model.….layers.11.self_attn" in html  # the layer index survives


@pytest.mark.parametrize(("label", "keep", "shown"), [
    ("layers.0.attn", 20, "layers.0.attn"),  # fits: as it is
    ("model.language_model.layers.11.self_attn", 32, "model.….layers.11.self_attn"),  # 27
    ("model.language_model.layers.11.self_attn", 20, "model.….11.self_attn"),  # 20
    # no dotted form fits: a third kept in front, two thirds at the end: 6 + 1 + 13 = 20
    ("a_long_undotted_block_name_of_forty_chars", 20, "a_long…f_forty_chars"),
])
def test_a_label_is_cut_from_the_middle(label: str, keep: int, shown: str) -> None:
    from mhaudit.render.html.labels import short_label

    assert short_label(label, keep) == shown
    assert len(shown) <= keep
