"""Warning Events: the one builder, and the one poster that writes them off the caller's thread.

numadra tells users and operators where they already look, ``kubectl describe`` of a pod, a claim
or the node: a claim's GPUs without their NVIDIA user space (``driver/claims/events.py``), a claim
container refused or left unpinned (``driver/observability/pinreports.py``), a DRA feature gate off
on the apiserver (``driver/slices/missingfeatures.py``). Each of those says *what* happened;
:func:`warning_event` gives all of them one shape:

* ``core/v1`` Events (``involvedObject``, ``source``, ``firstTimestamp``, ``count``), the kind the
  kubelet writes and every kubectl lists; ``reportingComponent``/``reportingInstance`` as well,
  which the ``events.k8s.io`` view shows;
* in the involved object's namespace, or ``default`` for a cluster-scoped one such as a Node (the
  apiserver only accepts a namespaced object's Event in that object's namespace);
* named by ``generateName`` from the involved object's name, so that a repeated warning is a new
  Event and never a conflict;
* the message kept within :data:`MAX_MESSAGE` (the ``events.k8s.io`` note limit, counted in UTF-8
  as the apiserver counts it), cut with an ellipsis so a reader sees it was cut.

:class:`EventPoster` writes them. The callers are on the kubelet's, the runtime's or the
publisher's path, and an apiserver that hangs must not hold them, so posting is one
:class:`~driver.worker.QueueWorker`: ``post()`` queues and returns at once, a full queue drops the
Event. An Event is informational and best effort: the log line and the metric of each warning are
written by its caller whether or not the Event is. Nothing is retried: a failed post is logged
once, with its reason and object, and counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from driver.errors import DriverError
from driver.log import get_logger
from driver.worker import QueueWorker

__all__ = [
    "DEFAULT_MAX_QUEUED",
    "ELLIPSIS",
    "MAX_MESSAGE",
    "CreateEvent",
    "EventPoster",
    "InvolvedObject",
    "PostResult",
    "describe_event",
    "warning_event",
]

#: the longest Event message, in UTF-8 (the ``events.k8s.io`` note limit)
MAX_MESSAGE = 1024
#: what ends a message cut to :data:`MAX_MESSAGE`
ELLIPSIS = "..."
#: Events waiting for the apiserver at most; beyond that new ones are dropped (and counted)
DEFAULT_MAX_QUEUED = 256
#: the namespace of the Events about cluster-scoped objects (as the kubelet's about its Node)
_CLUSTER_EVENTS_NAMESPACE = "default"

#: writes one Event into a namespace (``KubeClient.create_event``)
CreateEvent = Callable[[str, Mapping[str, Any]], object]
#: told once whether a queued Event was written (True) or not
PostResult = Callable[[bool], None]

_log = get_logger("kube.events")


@dataclass(frozen=True, slots=True)
class InvolvedObject:
    """The object an Event is about, as ``involvedObject`` names it.

    ``namespace`` empty: a cluster-scoped object (a Node). ``uid`` empty: left out (the Event is
    then found by name). ``field_path``: the part of the object, e.g. ``spec.containers{app}``.
    """

    kind: str
    name: str
    uid: str = ""
    namespace: str = ""
    api_version: str = "v1"
    field_path: str = ""


def _bounded(message: str) -> str:
    """``message`` within :data:`MAX_MESSAGE` UTF-8 units, cut on a character with :data:`ELLIPSIS`."""
    data = message.encode()
    if len(data) <= MAX_MESSAGE:
        return message
    keep = data[: MAX_MESSAGE - len(ELLIPSIS.encode())]
    return keep.decode(errors="ignore") + ELLIPSIS


def warning_event(
    involved: InvolvedObject,
    *,
    reason: str,
    message: str,
    component: str,
    host: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The core/v1 ``Warning`` Event about ``involved`` (module docstring), as the apiserver takes it."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    target: dict[str, str] = {
        "apiVersion": involved.api_version,
        "kind": involved.kind,
        "name": involved.name,
    }
    if involved.namespace:
        target["namespace"] = involved.namespace
    if involved.uid:
        target["uid"] = involved.uid
    if involved.field_path:
        target["fieldPath"] = involved.field_path
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{involved.name or involved.kind.lower()}.",
            "namespace": involved.namespace or _CLUSTER_EVENTS_NAMESPACE,
        },
        "involvedObject": target,
        "reason": reason,
        "message": _bounded(message),
        "type": "Warning",
        "source": {"component": component, "host": host},
        "reportingComponent": component,
        "reportingInstance": host,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def describe_event(event: Mapping[str, Any]) -> str:
    """The object of an Event as a log line names it: ``Pod ml/train-0``, ``Node node-a``."""
    target = event.get("involvedObject") or {}
    namespace, name = target.get("namespace"), target.get("name", "")
    return f"{target.get('kind', '')} {namespace}/{name}" if namespace else f"{target.get('kind', '')} {name}"


@dataclass(frozen=True, slots=True)
class _Queued:
    event: Mapping[str, Any]
    on_result: PostResult | None


class EventPoster:
    """Posts Events with ``create_event`` from one worker thread (module docstring). Thread-safe.

    :attr:`posted` and :attr:`dropped` count every Event handed to :meth:`post`: dropped are
    those refused by a full (or closed) queue, those the apiserver did not take, and those still
    queued when :meth:`close` ran out of time. A caller that keeps counts of its own passes
    ``on_result`` and counts :meth:`post` returning False itself.
    """

    def __init__(
        self, create_event: CreateEvent, *, max_queued: int = DEFAULT_MAX_QUEUED, name: str = "event-poster"
    ) -> None:
        self._create = create_event
        self._worker: QueueWorker[_Queued] = QueueWorker(name, self._write, max_queued=max_queued)
        self._lock = threading.Lock()
        self._posted = 0
        self._refused = 0  # not queued: full or closed
        self._failed = 0  # queued, not written
        self._refusing = 0  # refused since the queue last took one (0: taking)

    @property
    def posted(self) -> int:
        """Events the apiserver took."""
        with self._lock:
            return self._posted

    @property
    def dropped(self) -> int:
        """Events not written: refused by the queue, failed, or given up at close."""
        with self._lock:
            lost = self._refused + self._failed
        return lost + self._worker.given_up

    @property
    def backlog(self) -> int:
        """Events queued and not yet being posted."""
        return self._worker.backlog

    def post(self, event: Mapping[str, Any], *, on_result: PostResult | None = None) -> bool:
        """Queue ``event`` and return at once; False when it was dropped (queue full or closed).

        ``on_result`` is called on the worker once the Event is written (True) or not (False);
        it is not called for an Event this refuses, nor for one :meth:`close` gives up.
        """
        if self._worker.put(_Queued(event, on_result)):
            with self._lock:
                refused, self._refusing = self._refusing, 0
            if refused:
                _log.info("events queued again", dropped=refused)
            return True
        with self._lock:
            self._refused += 1
            self._refusing += 1
            first = self._refusing == 1
        if first:  # once per run of drops: a flood of Events is not turned into a flood of lines
            _log.warning(
                "event dropped",
                why="closed" if self._worker.closed else "queue full",
                max_queued=self._worker.max_queued,
                reason=event.get("reason"),
                object=describe_event(event),
            )
        return False

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the Events queued before are written or failed; False on timeout."""
        return self._worker.flush(timeout)

    def close(self, timeout: float = 2.0) -> bool:
        """Take no more Events; post what is queued until ``timeout``, give up the rest."""
        return self._worker.close(timeout)

    def _write(self, queued: _Queued) -> None:
        event, written = queued.event, False
        try:
            self._create(str(event["metadata"]["namespace"]), event)
            written = True
        except (DriverError, OSError) as exc:
            _log.warning(
                "cannot post event", reason=event.get("reason"), object=describe_event(event), error=str(exc)
            )
        finally:
            with self._lock:
                if written:
                    self._posted += 1
                else:
                    self._failed += 1
            if queued.on_result is not None:
                queued.on_result(written)
