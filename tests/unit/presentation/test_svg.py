"""The topology picture: golden structure checks on every generated topology.

Each CPU and device appears exactly once, is coloured by the claim that holds it (the legend's
colour for that claim), health draws the outline, and the file is self-contained.
"""

from __future__ import annotations

import re
from collections import Counter
from xml.etree import ElementTree as ET

import pytest

from driver.inventory.model import Gpu, Inventory, Nic
from driver.presentation.svg import (
    FREE,
    HEALTH_STROKE,
    PALETTE,
    Overlay,
    overlay_from_claims,
    render_html,
    render_svg,
)
from tests.unit.inventory.trees import inventory

NS = {"s": "http://www.w3.org/2000/svg"}
TOPOLOGY_NAMES = ("dgx", "workstation", "cloud_vm", "huge", "hostile")


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text.encode())


def _fill(group: ET.Element) -> str:
    rect = group.find("s:rect", NS)
    assert rect is not None
    return rect.attrib["fill"]


def _claims(inv: Inventory) -> list[tuple[str, list[str], list[int]]]:
    """Three claims over whatever the topology has: a GPU+NIC, the VFs of one PF, CPUs only."""
    vfs = [n.name for n in inv.nics if n.sriov_vf][:3]
    first = [g.name for g in inv.gpus[:1]] + [n.name for n in inv.nics if not n.sriov_vf][:1]
    cpus = [c.id for c in inv.cpus]
    return [
        ("default/train-a", first, cpus[:4]),
        ("team-b/rdma", vfs, cpus[4:6]),
        ("ops/cpu-only", [inv.numa_nodes[0].name], cpus[6:7]),
    ]


@pytest.mark.parametrize("name", TOPOLOGY_NAMES)
def test_every_cpu_and_device_appears_once(name: str) -> None:
    inv = inventory(name)
    svg = _parse(render_svg(inv))
    cpus = Counter(g.attrib["data-cpu"] for g in svg.iter(f"{{{NS['s']}}}g") if "data-cpu" in g.attrib)
    devices = Counter(
        g.attrib["data-device"] for g in svg.iter(f"{{{NS['s']}}}g") if "data-device" in g.attrib
    )
    assert cpus == Counter(str(c.id) for c in inv.cpus)
    assert devices == Counter(d.name for _, d in inv.devices())


@pytest.mark.parametrize("name", TOPOLOGY_NAMES)
def test_colours_match_holders_and_legend(name: str) -> None:
    inv = inventory(name)
    claims = _claims(inv)
    svg = _parse(render_svg(inv, overlay_from_claims(claims)))
    legend = {
        g.attrib["data-claim"]: _fill(g) for g in svg.iter(f"{{{NS['s']}}}g") if "data-claim" in g.attrib
    }
    named = [key for key, devices, cpus in claims if devices or cpus]
    assert sorted(legend) == sorted(named)
    assert len(set(legend.values())) == len(legend)  # three claims, three colours
    held_devices = {d: key for key, devices, _ in claims for d in devices}
    held_cpus = {str(c): key for key, _, cpus in claims for c in cpus}
    for g in svg.iter(f"{{{NS['s']}}}g"):
        if "data-cpu" in g.attrib:
            holder = held_cpus.get(g.attrib["data-cpu"])
        elif "data-device" in g.attrib:
            holder = held_devices.get(g.attrib["data-device"])
        else:
            continue
        assert g.attrib.get("data-holder") == holder
        assert _fill(g) == (legend[holder] if holder else FREE)


def test_dgx_vfs_fold_under_their_pf_with_a_count() -> None:
    inv = inventory("dgx")
    svg = _parse(render_svg(inv))
    pfs = [n for n in inv.nics if not n.sriov_vf]
    assert len(pfs) == 8 and len(inv.nics) == 72
    for pf in pfs:
        box = next(g for g in svg.iter(f"{{{NS['s']}}}g") if g.attrib.get("data-device") == pf.name)
        inside = [
            g.attrib["data-device"] for g in box.iter(f"{{{NS['s']}}}g") if g.attrib.get("class") == "vf"
        ]
        assert inside == [n.name for n in inv.nics if n.pf_bus_id == pf.pci.bus_id]
        texts = [t.text or "" for t in box.iter(f"{{{NS['s']}}}text")]
        assert "8 VFs:" in texts and any("8/16 VFs" in t for t in texts)


def test_gpus_sit_under_their_pcie_root_inside_their_numa_node() -> None:
    inv = inventory("dgx")
    svg = _parse(render_svg(inv))
    for node in svg.iter(f"{{{NS['s']}}}g"):
        if node.attrib.get("class") != "numa-node":
            continue
        numa = int(node.attrib["data-numa"])
        chips = [
            g.attrib["data-device"]
            for g in node.iter(f"{{{NS['s']}}}g")
            if g.attrib.get("class") == "cpu-device"
        ]
        assert chips == [f"cpu-numa{numa}"]
        for root in node.iter(f"{{{NS['s']}}}g"):
            if root.attrib.get("class") == "pcie-root":
                for dev in root.iter(f"{{{NS['s']}}}g"):
                    name = dev.attrib.get("data-device")
                    if name:
                        found = inv.find(name)
                        assert isinstance(found, Gpu | Nic)
                        assert (found.pci.numa_node, found.pci.pcie_root) == (numa, root.attrib["data-root"])


def test_smt_threads_share_a_core_box_and_l3_groups_are_drawn() -> None:
    inv = inventory("dgx")
    svg = _parse(render_svg(inv))
    l3 = [g for g in svg.iter(f"{{{NS['s']}}}g") if g.attrib.get("class") == "l3"]
    assert len(l3) == len({(c.package_id, c.l3_id) for c in inv.cpus})
    cores = [r for g in l3 for r in g.findall("s:rect", NS) if r.attrib.get("class") == "core"]
    assert len(cores) == len({(c.package_id, c.die_id, c.core_id) for c in inv.cpus}) == 112


def test_health_outline_and_taint() -> None:
    inv = inventory("dgx")
    sick, unsure = inv.gpus[2].name, inv.nics[0].name
    overlay = Overlay(
        health={sick: ("Unhealthy", "GpuLost"), unsure: ("Unknown", "AdminDown")}, tainted=frozenset({sick})
    )
    svg = _parse(render_svg(inv, overlay))
    by_name = {g.attrib["data-device"]: g for g in svg.iter(f"{{{NS['s']}}}g") if "data-device" in g.attrib}
    rect = by_name[sick].find("s:rect", NS)
    assert rect is not None
    assert (rect.attrib["stroke"], rect.attrib.get("stroke-dasharray")) == (HEALTH_STROKE["Unhealthy"], "5 3")
    assert (
        by_name[sick].attrib["data-health"] == "Unhealthy" and by_name[sick].attrib["data-tainted"] == "true"
    )
    title = by_name[sick].find("s:title", NS)
    assert (
        title is not None and "Unhealthy (GpuLost)" in (title.text or "") and "tainted" in (title.text or "")
    )
    unsure_rect = by_name[unsure].find("s:rect", NS)
    assert unsure_rect is not None and unsure_rect.attrib["stroke"] == HEALTH_STROKE["Unknown"]
    healthy = by_name[inv.gpus[0].name].find("s:rect", NS)
    assert healthy is not None and healthy.attrib["stroke"] not in HEALTH_STROKE.values()


def test_more_claims_than_colours_still_get_a_legend_entry_each() -> None:
    inv = inventory("huge")
    claims: list[tuple[str, list[str], list[int]]] = [
        (f"ns/c{k}", [], [inv.cpus[k].id]) for k in range(len(PALETTE) + 3)
    ]
    svg = _parse(render_svg(inv, overlay_from_claims(claims)))
    legend = [g.attrib["data-claim"] for g in svg.iter(f"{{{NS['s']}}}g") if "data-claim" in g.attrib]
    assert legend == [key for key, _, _ in claims]


def test_self_contained_and_hostile_names_escaped() -> None:
    """No external reference (fonts, scripts, images, links) and markup in names stays text."""
    inv = inventory("hostile")
    text = render_svg(inv, overlay_from_claims([('x/<script>alert("1")</script>', [], [inv.cpus[0].id])]))
    svg = _parse(text)  # well-formed despite the hostile product name and claim key
    assert not list(svg.iter(f"{{{NS['s']}}}script"))
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text)
    assert "@import" not in text and "<image" not in text and "href" not in text


def test_two_cpu_vm_and_html_wrapper() -> None:
    inv = inventory("cloud_vm")
    svg = _parse(render_svg(inv))
    assert float(svg.attrib["width"]) < 900 and float(svg.attrib["height"]) < 700
    page = render_html(inv, overlay_from_claims([("default/a", [], [inv.cpus[0].id])]))
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and 'data-claim="default/a"' in page
    assert "<script" not in page


def test_dgx_fits_a_screen_width_and_stays_small() -> None:
    text = render_svg(inventory("dgx"))
    svg = _parse(text)
    assert float(svg.attrib["width"]) <= 1700
    assert len(text) < 400_000
