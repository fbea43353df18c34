"""What the topology picture draws on top of the inventory: health readings and journal claims.

``numadra discover -o svg|html`` draws the host as discovered, with one health reading per device
(the same :class:`~driver.health.signals.SignalReader` the driver polls; no history, so an AER
counter that grew before this run is not seen). ``numadra state -o svg|html`` adds the journal's
claims on top. Kept out of the renderer so that it stays pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from driver.inventory.model import Gpu, Inventory, Nic
from driver.presentation.svg import Overlay, overlay_from_claims, render_html, render_svg

if TYPE_CHECKING:
    from driver.state.entry import JournalEntry

__all__ = ["PICTURE_FORMATS", "health_of", "overlay_for", "picture"]

PICTURE_FORMATS = ("svg", "html")


def health_of(inventory: Inventory, host_root: str) -> dict[str, tuple[str, str]]:
    """device name -> (state, reason) for every GPU and NIC that does not read Healthy right now."""
    from driver.health.signals import SignalReader
    from driver.plugin import HealthState

    reader = SignalReader(host_root)  # NVML on a live host with NVIDIA GPUs, as the driver
    out: dict[str, tuple[str, str]] = {}
    devices: list[Gpu | Nic] = [*inventory.gpus, *inventory.nics]
    for device in devices:
        reading = reader.read(device)
        if reading.state != HealthState.HEALTHY:
            out[device.name] = (str(reading.state.value), reading.reason)
    return out


def overlay_for(
    inventory: Inventory,
    entries: Iterable[JournalEntry] = (),
    *,
    host_root: str | None = None,
    reserved_cpus: frozenset[int] = frozenset(),
) -> Overlay:
    """Claims from journal entries (devices by name, CPUs from their pinning) plus health.

    Devices a claim holds with ``adminAccess`` are left uncoloured: they block no other claim, and
    colouring them would hide the claim that does.
    """
    claims = [
        (
            f"{e.namespace}/{e.name}",
            [d.device_name for d in e.devices if d.device_name not in e.admin_devices],
            sorted(e.pinning.cpus) if e.pinning else [],
        )
        for e in entries
    ]
    health = health_of(inventory, host_root) if host_root is not None else {}
    return overlay_from_claims(claims, health=health, reserved_cpus=reserved_cpus)


def picture(inventory: Inventory, overlay: Overlay, fmt: str, *, title: str) -> str:
    """The SVG document, or the HTML page wrapping it."""
    render = render_html if fmt == "html" else render_svg
    return render(inventory, overlay, title=title)
