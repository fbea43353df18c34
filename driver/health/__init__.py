"""Device health: one model (monitor) feeding the kubelet health stream and the slice taints,
and the claim device status writer."""

from __future__ import annotations

from driver.health.monitor import HealthMonitor
from driver.health.signals import Reading, SignalReader
from driver.health.status import ClaimStatusWriter
from driver.health.taints import TAINT_KEY, HealthTaints, sanitize_label_value, taints_for

__all__ = [
    "TAINT_KEY",
    "ClaimStatusWriter",
    "HealthMonitor",
    "HealthTaints",
    "Reading",
    "SignalReader",
    "sanitize_label_value",
    "taints_for",
]
