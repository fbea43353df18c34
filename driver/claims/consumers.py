"""A claim's consumers: read from the apiserver for pinning, and kept in the journal.

Pinning learns who a shared claim is reserved for through the protocol it defines
(:class:`~driver.pinning.consumers.ConsumerReader`); :class:`ApiConsumerReader` implements it
over the driver's apiserver client, and :class:`ConsumerRecords` writes what was learned into the
claim's journal entry, off the runtime's path, so a restarted driver still knows those pods.

What counts as "confirmed gone" is narrow on purpose, because a gone claim's adopted entry is
released (``driver.claims.adopted``): the apiserver's NotFound Status for this very claim
(:func:`driver.kube.status.is_not_found`: a proxy's 404 page, or an apiserver that does not serve
the API, answers 404 too and names nothing), or the claim's name holding a claim with another
UID. An outage, a timeout, a 403 or any other answer is "not known", and the check runs again
later. :class:`ApiPodGroupReader` reads which PodGroup a pod belongs to, for a claim reserved for
PodGroups (its pod's own ``spec.schedulingGroup``, the same narrow rules for "gone").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

from driver.claims.driver import ClaimsDriver
from driver.claims.reservedfor import (
    POD_GROUP_API_GROUP,
    POD_GROUP_RESOURCE,
    reserved_pod_groups,
    reserved_pods,
)
from driver.errors import ConsumersUnknownError, DriverError, KubeError
from driver.kube.status import is_not_found
from driver.kube.types import ClaimGetter, PodGetter
from driver.log import get_logger
from driver.pinning.consumers import GONE_NOT_FOUND, GONE_REPLACED, ClaimConsumers
from driver.worker import QueueWorker

__all__ = ["ApiConsumerReader", "ApiPodGroupReader", "ConsumerRecords", "other_consumers"]

_log = get_logger("claims.consumers")


def other_consumers(claim: Mapping[str, object]) -> int:
    """How many entries of ``status.reservedFor`` are neither pods nor PodGroups."""
    status = claim.get("status")
    consumers = status.get("reservedFor") if isinstance(status, Mapping) else None
    count = 0
    for item in consumers if isinstance(consumers, list) else ():
        if not isinstance(item, Mapping):
            continue
        kind = (item.get("apiGroup") or "", item.get("resource"))
        if kind not in (("", "pods"), (POD_GROUP_API_GROUP, POD_GROUP_RESOURCE)):
            count += 1
    return count


class ApiConsumerReader:
    """:class:`~driver.pinning.consumers.ConsumerReader` over a :class:`ClaimGetter`.

    ``deadline``: the seconds one read may take, where it must be shorter than the getter's own
    read deadline: ``numadra run`` gives the NRI path one inside the runtime's time box, on the
    same client as every other read; the adopted-claims check uses the client's usual one (None).
    """

    def __init__(self, claims: ClaimGetter, *, deadline: float | None = None) -> None:
        self._claims = claims
        self._deadline = deadline

    def __call__(self, namespace: str, name: str, claim_uid: str, /) -> ClaimConsumers:
        """The consumers of ``namespace/name`` if it is still claim ``claim_uid``."""
        try:
            obj = self._claims.get_resource_claim(namespace, name, deadline=self._deadline)
        except KubeError as exc:
            if is_not_found(exc, "resourceclaims", name):
                return ClaimConsumers(gone=GONE_NOT_FOUND, detail=f"{namespace}/{name} not found")
            raise ConsumersUnknownError(f"cannot read claim {namespace}/{name}: {exc}") from exc
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if not isinstance(uid, str) or not uid:
            raise ConsumersUnknownError(f"claim {namespace}/{name} as read has no metadata.uid")
        if uid != claim_uid:
            return ClaimConsumers(
                gone=GONE_REPLACED, detail=f"the name {namespace}/{name} now holds claim uid {uid}"
            )
        return ClaimConsumers(
            pods=frozenset(reserved_pods(obj)),
            groups=frozenset(g.name for g in reserved_pod_groups(obj)),
            others=other_consumers(obj),
        )


class ApiPodGroupReader:
    """:class:`~driver.pinning.consumers.PodGroupReader` over a :class:`PodGetter`.

    Reads the pod itself from the apiserver: its ``spec.schedulingGroup.podGroupName`` (written
    when the pod was created and immutable since) is the group's word on its members, as
    ``status.reservedFor`` is the scheduler's on a claim's. The pod's UID must be the one the
    runtime named: a pod of another UID under that name is another pod (the one asked about is
    gone), so it belongs to no group, as a pod the apiserver's NotFound Status names does not.
    """

    def __init__(self, pods: PodGetter, *, deadline: float | None = None) -> None:
        """``deadline``: as :class:`ApiConsumerReader`'s, the seconds one read may take."""
        self._pods = pods
        self._deadline = deadline

    def __call__(self, namespace: str, name: str, pod_uid: str, /) -> str:
        """The PodGroup pod ``namespace/name`` names, if it is still pod ``pod_uid``; else ""."""
        try:
            obj = self._pods.get_pod(namespace, name, deadline=self._deadline)
        except KubeError as exc:
            if is_not_found(exc, "pods", name, group=""):
                return ""
            raise ConsumersUnknownError(f"cannot read pod {namespace}/{name}: {exc}") from exc
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if not isinstance(uid, str) or not uid:
            raise ConsumersUnknownError(f"pod {namespace}/{name} as read has no metadata.uid")
        if uid != pod_uid:
            _log.info(
                "the pod's name holds another pod", pod=f"{namespace}/{name}", pod_uid=pod_uid, found=uid
            )
            return ""
        spec = obj.get("spec")
        group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
        named = group.get("podGroupName") if isinstance(group, Mapping) else None
        return named if isinstance(named, str) else ""


class ConsumerRecords:
    """Keeps learned consumers in the claims' journal entries, on a thread of its own.

    :meth:`record` only queues (a :class:`~driver.worker.QueueWorker`): the caller is the NRI
    plugin answering the runtime, which must not wait for the cross-process lock a prepare may
    hold. The worker takes that lock (``hold``), adds the pods to the entry
    (:meth:`ClaimsDriver.record_consumers`) and calls ``on_change`` (the prepared-claims index goes
    stale). Best effort: a failed write is logged, and the pod is read again from the apiserver
    the next time it is needed; a full queue drops the record.
    """

    def __init__(
        self,
        claims: ClaimsDriver,
        *,
        hold: Callable[[], AbstractContextManager[object]],
        on_change: Callable[[], None] = lambda: None,
        max_queued: int = 256,
    ) -> None:
        self._claims = claims
        self._hold = hold
        self._on_change = on_change
        #: (claim UID, pods) to write
        self._worker: QueueWorker[tuple[str, frozenset[str]]] = QueueWorker(
            "consumer-records", self._write, max_queued=max_queued
        )

    def record(self, claim_uid: str, pods: frozenset[str]) -> None:
        """Queue the pods for the claim's entry (never blocks)."""
        if not self._worker.put((claim_uid, pods)):
            why = "closed" if self._worker.closed else "queue full"
            _log.warning("consumer record dropped", why=why, claim_uid=claim_uid)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every record queued before is written (tests, shutdown); False on timeout."""
        return self._worker.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (up to ``timeout``), then end the worker."""
        self._worker.close(timeout)

    def _write(self, item: tuple[str, frozenset[str]]) -> None:
        claim_uid, pods = item
        try:
            with self._hold():
                changed = self._claims.record_consumers(claim_uid, pods)
        except (DriverError, OSError) as exc:
            _log.warning("cannot record the claim's consumers", claim_uid=claim_uid, error=str(exc))
            return
        if changed:
            _log.info("recorded the claim's consumers", claim_uid=claim_uid, pods=sorted(pods))
            self._on_change()
