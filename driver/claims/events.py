"""Warning Events about a claim's NVIDIA user space, written off the prepare path (best effort).

A claim whose NVIDIA GPUs got the driver root's files instead of the toolkit's spec, or no driver
user space at all, still runs, so the kubelet reports nothing; the user would only find out when
CUDA finds no driver. :class:`ClaimEvents` tells them where they look: a ``Warning`` Event on each
pod the claim is reserved for (``kubectl describe pod``), or on the claim when it names no pod.

The Events are ``core/v1`` (``involvedObject``, ``firstTimestamp``, ``count``), posted by one
daemon thread started at the first warning: a node where every claim gets its user space never
starts it. A failed post is logged and dropped; the claims driver has already logged the warning
with the claim's UID, and counts it for the metric.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from driver.inventory.nvidia_source import UserspaceSource
from driver.kube.types import JsonObject
from driver.log import get_logger

__all__ = ["MAX_EVENT_MESSAGE", "REASONS", "ClaimEvents", "userspace_event"]

_log = get_logger("claims.events")

#: the apiserver refuses longer Event messages
MAX_EVENT_MESSAGE = 1024
#: the Event reason per source that warns
REASONS: Mapping[UserspaceSource, str] = {
    UserspaceSource.DRIVER_ROOT: "NvidiaUserspaceFromDriverRoot",
    UserspaceSource.NONE: "NvidiaUserspaceMissing",
    UserspaceSource.TOOLKIT: "NvidiaUserspaceFromToolkit",
}
#: posts one Event object to a namespace (``KubeClient.create_event``)
Post = Callable[[str, Mapping[str, Any]], None]


def _targets(claim: JsonObject) -> list[dict[str, str]]:
    """The objects the Event is about: the claim's reserved pods, else the claim."""
    meta = claim.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    status = claim.get("status")
    reserved = status.get("reservedFor") if isinstance(status, Mapping) else None
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
            "name": str(r["name"]),
            "uid": str(r["uid"]),
        }
        for r in (reserved if isinstance(reserved, list) else ())
        if isinstance(r, Mapping)
        and r.get("resource") == "pods"
        and not r.get("apiGroup")
        and r.get("name")
        and r.get("uid")
    ]
    if pods:
        return pods
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "namespace": namespace,
            "name": str(meta.get("name", "")),
            "uid": str(meta.get("uid", "")),
        }
    ]


def userspace_event(
    claim: JsonObject,
    source: UserspaceSource,
    warnings: Sequence[str],
    *,
    component: str,
    node: str,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """The Event objects of one warning (one per pod the claim is reserved for, else one on the claim)."""
    meta = claim.get("metadata") or {}
    claim_name = f"{meta.get('namespace')}/{meta.get('name')}"
    what = {
        UserspaceSource.DRIVER_ROOT: "gets the NVIDIA driver's files from the driver root",
        UserspaceSource.NONE: "gets no NVIDIA driver user space (CUDA will find no driver)",
        UserspaceSource.TOOLKIT: "gets the NVIDIA driver's files from the toolkit's CDI spec",
    }[source]
    message = f"claim {claim_name} on node {node} {what}: {'; '.join(warnings)}"
    if len(message) > MAX_EVENT_MESSAGE:
        message = message[: MAX_EVENT_MESSAGE - 3] + "..."
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{target['name']}.", "namespace": target["namespace"]},
            "involvedObject": target,
            "reason": REASONS[source],
            "message": message,
            "type": "Warning",
            "source": {"component": component, "host": node},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        for target in _targets(claim)
    ]


class ClaimEvents:
    """The :class:`~driver.claims.hostedits.UserspaceWarnings` that posts Events (module docstring)."""

    def __init__(self, post: Post, *, component: str, node: str) -> None:
        self._post = post
        self.component = component
        self.node = node
        self._queue: queue.SimpleQueue[list[dict[str, Any]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def warn(self, claim: JsonObject, source: UserspaceSource, warnings: Sequence[str]) -> None:
        """Queue the Events of one warning; returns at once."""
        events = userspace_event(claim, source, warnings, component=self.component, node=self.node)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="claim-events", daemon=True)
                self._thread.start()
        self._queue.put(events)

    def close(self, timeout: float = 2.0) -> None:
        """Post what is queued (up to ``timeout``), then stop the worker."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            events = self._queue.get()
            if events is None:
                return
            for event in events:
                target = event["involvedObject"]
                try:
                    self._post(target["namespace"], event)
                except Exception as exc:  # an Event is informational: log and go on
                    _log.warning(
                        "cannot post event",
                        reason=event["reason"],
                        object=f"{target['kind']} {target['namespace']}/{target['name']}",
                        error=str(exc),
                    )
