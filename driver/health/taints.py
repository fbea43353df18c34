"""Device taints from the health model, handed to the slice publisher.

An Unhealthy device gets ``numadra.dev/unhealthy=<reason>:<effect>`` (``--taint-unhealthy``:
NoSchedule by default, NoExecute to also evict, ``none`` for no taints). Unknown devices are not
tainted: no evidence is not bad evidence. The builder re-splits the pool to 64 devices per slice
as soon as any taint is present; the publisher removes the taint after recovery (the monitor's
hysteresis decides when).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from driver.plugin import DeviceHealth, HealthState

__all__ = [
    "TAINT_EFFECTS",
    "TAINT_KEY",
    "HealthTaints",
    "TaintEffect",
    "TaintSink",
    "sanitize_label_value",
    "taints_for",
]

TAINT_KEY = "numadra.dev/unhealthy"
TaintEffect = Literal["NoSchedule", "NoExecute", "none"]
TAINT_EFFECTS: tuple[TaintEffect, ...] = ("NoSchedule", "NoExecute", "none")
_LABEL_VALUE_MAX = 63
_INVALID = re.compile(r"[^A-Za-z0-9._-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def sanitize_label_value(text: str) -> str:
    """Any text as a valid label value: [A-Za-z0-9._-], alphanumeric at both ends, <= 63 chars."""
    value = _EDGE.sub("", _INVALID.sub("-", text))
    return _EDGE.sub("", value[:_LABEL_VALUE_MAX])


def taints_for(snapshot: Sequence[DeviceHealth], effect: TaintEffect) -> dict[str, list[dict[str, Any]]]:
    """Device name -> taints for every Unhealthy device (empty for ``none``)."""
    if effect == "none":
        return {}
    return {
        h.device_name: [
            {"key": TAINT_KEY, "value": sanitize_label_value(h.reason or "Unhealthy"), "effect": effect}
        ]
        for h in snapshot
        if h.state == HealthState.UNHEALTHY
    }


class TaintSink(Protocol):
    """Where taints go (:class:`driver.slices.publisher.SlicePublisher` has ``set_taints``)."""

    def set_taints(self, taints: Mapping[str, Sequence[Mapping[str, Any]]]) -> None: ...


class HealthTaints:
    """Listener of the monitor that keeps the publisher's taints equal to the health model.

    ``transitions`` counts taints added and removed (metrics hook).
    """

    def __init__(self, sink: TaintSink, effect: TaintEffect = "NoSchedule") -> None:
        if effect not in TAINT_EFFECTS:
            raise ValueError(f"taint effect must be one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
        self._sink = sink
        self.effect = effect
        self.transitions: Counter[str] = Counter()  # "added" | "removed"
        self._current: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def __call__(self, snapshot: Sequence[DeviceHealth]) -> None:
        """Recompute the taints from a snapshot and pass them on when they changed."""
        taints = taints_for(snapshot, self.effect)
        with self._lock:
            if taints == self._current:
                return
            added, removed = taints.keys() - self._current.keys(), self._current.keys() - taints.keys()
            if added:
                self.transitions["added"] += len(added)
            if removed:
                self.transitions["removed"] += len(removed)
            self._current = taints
        self._sink.set_taints(taints)

    @property
    def current(self) -> dict[str, list[dict[str, Any]]]:
        """The taints last handed to the sink."""
        with self._lock:
            return {k: [dict(t) for t in v] for k, v in self._current.items()}
