"""A real browser draws the DGX topology picture: headless Chromium (Debian package ``chromium``).

Chromium parses the SVG as XML (a malformed file becomes a ``parsererror`` page), lays it out with
its own fonts and writes a PNG; the test reads the pixels back and finds the claim colours, the
unhealthy outline and ink. Skips, naming the reason, when Chromium is not installed (.ci/run
installs it).
"""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from driver.presentation.svg import HEALTH_STROKE, PALETTE, overlay_from_claims, render_html, render_svg
from harness.chromium import dump_dom, find_chromium, png_colours, png_size, screenshot
from tests.unit.inventory.trees import inventory

BROWSER = find_chromium()
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="headless Chromium not installed (apt-get install chromium; .ci/run does)"
)


def test_chromium_renders_the_dgx_picture(tmp_path: Path) -> None:
    assert BROWSER is not None
    inv = inventory("dgx")
    vfs = [n.name for n in inv.nics if n.sriov_vf]
    overlay = overlay_from_claims(
        [
            ("default/train", [inv.gpus[0].name, inv.nics[0].name], range(0, 8)),
            ("ml/infer", vfs[:4], range(8, 12)),
        ],
        health={inv.gpus[5].name: ("Unhealthy", "GpuLost")},
    )
    text = render_svg(inv, overlay, title="dgx")
    width, height = (int(float(v)) for v in ET.fromstring(text.encode()).attrib["viewBox"].split()[2:])
    page = tmp_path / "dgx.svg"
    page.write_text(text)
    dom = dump_dom(BROWSER, page)
    assert "parsererror" not in dom and "data-device" in dom
    png = tmp_path / "dgx.png"
    screenshot(BROWSER, page, png, size=(width, height))
    data = png.read_bytes()
    assert png_size(data) == (width, height)
    colours = png_colours(data)
    wanted = {PALETTE[0][1:], PALETTE[1][1:], HEALTH_STROKE["Unhealthy"][1:], "222222"}
    assert wanted <= colours, f"missing in the PNG: {wanted - colours}"


def test_chromium_loads_the_html_page(tmp_path: Path) -> None:
    assert BROWSER is not None
    inv = inventory("cloud_vm")
    page = tmp_path / "vm.html"
    page.write_text(render_html(inv, overlay_from_claims([("default/a", [inv.gpus[0].name], [0])])))
    dom = dump_dom(BROWSER, page)
    assert "<svg" in dom and 'data-claim="default/a"' in dom
