"""Optional NVML enrichment (GPU memory and product name) when ``pynvml`` happens to be installed.

Never required: sysfs and procfs give everything numadra needs to publish and prepare. NVML only
adds ``memory`` capacity and a better product name, and it only describes the host we run on, so
callers use it only when the host root is ``/``.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Any

from driver.inventory.model import Gpu, Inventory
from driver.log import get_logger

__all__ = ["enrich_with_nvml", "normalize_nvml_bus_id"]

_log = get_logger("inventory.nvml")


def normalize_nvml_bus_id(raw: str | bytes) -> str:
    """NVML's "00000000:3B:00.0" -> sysfs' "0000:3b:00.0"."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    domain, _, rest = text.strip().lower().partition(":")
    return f"{int(domain or '0', 16):04x}:{rest}"


def enrich_with_nvml(inventory: Inventory) -> Inventory:
    """Fill ``memory_bytes``/``product_name`` of NVIDIA GPUs from NVML; unchanged when NVML is absent."""
    if not any(g.vendor == "nvidia" for g in inventory.gpus):
        return inventory
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return inventory
    try:
        found = _query(nvml)
    except Exception as exc:  # NVML raises its own error types; any failure just means "no enrichment"
        _log.info("nvml unavailable, keeping sysfs facts", error=str(exc))
        return inventory
    gpus = tuple(_merge(g, found.get(g.pci.bus_id)) for g in inventory.gpus)
    return replace(inventory, gpus=gpus)


def _query(nvml: Any) -> dict[str, tuple[int | None, str | None]]:
    nvml.nvmlInit()
    try:
        out: dict[str, tuple[int | None, str | None]] = {}
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            bus_id = normalize_nvml_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
            name = nvml.nvmlDeviceGetName(handle)
            memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            out[bus_id] = (memory, name.decode() if isinstance(name, bytes) else str(name))
        return out
    finally:
        nvml.nvmlShutdown()


def _merge(gpu: Gpu, found: tuple[int | None, str | None] | None) -> Gpu:
    if found is None:
        return gpu
    memory, name = found
    return replace(gpu, memory_bytes=memory or gpu.memory_bytes, product_name=name or gpu.product_name)
