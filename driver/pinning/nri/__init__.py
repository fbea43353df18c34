"""A pure-Python NRI plugin for CPU/memory pinning: wire framing, handlers, the plugin itself."""

from __future__ import annotations

from driver.pinning.nri.handlers import (
    EVENTS,
    ClaimLookup,
    Marker,
    PinningHandlers,
    SharedPool,
    marker_from_env,
)
from driver.pinning.nri.plugin import DEFAULT_NRI_SOCKET, NriPlugin

__all__ = [
    "DEFAULT_NRI_SOCKET",
    "EVENTS",
    "ClaimLookup",
    "Marker",
    "NriPlugin",
    "PinningHandlers",
    "SharedPool",
    "marker_from_env",
]
