"""``numadra discover -o svg|html`` and ``numadra state -o svg`` on generated trees and a real journal."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from driver.cli import main
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import PreparedDevice
from driver.state import Journal, JournalEntry, journal_path
from tests.unit.inventory.trees import host_tree, inventory

SVG = "{http://www.w3.org/2000/svg}"


def _groups(svg: ET.Element, attr: str) -> dict[str, ET.Element]:
    return {g.attrib[attr]: g for g in svg.iter(f"{SVG}g") if attr in g.attrib}


def test_discover_svg_draws_every_device_and_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    root = str(host_tree("dgx"))
    assert (
        main(["discover", "--host-root", root, "--node-name", "dgx-1", "-o", "svg", "--reserved-cpus", "0"])
        == 0
    )
    svg = ET.fromstring(capsys.readouterr().out.encode())
    inv = inventory("dgx")
    assert len(_groups(svg, "data-cpu")) == 224 and len(_groups(svg, "data-device")) == 8 + 72 + 2
    reserved = _groups(svg, "data-cpu")["0"].find(f"{SVG}rect")
    assert reserved is not None and reserved.attrib["fill"] == "#c8c8c8"
    assert {t.text for t in svg.iter(f"{SVG}title")} >= {"numadra discover: dgx-1"}
    assert inv.gpus[0].name in _groups(svg, "data-device")


def test_discover_svg_shows_a_nic_without_carrier_as_unhealthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The one health reading per device marks a NIC whose carrier is 0 (the driver would taint it)."""
    import shutil

    root = tmp_path / "ws"
    shutil.copytree(host_tree("workstation"), root, symlinks=True)
    nic = next(n for n in inventory("workstation").nics if not n.sriov_vf)
    (root / "sys/class/net" / nic.interface_name / "carrier").write_text("0\n")
    assert main(["discover", "--host-root", str(root), "--node-name", "ws", "-o", "svg"]) == 0
    svg = ET.fromstring(capsys.readouterr().out.encode())
    box = _groups(svg, "data-device")[nic.name]
    assert box.attrib["data-health"] == "Unhealthy"


def test_discover_html_wraps_the_svg(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["discover", "--host-root", str(host_tree("cloud_vm")), "--node-name", "vm", "-o", "html"]) == 0
    )
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<script" not in page


def test_state_svg_colours_the_journal_claims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = inventory("dgx")
    gpu, vf = inv.gpus[1].name, next(n for n in inv.nics if n.sriov_vf).name
    journal = Journal(journal_path(tmp_path))
    journal.put(
        JournalEntry(
            "team-a",
            "train",
            "u1",
            (
                PreparedDevice(("gpu",), "dgx-1", gpu, ("numadra.dev/device=u1-gpu",)),
                PreparedDevice(("nic",), "dgx-1", vf, ("numadra.dev/device=u1-nic",)),
                PreparedDevice(("cpu",), "dgx-1", "cpu-numa0", ("numadra.dev/device=u1-cpu",)),
            ),
            pinning=ClaimPinning(
                "u1", (CpuAssignment("cpu", CpuMode.EXCLUSIVE, frozenset({4, 5, 116, 117}), frozenset({0})),)
            ),
        )
    )
    journal.put(
        JournalEntry(
            "team-b",
            "watcher",
            "u2",
            (PreparedDevice(("gpu",), "dgx-1", gpu, ("numadra.dev/device=u2-gpu",)),),
            admin_devices=(gpu,),
        )
    )
    journal.save()
    args = ["state", "--plugin-dir", str(tmp_path), "--host-root", str(host_tree("dgx")), "-o", "svg"]
    capsys.readouterr()  # the set-up's log lines: structlog's defaults print to stdout until main runs
    assert main(args) == 0
    svg = ET.fromstring(capsys.readouterr().out.encode())
    legend = _groups(svg, "data-claim")
    assert list(legend) == ["team-a/train"]  # admin access blocks nobody: not drawn as a holder
    colour = legend["team-a/train"].find(f"{SVG}rect")
    assert colour is not None
    cpus, devices = _groups(svg, "data-cpu"), _groups(svg, "data-device")
    held = {k for k, g in cpus.items() if g.attrib.get("data-holder") == "team-a/train"}
    assert held == {"4", "5", "116", "117"}
    for name in (gpu, vf, "cpu-numa0"):
        rect = devices[name].find(f"{SVG}rect")
        assert rect is not None and rect.attrib["fill"] == colour.attrib["fill"]
