"""What every "said once" report of the node shares: its Node Event, its record file, its clock.

Two reports say a cause once where an operator looks (:mod:`driver.slices.withheld`: devices
another party owns; :mod:`driver.slices.missingfeatures`: gates off on the apiserver). Each decides
what a cause is and how it reads; this module holds what they do alike:

* the ``Warning`` Event on the Node, handed to the driver's
  :class:`~driver.kube.events.EventPoster` (the caller's thread never waits for it). Without the
  Node's UID the Event carries the node name as its UID, as the kubelet's own Events on its Node
  do; ``kubectl describe node`` looks for both;
* the record file in the plugin dir that ``numadra state`` prints, rewritten atomically (temp file,
  fsync, rename, mode 0600, no link followed) when the report changed and at the first update of
  each process, so it describes the current process and not an earlier one. ``numadra state``
  reads local state only, so that it answers while the apiserver is unreachable and without
  credentials; each record is read back by its own module, through :mod:`driver.untrusted`;
* the clock of ``checkedAt`` (and of what a report stamps), RFC 3339 UTC to the second.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from structlog.typing import FilteringBoundLogger

from cdi.io import atomic_write_bytes
from driver.kube.events import EventPoster, InvolvedObject, warning_event

__all__ = ["SayOnce", "node_warning"]


def node_warning(
    *, node_name: str, node_uid: str, reason: str, message: str, component: str, now: datetime | None = None
) -> dict[str, Any]:
    """The core/v1 ``Warning`` Event on the Node (module docstring: the UID)."""
    node = InvolvedObject("Node", node_name, uid=node_uid or node_name)
    return warning_event(node, reason=reason, message=message, component=component, host=node_name, now=now)


class SayOnce:
    """The Event, record and clock of one report (module docstring). Thread-safe.

    ``events`` None: no Events; ``record_path`` None: no record file (tests, ``numadra discover``).
    ``log`` is the report's own logger, which names a record that cannot be written
    (``cannot record <record_what>``): the report goes on.
    """

    def __init__(
        self,
        *,
        node_name: str,
        component: str,
        event_reason: str,
        record_version: int,
        record_what: str,
        log: FilteringBoundLogger,
        events: EventPoster | None = None,
        record_path: Path | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.node_name = node_name
        self._component = component
        self._event_reason = event_reason
        self._record_version = record_version
        self._record_what = record_what
        self._log = log
        self._events = events
        self._record_path = record_path
        self._clock = clock
        self._lock = threading.Lock()
        self._recorded = False  # the first update rewrites the record of an earlier process

    def stamp(self) -> str:
        """Now, as the record and the reports write a time."""
        return self._clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def post(self, message: str, *, node_uid: str) -> None:
        """Queue the Node Event saying ``message`` (nothing without an EventPoster)."""
        if self._events is None:
            return
        event = node_warning(
            node_name=self.node_name,
            node_uid=node_uid,
            reason=self._event_reason,
            message=message,
            component=self._component,
        )
        self._events.post(event)  # a dropped or failed post is logged there; the report's line says it too

    def record(self, changed: bool, body: Callable[[], Mapping[str, Any]]) -> None:
        """Rewrite the record with ``body()`` when ``changed``, and at the first call of the process.

        Call it under the report's own lock, so that the records are written in the order of its
        updates. ``body`` is what the report adds to ``version``, ``checkedAt`` and ``pid``.
        """
        with self._lock:
            if not changed and self._recorded:
                return
            self._recorded = True
            if self._record_path is None:
                return
            doc = {"version": self._record_version, "checkedAt": self.stamp(), "pid": os.getpid(), **body()}
            path = self._record_path
            try:
                atomic_write_bytes(path, json.dumps(doc, indent=1).encode(), 0o600, roots=(str(path.parent),))
            except OSError as exc:
                self._log.error(f"cannot record {self._record_what}", path=str(path), error=str(exc))
