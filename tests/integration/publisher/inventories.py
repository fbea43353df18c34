"""Hand-made inventories of any size (fast; the fixture host trees cover discovery itself)."""

from __future__ import annotations

from driver.inventory.model import DeviceKind, Gpu, Inventory, PciTopology, pci_device_name


def gpu_inventory(count: int, *, first_bus: int = 0x10) -> Inventory:
    """``count`` GPUs on consecutive buses starting at ``first_bus`` (domain rolls over per 256)."""
    gpus = []
    for k in range(count):
        bus = first_bus + k
        bus_id = f"{bus // 256:04x}:{bus % 256:02x}:00.0"
        gpus.append(
            Gpu(
                name=pci_device_name(DeviceKind.GPU, bus_id),
                pci=PciTopology(bus_id=bus_id, pcie_root=f"pci{bus // 256:04x}:00", numa_node=0),
                vendor="nvidia",
                vendor_id=0x10DE,
                device_id=0x2330,
                pci_class=0x030200,
                index=k,
            )
        )
    return Inventory(gpus=tuple(gpus))
