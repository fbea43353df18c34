"""Raw health readings of one device from the host tree: what sysfs (and NVML, if present) says now.

A reading is one observation, no memory except the AER baselines; smoothing (hysteresis) is the
monitor's job. Signals, strongest first:

* the PCI function is gone from ``sys/bus/pci/devices`` (hot-unplug, fell off the bus): Unhealthy;
* ``aer_dev_fatal``'s ``TOTAL_ERR_FATAL`` went up since the last reading: Unhealthy;
* NVML says the GPU is lost (only when ``pynvml`` is importable and the host root is ``/``);
* NIC: no netdev visible in our namespace (moved into a pod) or administratively down: Unknown,
  because nothing can be said about the link; carrier 0 or operstate down: Unhealthy; an RDMA port
  whose state is not ACTIVE: Unhealthy;
* cpu (NUMA) devices: the node directory vanished while others exist: Unhealthy.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from driver.health.netinfo import netdev_dir
from driver.inventory._sysfs import is_live_host, list_dir, read_text
from driver.inventory.model import Gpu, InventoryDevice, Nic, NumaNode
from driver.plugin import HealthState

__all__ = ["Reading", "SignalReader"]

# ruff: noqa: PTH110, PTH112, PTH118 - os.path on purpose: many small reads per poll (see _sysfs)

_IFF_UP = 0x1
_LINK_DOWN_STATES = frozenset({"down", "lowerlayerdown", "notpresent"})


@dataclass(frozen=True, slots=True)
class Reading:
    """One observation: a state and a short CamelCase reason (empty when healthy)."""

    state: HealthState
    reason: str = ""


HEALTHY = Reading(HealthState.HEALTHY)


class SignalReader:
    """Reads the signals of inventory devices under ``host_root``; remembers AER fatal counters."""

    def __init__(self, host_root: str = "/", *, use_nvml: bool | None = None) -> None:
        self.host_root = host_root
        self._aer_fatal: dict[str, int] = {}
        self._nvml: Any = None
        if use_nvml if use_nvml is not None else is_live_host(host_root):
            self._nvml = _load_nvml()

    def _path(self, *parts: str) -> str:
        return os.path.join(self.host_root, *parts)

    def read(self, device: InventoryDevice) -> Reading:
        """The current reading of one device."""
        if isinstance(device, NumaNode):
            return self._numa(device)
        pci_dir = self._path("sys/bus/pci/devices", device.pci.bus_id)
        if not os.path.exists(pci_dir):
            return Reading(HealthState.UNHEALTHY, "DeviceRemoved")
        if self._aer_increased(device.pci.bus_id, pci_dir):
            return Reading(HealthState.UNHEALTHY, "PciAerFatal")
        if isinstance(device, Gpu):
            return self._gpu(device)
        return self._nic(device, pci_dir)

    def _aer_increased(self, bus_id: str, pci_dir: str) -> bool:
        text = read_text(os.path.join(pci_dir, "aer_dev_fatal"))
        if text is None:
            return False
        total = None
        for line in text.splitlines():
            name, _, value = line.strip().rpartition(" ")
            if name.strip() == "TOTAL_ERR_FATAL" and value.isdigit():
                total = int(value)
        if total is None:
            return False
        before = self._aer_fatal.get(bus_id)
        self._aer_fatal[bus_id] = total
        return before is not None and total > before

    def _gpu(self, gpu: Gpu) -> Reading:
        if self._nvml is None or gpu.vendor != "nvidia":
            return HEALTHY
        try:
            self._nvml.nvmlDeviceGetHandleByPciBusId(gpu.pci.bus_id.encode())
        except Exception as exc:  # NVML signals through its own error classes
            if type(exc).__name__ == "NVMLError_GpuIsLost":
                return Reading(HealthState.UNHEALTHY, "GpuLost")
        return HEALTHY

    def _nic(self, nic: Nic, pci_dir: str) -> Reading:
        netdev = netdev_dir(pci_dir, nic.interface_name)
        if netdev is None:
            return Reading(HealthState.UNKNOWN, "NetdevNotVisible")
        flags = read_text(os.path.join(netdev, "flags"))
        if flags is not None and flags.startswith("0x") and not int(flags, 16) & _IFF_UP:
            return Reading(HealthState.UNKNOWN, "AdminDown")
        if read_text(os.path.join(netdev, "carrier")) == "0":
            return Reading(HealthState.UNHEALTHY, "NoCarrier")
        if (read_text(os.path.join(netdev, "operstate")) or "") in _LINK_DOWN_STATES:
            return Reading(HealthState.UNHEALTHY, "LinkDown")
        for rdma in nic.rdma_devices:
            ports = self._path("sys/class/infiniband", rdma, "ports")
            for port in list_dir(ports):
                state = read_text(os.path.join(ports, port, "state"))
                if state is not None and "ACTIVE" not in state.upper():
                    return Reading(HealthState.UNHEALTHY, "RdmaPortDown")
        return HEALTHY

    def _numa(self, node: NumaNode) -> Reading:
        nodes = self._path("sys/devices/system/node")
        if not os.path.isdir(nodes):  # no NUMA directories at all: node 0 was synthesized
            return HEALTHY
        if not os.path.isdir(os.path.join(nodes, f"node{node.id}")):
            return Reading(HealthState.UNHEALTHY, "NumaNodeGone")
        return HEALTHY


def _load_nvml() -> Any:
    """pynvml, initialised, or None (not installed, no driver): NVML is an extra signal only."""
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return None
    return nvml
