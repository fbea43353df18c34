"""numadra: a DRA kubelet plugin that hands out GPUs, NICs, CPUs and memory NUMA-aligned, in one claim."""

from __future__ import annotations

from driver.defaults import DRIVER_NAME as DEFAULT_DRIVER_NAME

__all__ = ["DEFAULT_DRIVER_NAME", "__version__"]

__version__ = "0.1.0"
