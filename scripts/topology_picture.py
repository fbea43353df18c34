#!/usr/bin/env python3
"""Regenerate docs/topology-dgx.png: the generated DGX topology with three example claims, drawn by
``driver.presentation.svg`` and rasterized by headless Chromium. Run from the repo root:
``.venv/bin/python scripts/topology_picture.py``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree as ET

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # harness/ (the host-tree generator) is not installed

from driver.inventory.discovery import discover  # noqa: E402 (needs REPO on sys.path)
from driver.presentation.svg import build_svg, overlay_from_claims  # noqa: E402
from harness.chromium import find_chromium, screenshot  # noqa: E402
from harness.hosttree import write_host_tree  # noqa: E402
from harness.topologies import dgx  # noqa: E402

OUT = Path("docs/topology-dgx.png")


def main() -> int:
    browser = find_chromium()
    if browser is None:
        sys.stderr.write("chromium not found (apt-get install chromium)\n")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        inv = discover(write_host_tree(Path(tmp) / "dgx", dgx), use_nvml=False)
        vfs = [n.name for n in inv.nics if n.sriov_vf]
        overlay = overlay_from_claims(
            [
                (
                    "default/llm-train",
                    [g.name for g in inv.gpus[:2]] + [inv.nics[0].name, "cpu-numa0"],
                    [*range(2, 10), *range(114, 122)],
                ),
                (
                    "inference/vllm-0",
                    [inv.gpus[4].name, *vfs[40:42], "cpu-numa1"],
                    [*range(56, 60), *range(168, 172)],
                ),
                ("batch/etl", ["cpu-numa1"], range(100, 108)),
            ],
            health={inv.gpus[7].name: ("Unhealthy", "GpuLost")},
            tainted=[inv.gpus[7].name],
            reserved_cpus=[0, 112],
        )
        tree = build_svg(inv, overlay, title="numadra discover: dgx-h100-01 (generated DGX topology)")
        page = Path(tmp) / "dgx.svg"
        page.write_text(ET.tostring(tree, encoding="unicode"))
        width, height = int(float(tree.attrib["width"])), int(float(tree.attrib["height"]))
        screenshot(browser, page, OUT, size=(width, height))
    print(f"{OUT}: {OUT.stat().st_size} bytes, {width}x{height}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
