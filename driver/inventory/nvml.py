"""Optional NVML enrichment (GPU memory, product name, UUID) when ``pynvml`` happens to be installed.

Never required: sysfs and procfs give everything numadra needs to publish and prepare. NVML only
adds ``memory`` capacity, a better product name and the GPU's UUID (which ``NVIDIA_VISIBLE_DEVICES``
then names instead of the device minor), and it only describes the host we run on, so callers use
it only when the host root is ``/``.
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
    """Fill ``memory_bytes``/``product_name``/``uuid`` of NVIDIA GPUs from NVML; unchanged without NVML."""
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


_Found = tuple[int | None, str | None, str | None]  # memory, name, uuid


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _query(nvml: Any) -> dict[str, _Found]:
    nvml.nvmlInit()
    try:
        out: dict[str, _Found] = {}
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            bus_id = normalize_nvml_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
            name = _text(nvml.nvmlDeviceGetName(handle))
            memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            out[bus_id] = (memory, name, uuid if uuid.startswith("GPU-") else None)
        return out
    finally:
        nvml.nvmlShutdown()


def _merge(gpu: Gpu, found: _Found | None) -> Gpu:
    if found is None:
        return gpu
    memory, name, uuid = found
    return replace(
        gpu,
        memory_bytes=memory or gpu.memory_bytes,
        product_name=name or gpu.product_name,
        uuid=uuid or gpu.uuid,
    )
