"""numadra: a DRA kubelet plugin that hands out GPUs, NICs, CPUs and memory NUMA-aligned, in one claim."""

from __future__ import annotations

import os

#: grpc's experiments unless the environment names its own: the EventEngine listener off. With
#: it, the connections the kubelet opens to our servers are read and written on grpc's EventEngine
#: threads, which hand every event on to the server's polling thread; without it the polling
#: thread does the socket work itself, and each call takes fewer thread switches and less CPU
#: (bench/README.md). grpc reads the variable once, as it starts, so it is set here, before any
#: module of the driver imports grpc.
GRPC_EXPERIMENTS = "-event_engine_listener"
os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)

from driver.defaults import DRIVER_NAME as DEFAULT_DRIVER_NAME  # noqa: E402 (after the variable)

__all__ = ["DEFAULT_DRIVER_NAME", "GRPC_EXPERIMENTS", "__version__"]

__version__ = "0.1.0"
