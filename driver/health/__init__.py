"""Device health: one model (monitor) feeding the kubelet health stream and the slice taints.

The claim device status writer that reads it lives in ``driver.claims.status``."""

from __future__ import annotations

from driver.health.monitor import HealthMonitor
from driver.health.signals import Reading, SignalReader
from driver.health.taints import TAINT_KEY, HealthTaints, sanitize_label_value, taints_for

__all__ = [
    "TAINT_KEY",
    "HealthMonitor",
    "HealthTaints",
    "Reading",
    "SignalReader",
    "sanitize_label_value",
    "taints_for",
]
