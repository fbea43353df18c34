"""Who a claim is reserved for: the consumers in its ``status.reservedFor``, parsed once.

The scheduler and the resource claim controller write ``status.reservedFor`` (never a pod), and
the kubelet prepares a claim only for a pod the list names, directly or through its PodGroup.
Each entry is a ``ResourceClaimConsumerReference`` {``apiGroup``, ``resource``, ``name``,
``uid``}, in the claim's namespace:

* a pod: ``apiGroup`` "" (the core group), ``resource`` ``pods``;
* a PodGroup (workload-aware scheduling, ``DRAWorkloadResourceClaims``, beta in Kubernetes
  1.37): ``apiGroup`` ``scheduling.k8s.io``, ``resource`` ``podgroups``; a pod belongs to it
  when its ``spec.schedulingGroup.podGroupName`` names it (same namespace).

Pinning is bound to these consumers (``driver.pinning.binding``). Malformed entries (not an
object, a missing or empty name or UID, another kind) are skipped: the list is the apiserver's,
and a claim is never failed for a field only pinning reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from driver.pinning.types import PodGroupRef

__all__ = ["POD_GROUP_API_GROUP", "POD_GROUP_RESOURCE", "reserved_pod_groups", "reserved_pods"]

#: ``apiGroup`` of a PodGroup consumer reference (the workload API's group)
POD_GROUP_API_GROUP = "scheduling.k8s.io"
#: ``resource`` of a PodGroup consumer reference
POD_GROUP_RESOURCE = "podgroups"


def _entries(claim: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The object entries of ``status.reservedFor`` (nothing for a missing or malformed list)."""
    status = claim.get("status")
    consumers = status.get("reservedFor") if isinstance(status, Mapping) else None
    for item in consumers if isinstance(consumers, list) else ():
        if isinstance(item, Mapping):
            yield item


def _is(item: Mapping[str, Any], api_group: str, resource: str) -> bool:
    return item.get("resource") == resource and (item.get("apiGroup") or "") == api_group


def reserved_pods(claim: Mapping[str, Any]) -> tuple[str, ...]:
    """UIDs of the pods in the claim's ``status.reservedFor``, in order, each once."""
    pods: list[str] = []
    for item in _entries(claim):
        uid = item.get("uid")
        if _is(item, "", "pods") and isinstance(uid, str) and uid and uid not in pods:
            pods.append(uid)
    return tuple(pods)


def reserved_pod_groups(claim: Mapping[str, Any]) -> tuple[PodGroupRef, ...]:
    """The PodGroups in the claim's ``status.reservedFor`` (name and UID both set), each once."""
    groups: list[PodGroupRef] = []
    for item in _entries(claim):
        name, uid = item.get("name"), item.get("uid")
        if not _is(item, POD_GROUP_API_GROUP, POD_GROUP_RESOURCE):
            continue
        if isinstance(name, str) and name and isinstance(uid, str) and uid:
            ref = PodGroupRef(name=name, uid=uid)
            if ref not in groups:
                groups.append(ref)
    return tuple(groups)
