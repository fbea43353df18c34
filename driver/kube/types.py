"""Small protocols for what the driver logic needs from the apiserver, so it can be tested alone.

Objects travel as plain JSON dicts (the wire shape, camelCase keys): decoding into the client's
model classes would cost more per claim than the HTTP call itself, on the prepare path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["ClaimGetter", "JsonObject", "PodGetter", "allocation_results"]

JsonObject = Mapping[str, Any]


@runtime_checkable
class ClaimGetter(Protocol):
    """Fetches one ResourceClaim (resource.k8s.io/v1) as its JSON object.

    Raises :class:`driver.errors.KubeError` when the apiserver cannot be reached or answers with an
    error; the message says which (404 "not found" is distinguishable via ``status``).
    """

    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        """GET /apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}; ``deadline``:
        the seconds this read may take, where shorter than the getter's own (None: its own)."""
        ...


@runtime_checkable
class PodGetter(Protocol):
    """Fetches one Pod (core/v1) as its JSON object; raises :class:`driver.errors.KubeError` as
    :class:`ClaimGetter` does."""

    def get_pod(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        """GET /api/v1/namespaces/{namespace}/pods/{name}; ``deadline`` as for a claim."""
        ...


def allocation_results(claim: JsonObject) -> list[JsonObject]:
    """``status.allocation.devices.results`` of a claim; [] when unallocated, null or malformed.

    Claims come from the apiserver and from files a user hands to ``explain``, so a missing or
    null level and entries that are not objects are read as "no results", never as a crash.
    """
    level: Any = claim
    for key in ("status", "allocation", "devices", "results"):
        level = level.get(key) if isinstance(level, Mapping) else None
    return [r for r in level if isinstance(r, Mapping)] if isinstance(level, list) else []
