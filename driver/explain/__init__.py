"""``numadra explain``: why this node's devices can or cannot serve a ResourceClaim.

:func:`explain_claim` is pure (claim JSON + devices + journal usage in, :class:`ClaimExplanation`
out); :mod:`driver.explain.cel` evaluates the CEL selector forms our classes and users write and
says "cannot evaluate" for the rest; :mod:`driver.explain.render` prints text or JSON.
"""

from __future__ import annotations

from driver.explain.analyze import (
    DeviceClass,
    Usage,
    default_device_classes,
    explain_claim,
    usage_from_journal,
)
from driver.explain.devices import (
    DeviceView,
    devices_from_host,
    devices_from_inventory,
    devices_from_slices,
    load_slices_file,
)
from driver.explain.model import ClaimExplanation, ReasonKind, RequestStatus, Verdict
from driver.explain.render import to_json, to_text

__all__ = [
    "ClaimExplanation",
    "DeviceClass",
    "DeviceView",
    "ReasonKind",
    "RequestStatus",
    "Usage",
    "Verdict",
    "default_device_classes",
    "devices_from_host",
    "devices_from_inventory",
    "devices_from_slices",
    "explain_claim",
    "load_slices_file",
    "to_json",
    "to_text",
    "usage_from_journal",
]
