"""numadra: a DRA kubelet plugin that hands out GPUs, NICs, CPUs and memory NUMA-aligned, in one claim."""

from __future__ import annotations

__all__ = ["DEFAULT_DRIVER_NAME", "__version__"]

__version__ = "0.1.0"

#: Default DRA driver name (``--driver-name``); DeviceClasses in deploy/ select on it.
DEFAULT_DRIVER_NAME = "numadra.dev"
