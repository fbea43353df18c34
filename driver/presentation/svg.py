"""The topology picture: one :class:`Inventory` (plus who holds what, and health) as a standalone SVG.

The anchor is hwloc's ``lstopo``: one box per NUMA node holding its CPUs (SMT threads side by side in
a core, cores grouped by the L3 they share), its memory and hugepages, and its GPUs and NICs under
their PCIe roots (a PF's VFs folded inside it as small numbered cells with a count). The NUMA
distance table is drawn as a small matrix. Claims colour the CPUs and devices they hold, named in a
legend (``namespace/name``); health draws the outline (red: Unhealthy, amber: Unknown, dashed:
tainted in the published slice).

Pure (data in, text out, same model as :mod:`driver.presentation.table`), built with
:mod:`xml.etree.ElementTree` so every label is escaped by the serializer, never by hand. Nothing
is loaded from the network: the generic ``monospace`` family, no scripts, so the file renders the
same offline, in a browser, or embedded in a README. Every CPU and device element carries
``data-cpu`` / ``data-device`` and, when held, ``data-holder``, so tests (and people with a DOM
inspector) can check the picture against the journal.

Sizes: a CPU cell is as wide as a three-digit CPU id in the label font needs; the picture grows
with the node (docs/deploy.md gives the sizes of the DGX and VM pictures, with the command).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar
from xml.etree import ElementTree as ET

from driver.inventory.cpulist import format_cpulist
from driver.inventory.model import Cpu, Gpu, Inventory, Nic, NumaNode
from driver.presentation.sizes import format_size, hugepage_size, memory_summary

__all__ = ["PALETTE", "Overlay", "build_svg", "overlay_from_claims", "render_html", "render_svg"]

_T = TypeVar("_T")
SVG_NS = "http://www.w3.org/2000/svg"

#: claim colours (Tableau 10 without its red and grey, which mean "unhealthy" and "free" here, plus
#: four lighter ones); a node with more claims reuses them in order, the legend still names each
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#edc948",
    "#76b7b2",
    "#ff9da7",
    "#9c755f",
    "#a0cbe8",
    "#8cd17d",
    "#d4a6c8",
    "#f1ce63",
)
FREE = "#ffffff"
RESERVED = "#c8c8c8"
HEALTH_STROKE = {"Unhealthy": "#d62728", "Unknown": "#e3a21a"}
_INK = "#222222"
_MUTED = "#666666"

_FONT = "monospace"
_CHAR = 0.6  # monospace advance per pixel of font size
_CELL = 22  # one CPU thread
_CELL_H = 18
_GAP = 4
_PAD = 8
_NODE_W = 760
_ROOT_W = (_NODE_W - 3 * _PAD) // 2
_VF_CELL = 20


@dataclass(frozen=True, slots=True)
class Overlay:
    """What the picture colours on top of the inventory.

    ``cpu_holders`` / ``device_holders``: CPU id or device name -> claims (``namespace/name``)
    holding it, in journal order (a shared pool or admin access can give several); ``health``:
    device name -> (state, reason) for devices that are not Healthy; ``tainted``: device names
    carrying a taint in the published slice; ``reserved_cpus``: kept out of the cpus capacity.
    """

    cpu_holders: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    device_holders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    health: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    tainted: frozenset[str] = frozenset()
    reserved_cpus: frozenset[int] = frozenset()

    def claims(self) -> list[str]:
        """Every claim named anywhere, in first-seen order (devices first, then CPUs)."""
        seen: dict[str, None] = {}
        for holders in itertools.chain(self.device_holders.values(), self.cpu_holders.values()):
            seen.update(dict.fromkeys(holders))
        return list(seen)


def overlay_from_claims(
    claims: Iterable[tuple[str, Iterable[str], Iterable[int]]],
    *,
    health: Mapping[str, tuple[str, str]] | None = None,
    tainted: Iterable[str] = (),
    reserved_cpus: Iterable[int] = (),
) -> Overlay:
    """An :class:`Overlay` from ``(claim key, device names, CPU ids)`` per claim (the journal's view)."""
    cpus: dict[int, tuple[str, ...]] = {}
    devices: dict[str, tuple[str, ...]] = {}
    for key, names, cpu_ids in claims:
        for name in names:
            if key not in devices.get(name, ()):
                devices[name] = (*devices.get(name, ()), key)
        for cpu in cpu_ids:
            if key not in cpus.get(cpu, ()):
                cpus[cpu] = (*cpus.get(cpu, ()), key)
    return Overlay(
        cpu_holders=cpus,
        device_holders=devices,
        health=dict(health or {}),
        tainted=frozenset(tainted),
        reserved_cpus=frozenset(reserved_cpus),
    )


def _batched(items: Sequence[_T], size: int) -> list[Sequence[_T]]:
    return [items[k : k + size] for k in range(0, len(items), size)]


def _text_w(text: str, size: float) -> float:
    return len(text) * size * _CHAR


def _fit(text: str, width: float, size: float) -> str:
    """``text`` cut with an ellipsis to fit ``width`` px; only printable characters."""
    text = "".join(ch for ch in text if ch.isprintable())
    room = max(1, int(width / (size * _CHAR)))
    return text if len(text) <= room else text[: room - 1] + "…"


class _Canvas:
    """Appends shapes to one parent element; coordinates are absolute."""

    def __init__(self, parent: ET.Element, colours: Mapping[str, str]) -> None:
        self.parent = parent
        self.colours = colours

    def group(self, cls: str, **attrs: str) -> _Canvas:
        g = ET.SubElement(self.parent, "g", {"class": cls, **attrs})
        return _Canvas(g, self.colours)

    def rect(self, x: float, y: float, w: float, h: float, **attrs: str) -> ET.Element:
        base = {"x": _n(x), "y": _n(y), "width": _n(w), "height": _n(h)}
        return ET.SubElement(self.parent, "rect", {**base, **attrs})

    def text(self, x: float, y: float, value: str, size: float = 11, **attrs: str) -> ET.Element:
        el = ET.SubElement(self.parent, "text", {"x": _n(x), "y": _n(y), "font-size": _n(size), **attrs})
        el.text = value
        return el

    def fill_for(self, holders: Sequence[str]) -> str:
        return self.colours[holders[0]] if holders else FREE


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _title(el: ET.Element, text: str) -> None:
    """A hover tooltip (an SVG ``<title>`` child): the browser shows it, no script needed."""
    ET.SubElement(el, "title").text = text


def _device_attrs(name: str, holders: Sequence[str], overlay: Overlay) -> dict[str, str]:
    attrs = {"data-device": name}
    if holders:
        attrs["data-holder"] = " ".join(holders)
    state = overlay.health.get(name)
    if state is not None:
        attrs["data-health"] = state[0]
    if name in overlay.tainted:
        attrs["data-tainted"] = "true"
    return attrs


def _outline(name: str, overlay: Overlay) -> dict[str, str]:
    """Stroke of a device box: its health colour, dashed when tainted."""
    state = overlay.health.get(name)
    attrs = {"stroke": HEALTH_STROKE.get(state[0], _INK) if state else _INK}
    attrs["stroke-width"] = "3" if state else "1"
    if name in overlay.tainted:
        attrs["stroke-dasharray"] = "5 3"
    return attrs


def _health_note(name: str, overlay: Overlay) -> str:
    state = overlay.health.get(name)
    parts = [f"{state[0]} ({state[1]})" if state and state[1] else state[0]] if state else []
    if name in overlay.tainted:
        parts.append("tainted")
    return ", ".join(parts)


# -- CPUs --------------------------------------------------------------------------------------------


def _cores(cpus: Sequence[Cpu]) -> list[list[Cpu]]:
    """CPUs grouped into cores (same package, die, core id), threads in id order."""
    by_core: dict[tuple[int, int, int], list[Cpu]] = {}
    for cpu in sorted(cpus, key=lambda c: c.id):
        by_core.setdefault((cpu.package_id, cpu.die_id, cpu.core_id), []).append(cpu)
    return sorted(by_core.values(), key=lambda threads: threads[0].id)


def _cpu_block_height(cpus: Sequence[Cpu], width: float) -> float:
    height = 0.0
    for group in _l3_groups(cpus):
        height += _l3_height(group, width) + _GAP
    return height


def _l3_groups(cpus: Sequence[Cpu]) -> list[list[list[Cpu]]]:
    groups: dict[tuple[int, int], list[Cpu]] = {}
    for cpu in cpus:
        groups.setdefault((cpu.package_id, cpu.l3_id), []).append(cpu)
    return [_cores(g) for _, g in sorted(groups.items(), key=lambda kv: min(c.id for c in kv[1]))]


def _core_w(core: Sequence[Cpu]) -> float:
    return len(core) * _CELL + 2 * 2


def _rows(cores: Sequence[Sequence[Cpu]], width: float) -> list[list[Sequence[Cpu]]]:
    rows: list[list[Sequence[Cpu]]] = [[]]
    used = 0.0
    for core in cores:
        w = _core_w(core) + _GAP
        if rows[-1] and used + w > width:
            rows.append([])
            used = 0.0
        rows[-1].append(core)
        used += w
    return rows


def _l3_height(cores: Sequence[Sequence[Cpu]], width: float) -> float:
    return 16 + len(_rows(cores, width - 2 * _PAD)) * (_CELL_H + 4 + _GAP) + _PAD / 2


def _draw_cpus(
    c: _Canvas, cpus: Sequence[Cpu], x: float, y: float, *, width: float, overlay: Overlay
) -> float:
    for cores in _l3_groups(cpus):
        h = _l3_height(cores, width)
        g = c.group("l3")
        ids = [cpu.id for core in cores for cpu in core]
        g.rect(x, y, width, h, fill="#f4f4f4", stroke="#aaaaaa", rx="3")
        label = f"L3 shared by CPUs {format_cpulist(ids)}"
        g.text(x + _PAD, y + 12, _fit(label, width - 2 * _PAD, 10), 10, fill=_MUTED)
        cy = y + 16
        for row in _rows(cores, width - 2 * _PAD):
            cx = x + _PAD
            for core in row:
                cw = _core_w(core)
                core_el = g.rect(cx, cy, cw, _CELL_H + 4, fill="#e2e2e2", stroke="#999999", rx="2")
                core_el.set("class", "core")
                for k, cpu in enumerate(core):
                    _draw_cpu(g, cpu, cx + 2 + k * _CELL, cy + 2, overlay)
                cx += cw + _GAP
            cy += _CELL_H + 4 + _GAP
        y += h + _GAP
    return y


def _draw_cpu(c: _Canvas, cpu: Cpu, x: float, y: float, overlay: Overlay) -> None:
    holders = overlay.cpu_holders.get(cpu.id, ())
    reserved = cpu.id in overlay.reserved_cpus
    fill = c.fill_for(holders) if holders else (RESERVED if reserved else FREE)
    attrs = {"data-cpu": str(cpu.id), "class": "cpu"}
    if holders:
        attrs["data-holder"] = " ".join(holders)
    g = c.group("cpu-cell", **attrs)
    r = g.rect(x, y, _CELL - 1, _CELL_H, fill=fill, stroke=_INK, **{"stroke-width": "0.5"})
    if cpu.isolated:
        r.set("stroke-dasharray", "2 1")
    g.text(x + (_CELL - 1) / 2, y + 12.5, str(cpu.id), 9, **{"text-anchor": "middle", "fill": _INK})
    notes = [f"CPU {cpu.id}", f"core {cpu.core_id}", f"socket {cpu.package_id}", f"L3 {cpu.l3_id}"]
    if cpu.isolated:
        notes.append("isolated")
    if reserved:
        notes.append("reserved")
    if holders:
        notes.append("held by " + ", ".join(holders))
    _title(g.parent, "; ".join(notes))


# -- PCI devices -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Root:
    name: str
    gpus: list[Gpu] = field(default_factory=list)
    pfs: list[Nic] = field(default_factory=list)
    vfs: dict[str, list[Nic]] = field(default_factory=dict)  # PF bus id -> its VFs
    loose: list[Nic] = field(default_factory=list)  # NICs shown on their own (VFs without their PF)


def _roots(gpus: Sequence[Gpu], nics: Sequence[Nic]) -> list[_Root]:
    roots: dict[str, _Root] = {}

    def root(name: str) -> _Root:
        return roots.setdefault(name or "?", _Root(name or "?"))

    for gpu in gpus:
        root(gpu.pci.pcie_root).gpus.append(gpu)
    pf_ids = {n.pci.bus_id for n in nics if not n.sriov_vf}
    for nic in nics:
        if nic.sriov_vf and nic.pf_bus_id in pf_ids:
            assert nic.pf_bus_id is not None
            root(nic.pci.pcie_root).vfs.setdefault(nic.pf_bus_id, []).append(nic)
        elif nic.sriov_vf:
            root(nic.pci.pcie_root).loose.append(nic)
        else:
            root(nic.pci.pcie_root).pfs.append(nic)
    return [roots[k] for k in sorted(roots)]


_DEV_H = 34


def _vf_rows(count: int, width: float) -> int:
    per_row = max(1, int((width - 2 * _PAD) // (_VF_CELL + 2)))
    return (count + per_row - 1) // per_row if count else 0


def _nic_h(vfs: int, width: float) -> float:
    return _DEV_H + (_vf_rows(vfs, width) * (_VF_CELL - 4 + 2) + 16 if vfs else 0)


def _root_h(root: _Root, width: float) -> float:
    h = 18.0
    h += len(root.gpus) * (_DEV_H + _GAP)
    for pf in root.pfs:
        h += _nic_h(len(root.vfs.get(pf.pci.bus_id, [])), width - 2 * _PAD) + _GAP
    h += len(root.loose) * (_DEV_H + _GAP)
    return h + _PAD / 2


def _device_box(
    c: _Canvas,
    name: str,
    x: float,
    y: float,
    *,
    size: tuple[float, float],
    lines: Sequence[str],
    overlay: Overlay,
) -> _Canvas:
    w, h = size
    holders = overlay.device_holders.get(name, ())
    g = c.group("device", **_device_attrs(name, holders, overlay))
    g.rect(x, y, w, h, fill=c.fill_for(holders), rx="3", **_outline(name, overlay))
    g.text(x + 6, y + 13, _fit(lines[0], w - 12, 11), 11, fill=_INK, **{"font-weight": "bold"})
    if len(lines) > 1:
        g.text(x + 6, y + 27, _fit(lines[1], w - 12, 10), 10, fill=_INK)
    note = [*lines, name]
    if holders:
        note.append("held by " + ", ".join(holders))
    if health := _health_note(name, overlay):
        note.append(health)
    _title(g.parent, "\n".join(note))
    return g


def _gpu_lines(gpu: Gpu) -> list[str]:
    what = gpu.product_name or f"{gpu.vendor_id:04x}:{gpu.device_id:04x}"
    mem = f", {format_size(gpu.memory_bytes)}" if gpu.memory_bytes else ""
    return [f"GPU {gpu.index}  {gpu.pci.bus_id}", f"{gpu.vendor} {what}{mem}"]


def _nic_lines(nic: Nic, vfs: int) -> list[str]:
    speed = f"{nic.speed_mbps // 1000} Gb/s" if nic.speed_mbps and nic.speed_mbps >= 1000 else ""
    speed = speed or (f"{nic.speed_mbps} Mb/s" if nic.speed_mbps else "")
    rdma = f"rdma {','.join(nic.rdma_devices)}" if nic.rdma_devices else ""
    sriov = f"{vfs}/{nic.sriov_total_vfs} VFs" if nic.sriov_total_vfs else ""
    kind = f"VF of {nic.pf_bus_id}" if nic.sriov_vf else ""
    second = "  ".join(p for p in (nic.driver or "", speed, nic.operstate, rdma, sriov, kind) if p)
    return [f"NIC {nic.interface_name}  {nic.pci.bus_id}", second]


def _draw_root(c: _Canvas, root: _Root, x: float, y: float, *, w: float, overlay: Overlay) -> None:
    h = _root_h(root, w)
    g = c.group("pcie-root", **{"data-root": root.name})
    g.rect(x, y, w, h, fill="#eef3f8", stroke="#7f9bb5", rx="4")
    g.text(x + _PAD, y + 13, f"PCIe root {root.name}", 10, fill=_MUTED)
    cy = y + 18
    inner = w - 2 * _PAD
    for gpu in root.gpus:
        _device_box(g, gpu.name, x + _PAD, cy, size=(inner, _DEV_H), lines=_gpu_lines(gpu), overlay=overlay)
        cy += _DEV_H + _GAP
    for pf in root.pfs:
        vfs = root.vfs.get(pf.pci.bus_id, [])
        nh = _nic_h(len(vfs), inner)
        box = _device_box(
            g, pf.name, x + _PAD, cy, size=(inner, nh), lines=_nic_lines(pf, len(vfs)), overlay=overlay
        )
        if vfs:
            box.text(x + _PAD + 6, cy + _DEV_H + 8, f"{len(vfs)} VFs:", 9, fill=_MUTED)
            _draw_vfs(box, vfs, x + _PAD + 6, cy + _DEV_H + 12, width=inner, overlay=overlay)
        cy += nh + _GAP
    for nic in root.loose:
        _device_box(
            g, nic.name, x + _PAD, cy, size=(inner, _DEV_H), lines=_nic_lines(nic, 0), overlay=overlay
        )
        cy += _DEV_H + _GAP


def _draw_vfs(c: _Canvas, vfs: Sequence[Nic], x: float, y: float, *, width: float, overlay: Overlay) -> None:
    per_row = max(1, int((width - 2 * _PAD) // (_VF_CELL + 2)))
    for k, vf in enumerate(vfs):
        vx = x + (k % per_row) * (_VF_CELL + 2)
        vy = y + (k // per_row) * (_VF_CELL - 4 + 2)
        holders = overlay.device_holders.get(vf.name, ())
        g = c.group("vf", **_device_attrs(vf.name, holders, overlay))
        outline = _outline(vf.name, overlay)
        outline["stroke-width"] = "2" if vf.name in overlay.health else "0.5"
        g.rect(vx, vy, _VF_CELL, _VF_CELL - 4, fill=c.fill_for(holders), **outline)
        g.text(vx + _VF_CELL / 2, vy + 11, str(k), 8, **{"text-anchor": "middle", "fill": _INK})
        note = [f"VF {vf.interface_name}  {vf.pci.bus_id}", vf.name]
        if holders:
            note.append("held by " + ", ".join(holders))
        if health := _health_note(vf.name, overlay):
            note.append(health)
        _title(g.parent, "\n".join(note))


def _devices_height(roots: Sequence[_Root]) -> float:
    height = 0.0
    for pair in _batched(roots, 2):
        height += max(_root_h(r, _ROOT_W) for r in pair) + _GAP
    return height


def _draw_devices(c: _Canvas, roots: Sequence[_Root], x: float, y: float, overlay: Overlay) -> float:
    for pair in _batched(roots, 2):
        for k, root in enumerate(pair):
            _draw_root(c, root, x + k * (_ROOT_W + _PAD), y, w=_ROOT_W, overlay=overlay)
        y += max(_root_h(r, _ROOT_W) for r in pair) + _GAP
    return y


# -- NUMA nodes and the page -------------------------------------------------------------------------


@dataclass(slots=True)
class _NodeView:
    title: str
    detail: str
    cpus: list[Cpu]
    roots: list[_Root]
    node: NumaNode | None

    def height(self) -> float:
        h = 44.0
        if self.cpus:
            h += _cpu_block_height(self.cpus, _NODE_W - 2 * _PAD)
        else:
            h += 16
        if self.roots:
            h += _devices_height(self.roots)
        return h + _PAD


def _node_views(inventory: Inventory) -> list[_NodeView]:
    views = []
    for node in inventory.numa_nodes:
        cpus = [c for c in inventory.cpus if c.numa_node == node.id]
        gpus = [g for g in inventory.gpus if g.pci.numa_node == node.id]
        nics = [n for n in inventory.nics if n.pci.numa_node == node.id]
        views.append(
            _NodeView(f"NUMA node {node.id}", _node_detail(node, cpus), cpus, _roots(gpus, nics), node)
        )
    known = {n.id for n in inventory.numa_nodes}
    gpus = [g for g in inventory.gpus if g.pci.numa_node not in known]
    nics = [n for n in inventory.nics if n.pci.numa_node not in known]
    if gpus or nics:
        views.append(
            _NodeView(
                "NUMA node unknown", "firmware reports none; never guessed", [], _roots(gpus, nics), None
            )
        )
    return views


def _node_detail(node: NumaNode, cpus: Sequence[Cpu]) -> str:
    pages = ", ".join(f"{hugepage_size(size)} x {count}" for size, count in node.hugepages) or "none"
    cores = len({(c.package_id, c.die_id, c.core_id) for c in cpus})
    what = f"{len(cpus)} CPUs / {cores} cores" if cpus else "no CPUs (memory-only)"
    return f"{what}, memory {format_size(node.memory_bytes)}, hugepages {pages}"


def _draw_node(c: _Canvas, view: _NodeView, x: float, y: float, overlay: Overlay) -> None:
    attrs = {"data-numa": str(view.node.id)} if view.node is not None else {}
    g = c.group("numa-node", **attrs)
    g.rect(x, y, _NODE_W, view.height(), fill="#fbfbf7", stroke=_INK, rx="6", **{"stroke-width": "1.5"})
    g.text(x + _PAD, y + 18, view.title, 14, fill=_INK, **{"font-weight": "bold"})
    if view.node is not None:
        _cpu_device_chip(g, view.node, x + _NODE_W - _PAD - 230, y + 6, overlay)
    g.text(x + _PAD, y + 34, _fit(view.detail, _NODE_W - 2 * _PAD, 11), 11, fill=_INK)
    cy = y + 44
    if view.cpus:
        cy = _draw_cpus(g, view.cpus, x + _PAD, cy, width=_NODE_W - 2 * _PAD, overlay=overlay)
    else:
        cy += 16
    if view.roots:
        _draw_devices(g, view.roots, x + _PAD, cy, overlay)


def _cpu_device_chip(c: _Canvas, node: NumaNode, x: float, y: float, overlay: Overlay) -> None:
    """The node's published cpu device (CPUs + memory + hugepages as capacity), coloured by holder.

    Claims share it (consumable capacity), so the chip names how many hold it; its CPUs show
    exactly who has which.
    """
    holders = overlay.device_holders.get(node.name, ())
    g = c.group("cpu-device", **_device_attrs(node.name, holders, overlay))
    g.rect(x, y, 230, 18, fill=c.fill_for(holders), rx="3", **_outline(node.name, overlay))
    label = f"cpu device {node.name}" + (f" ({len(holders)} claims)" if len(holders) > 1 else "")
    g.text(x + 6, y + 13, _fit(label, 218, 10), 10, fill=_INK)
    note = [f"cpu device {node.name}: CPUs, memory and hugepages of NUMA node {node.id}"]
    if holders:
        note.append("held by " + ", ".join(holders))
    if health := _health_note(node.name, overlay):
        note.append(health)
    _title(g.parent, "\n".join(note))


def _distance_matrix(c: _Canvas, nodes: Sequence[NumaNode], x: float, y: float) -> float:
    """The SLIT distances as a small table; returns its width."""
    cell = 30
    g = c.group("distances")
    g.text(x, y + 10, "NUMA distances", 10, fill=_MUTED)
    y += 14
    for k, node in enumerate(nodes):
        g.text(
            x + cell * (k + 1) + cell / 2,
            y + 12,
            str(node.id),
            10,
            **{"text-anchor": "middle", "fill": _MUTED},
        )
        g.text(
            x + cell / 2, y + 12 + 16 * (k + 1), str(node.id), 10, **{"text-anchor": "middle", "fill": _MUTED}
        )
        for j, dist in enumerate(node.distances):
            local = j == k
            g.rect(
                x + cell * (j + 1),
                y + 16 * (k + 1),
                cell,
                16,
                fill="#e8e8e8" if local else FREE,
                stroke="#aaaaaa",
            )
            g.text(
                x + cell * (j + 1) + cell / 2,
                y + 12 + 16 * (k + 1),
                str(dist),
                10,
                **{"text-anchor": "middle", "fill": _INK},
            )
    return cell * (len(nodes) + 1)


def _legend(c: _Canvas, claims: Sequence[str], x: float, y: float, width: float) -> float:
    """Claim swatches then the fixed keys; returns the height used."""
    g = c.group("legend")
    items: list[tuple[str, dict[str, str], dict[str, str]]] = [
        (claim, {"fill": c.colours[claim]}, {"data-claim": claim}) for claim in claims
    ]
    items += [
        ("free", {"fill": FREE}, {"data-key": "free"}),
        ("reserved", {"fill": RESERVED}, {"data-key": "reserved"}),
        (
            "Unhealthy",
            {"fill": FREE, "stroke": HEALTH_STROKE["Unhealthy"], "stroke-width": "3"},
            {"data-key": "unhealthy"},
        ),
        (
            "Unknown",
            {"fill": FREE, "stroke": HEALTH_STROKE["Unknown"], "stroke-width": "3"},
            {"data-key": "unknown"},
        ),
        ("tainted", {"fill": FREE, "stroke": _INK, "stroke-dasharray": "5 3"}, {"data-key": "tainted"}),
    ]
    cx, cy = x, y
    for label, style, attrs in items:
        shown = _fit(label, 300, 11)
        w = 18 + _text_w(shown, 11) + 14
        if cx > x and cx + w > x + width:
            cx, cy = x, cy + 18
        item = g.group("legend-item", **attrs)
        item.rect(cx, cy, 12, 12, **{"stroke": _INK, "stroke-width": "0.5", **style})
        item.text(cx + 16, cy + 10, shown, 11, fill=_INK)
        if shown != label:
            _title(item.parent, label)
        cx += w
    return cy + 18 - y


def _colours(claims: Sequence[str]) -> dict[str, str]:
    return {claim: PALETTE[k % len(PALETTE)] for k, claim in enumerate(claims)}


def build_svg(inventory: Inventory, overlay: Overlay | None = None, *, title: str = "") -> ET.Element:
    """The picture as an element tree (``render_svg`` serializes it)."""
    overlay = overlay or Overlay()
    claims = overlay.claims()
    views = _node_views(inventory)
    columns = 2 if len(inventory.numa_nodes) > 1 else 1  # one node (+ its "unknown" box): a column
    width = columns * _NODE_W + (columns + 1) * _PAD * 2
    root = ET.Element(
        "svg",
        {
            "xmlns": SVG_NS,
            "version": "1.1",
            "font-family": _FONT,
        },
    )
    c = _Canvas(root, _colours(claims))
    facts = dict(inventory.host_facts)
    heading = title or "numadra topology"
    c.text(_PAD * 2, 24, heading, 16, fill=_INK, **{"font-weight": "bold"})
    summary = (
        f"{len(inventory.cpus)} CPUs, {memory_summary(inventory)}, {len(inventory.numa_nodes)} NUMA node(s), "
        f"{len(inventory.gpus)} GPU(s), {len(inventory.nics)} NIC(s)"
    )
    c.text(_PAD * 2, 42, _fit(summary, width - 4 * _PAD, 11), 11, fill=_INK)
    y = 48.0
    if facts:
        host = ", ".join(f"{k} {v}" for k, v in sorted(facts.items()))
        c.text(_PAD * 2, 58, _fit("host: " + host, width - 4 * _PAD, 11), 11, fill=_MUTED)
        y = 64.0
    top = y + 4
    matrix_w = 0.0
    if len(inventory.numa_nodes) > 1:
        matrix_w = _distance_matrix(
            c, inventory.numa_nodes, width - _PAD * 2 - 30 * (len(inventory.numa_nodes) + 1), top
        )
    legend_h = _legend(c, claims, _PAD * 2, top, width - 4 * _PAD - matrix_w - 16)
    matrix_h = 14 + 16 * (len(inventory.numa_nodes) + 1) if matrix_w else 0
    y = top + max(legend_h, matrix_h) + _PAD
    for row in _batched(views, columns):
        for k, view in enumerate(row):
            _draw_node(c, view, _PAD * 2 + k * (_NODE_W + _PAD * 2), y, overlay)
        y += max(v.height() for v in row) + _PAD * 2
    root.set("width", _n(width))
    root.set("height", _n(y))
    root.set("viewBox", f"0 0 {_n(width)} {_n(y)}")
    root.insert(0, ET.Element("rect", {"width": "100%", "height": "100%", "fill": "#ffffff"}))
    ET.SubElement(root, "title").text = heading
    return root


def render_svg(inventory: Inventory, overlay: Overlay | None = None, *, title: str = "") -> str:
    """The picture as a standalone SVG document (UTF-8 text with an XML declaration)."""
    tree = build_svg(inventory, overlay, title=title)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(tree, encoding="unicode") + "\n"


_HTML_STYLE = """
body { font-family: monospace; margin: 1em; }
svg g.cpu-cell:hover rect, svg g.device:hover > rect, svg g.vf:hover rect { stroke: #000; stroke-width: 2.5; }
table { border-collapse: collapse; margin-top: 1em; }
td, th { border: 1px solid #bbb; padding: 2px 6px; text-align: left; }
"""


def render_html(inventory: Inventory, overlay: Overlay | None = None, *, title: str = "") -> str:
    """The SVG inline in a page with hover highlighting and a table of claims (no script)."""
    overlay = overlay or Overlay()
    html = ET.Element("html", {"lang": "en"})
    head = ET.SubElement(html, "head")
    ET.SubElement(head, "meta", {"charset": "utf-8"})
    ET.SubElement(head, "title").text = title or "numadra topology"
    ET.SubElement(head, "style").text = _HTML_STYLE
    body = ET.SubElement(html, "body")
    body.append(build_svg(inventory, overlay, title=title))
    claims = overlay.claims()
    if claims:
        table = ET.SubElement(body, "table")
        header = ET.SubElement(table, "tr")
        for label in ("claim", "devices", "CPUs"):
            ET.SubElement(header, "th").text = label
        for claim in claims:
            tr = ET.SubElement(table, "tr", {"data-claim": claim})
            ET.SubElement(tr, "td").text = claim
            devices = sorted(d for d, h in overlay.device_holders.items() if claim in h)
            cpus = [cpu for cpu, h in overlay.cpu_holders.items() if claim in h]
            ET.SubElement(tr, "td").text = " ".join(devices) or "-"
            ET.SubElement(tr, "td").text = format_cpulist(cpus) or "-"
    return "<!DOCTYPE html>\n" + ET.tostring(html, encoding="unicode", method="html") + "\n"
