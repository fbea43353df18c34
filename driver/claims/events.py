"""Warning Events about a claim's NVIDIA user space, written off the prepare path (best effort).

A claim whose NVIDIA GPUs got the driver root's files instead of the toolkit's spec, or no driver
user space at all, still runs, so the kubelet reports nothing; the user would only find out when
CUDA finds no driver. :class:`ClaimEvents` tells them where they look: a ``Warning`` Event on each
pod the claim is reserved for (``kubectl describe pod``), or on the claim when it names no pod.

The Events are built by :func:`driver.kube.events.warning_event` and handed to the driver's
:class:`~driver.kube.events.EventPoster`, which posts them from its own thread: :meth:`ClaimEvents.warn`
runs on the prepare path and returns at once, also while the apiserver hangs. A failed or dropped
post is logged and counted there; the claims driver has already logged the warning with the
claim's UID, and counts it for the metric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from driver.inventory.nvidia_source import UserspaceSource
from driver.kube.events import EventPoster, InvolvedObject, warning_event
from driver.kube.types import JsonObject

__all__ = ["REASONS", "ClaimEvents", "userspace_event"]

#: the Event reason per source that warns
REASONS: Mapping[UserspaceSource, str] = {
    UserspaceSource.DRIVER_ROOT: "NvidiaUserspaceFromDriverRoot",
    UserspaceSource.NONE: "NvidiaUserspaceMissing",
    UserspaceSource.TOOLKIT: "NvidiaUserspaceFromToolkit",
}


def _targets(claim: JsonObject) -> list[InvolvedObject]:
    """The objects the Event is about: the claim's reserved pods, else the claim."""
    meta = claim.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    status = claim.get("status")
    reserved = status.get("reservedFor") if isinstance(status, Mapping) else None
    pods = [
        InvolvedObject("Pod", str(r["name"]), uid=str(r["uid"]), namespace=namespace)
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
        InvolvedObject(
            "ResourceClaim",
            str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            namespace=namespace,
            api_version="resource.k8s.io/v1",
        )
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
    return [
        warning_event(
            target, reason=REASONS[source], message=message, component=component, host=node, now=now
        )
        for target in _targets(claim)
    ]


class ClaimEvents:
    """The :class:`~driver.claims.hostedits.UserspaceWarnings` that posts Events (module docstring)."""

    def __init__(self, events: EventPoster, *, component: str, node: str) -> None:
        self._events = events
        self.component = component
        self.node = node

    def warn(self, claim: JsonObject, source: UserspaceSource, warnings: Sequence[str]) -> None:
        """Queue the Events of one warning; returns at once (a full queue drops them, counted)."""
        for event in userspace_event(claim, source, warnings, component=self.component, node=self.node):
            self._events.post(event)
