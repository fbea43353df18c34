"""Learning who a prepared claim is reserved for, when a container names it from an unrecorded pod.

The kubelet prepares a claim once, for the first pod that needs it, and never calls the driver
again for the next pods of a shared claim (a ``resourceClaimName`` used by several pods, the
claims of a PodGroup). So the pods recorded at prepare are not all of a claim's consumers, and an
entry rebuilt from the files on disk (the journal lost it) records none. When a container names a
prepared claim and its pod is not a recorded consumer, :class:`ConsumerCheck` asks the apiserver
for the claim's ``status.reservedFor`` (written by the scheduler and the resource claim
controller, never by a pod), at most once per claim at a time:

* the claim is reserved for PodGroups (workload-aware scheduling) and the pod is not listed: the
  check asks the apiserver for the pod itself (:class:`PodGroupReader`, in the claim's
  namespace, its UID checked) and the pod is a consumer when its ``spec.schedulingGroup`` names
  one of those groups. A container's env, labels or annotations never decide it: they are the
  pod's own words. A group recorded for the claim needs no read of the claim first, and the pods
  of a known group are read side by side (one read per pod at a time, not per claim); a pod
  confirmed is remembered and recorded as a listed one is, and an answer that it is not a member
  is kept as the "not listed" one below;
* the pod is listed: it is a consumer. The check remembers it, and hands every pod the read
  listed to the recorder, which keeps them with the claim (the journal entry's pods), so the next
  containers, and a restarted driver, need no read;
* the pod is not listed: it is not one (the backend refuses a CPU claim's container). The answer
  is kept for the pod a short while, so a pod that retries, or starts many containers, costs one
  read, not one per container; a read another container was waiting for answers for its pod
  too, so pods that name one claim at once cost one read, not one each;
* the claim is gone (the apiserver's NotFound Status for it, or another claim has its name): no
  pod is;
* the read failed (unreachable, too slow, forbidden) or the claim's name is not known:
  :class:`~driver.errors.ConsumersUnknownError`, never taken as proof either way; the backend
  fails closed for a claim with CPUs. A failure is kept for the claim a moment, so an outage
  costs one read per claim per moment, not one per container.

What is remembered answers without a read (:meth:`ConsumerCheck.remembered`): the NRI plugin
asks that first, on its path that never waits, and sends only the rest to its bounded reads.

The reader (:class:`ConsumerReader`) is injected where ``numadra run`` is wired: pinning sits
above ``kube`` but knows only this protocol; ``driver.claims.consumers`` implements it over the
driver's apiserver client with a deadline inside the runtime's time box.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from driver.errors import ConsumersUnknownError, PinRefusedError
from driver.log import get_logger
from driver.pinning.failures import REASON_NOT_RESERVED
from driver.pinning.types import ClaimBinding

__all__ = [
    "GONE_NOT_FOUND",
    "GONE_REASONS",
    "GONE_REPLACED",
    "READ_DEADLINE_S",
    "ClaimConsumers",
    "ConsumerCheck",
    "ConsumerReader",
    "ConsumerRecorder",
    "PodGroupReader",
]

#: seconds a read made on the runtime's path may take: half of the NRI plugin's time box, so the
#: decision (and a refusal naming the outage) still reaches the runtime inside it
READ_DEADLINE_S = 0.5
#: seconds a "this pod is not a consumer" answer is reused for that pod and claim
NEGATIVE_TTL_S = 5.0
#: seconds a failed read is reused for the claim (an outage costs one read per claim per period)
FAILURE_TTL_S = 1.0
#: how long a caller waits for a read another thread started for the same claim
WAIT_FOR_READ_S = 2.0
#: remembered negative answers beyond which expired ones are dropped (pods of a hostile tenant)
_PRUNE_ABOVE = 1024

_log = get_logger("pinning.consumers")


#: :attr:`ClaimConsumers.gone`: the apiserver's NotFound Status named the claim
GONE_NOT_FOUND = "not_found"
#: :attr:`ClaimConsumers.gone`: the claim's name holds a claim with another UID
GONE_REPLACED = "replaced"
#: every way a claim can be confirmed gone (the ``reason`` of an adopted claim's release)
GONE_REASONS = (GONE_NOT_FOUND, GONE_REPLACED)


@dataclass(frozen=True, slots=True)
class ClaimConsumers:
    """What the apiserver answered about a claim's consumers."""

    #: UIDs of the pods in ``status.reservedFor``
    pods: frozenset[str] = frozenset()
    #: names of the PodGroups in ``status.reservedFor`` (their pods are consumers)
    groups: frozenset[str] = frozenset()
    #: consumers that are neither pods nor PodGroups: numadra cannot tell their pods
    others: int = 0
    #: "" while the claim exists; else how the apiserver confirmed it gone (``GONE_*``)
    gone: str = ""
    #: what the apiserver said, for messages ("ml/train not found", "... holds claim uid X")
    detail: str = ""

    @property
    def exists(self) -> bool:
        """True unless the apiserver confirmed the claim gone."""
        return not self.gone


class ConsumerReader(Protocol):
    """Reads one claim's consumers from the apiserver, within a deadline.

    Raises :class:`~driver.errors.ConsumersUnknownError` when the answer is not known (no answer
    in time, apiserver unreachable, the read refused, any other 404); a NotFound Status for the
    claim, or a claim of another UID under its name, is a :class:`ClaimConsumers` with ``gone``
    set.
    """

    def __call__(self, namespace: str, name: str, claim_uid: str, /) -> ClaimConsumers:
        """The consumers of claim ``namespace/name`` whose UID must be ``claim_uid``."""
        ...


class PodGroupReader(Protocol):
    """Reads which PodGroup a pod belongs to from the apiserver, within a deadline.

    Returns the name in the pod's ``spec.schedulingGroup.podGroupName``; "" when it names none,
    when the apiserver's NotFound Status names the pod, or when the name holds a pod of another
    UID (that pod is gone). Raises :class:`~driver.errors.ConsumersUnknownError` when the answer
    is not known (no answer in time, apiserver unreachable, the read refused).
    """

    def __call__(self, namespace: str, name: str, pod_uid: str, /) -> str:
        """The PodGroup of pod ``namespace/name`` whose UID must be ``pod_uid``."""
        ...


#: keeps pods learned for a claim (claim UID, pod UIDs) with its record; must not block long
ConsumerRecorder = Callable[[str, frozenset[str]], None]


@dataclass(slots=True)
class _Read:
    """A read of one claim in progress: the others wait for it."""

    done: threading.Event
    result: ClaimConsumers | None = None
    error: str = ""


class ConsumerCheck:
    """Confirms a pod as a claim's consumer through the apiserver (see the module docstring)."""

    def __init__(
        self,
        reader: ConsumerReader,
        recorder: ConsumerRecorder | None = None,
        *,
        pod_groups: PodGroupReader | None = None,
        negative_ttl_s: float = NEGATIVE_TTL_S,
        failure_ttl_s: float = FAILURE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = reader
        self._recorder = recorder
        #: reads a pod's PodGroup; None: a pod is never confirmed through a group
        self._pod_groups = pod_groups
        self._negative_ttl = negative_ttl_s
        self._failure_ttl = failure_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        #: claim UID -> pods confirmed as its consumers since start
        self._learned: dict[str, frozenset[str]] = {}
        #: claim UID -> PodGroups a read of it found in its ``status.reservedFor``
        self._learned_groups: dict[str, frozenset[str]] = {}
        #: (claim UID, pod UID) -> when a read showed the pod is not a consumer
        self._not_consumer: dict[tuple[str, str], float] = {}
        #: claim UID -> (when, why) the apiserver confirmed it gone
        self._gone: dict[str, tuple[float, str]] = {}
        #: claim UID -> (when, why) its last read failed
        self._failed: dict[str, tuple[float, str]] = {}
        #: reads in progress: per claim (its consumers), or per claim and pod (a pod's PodGroup,
        #: once the claim's groups are known: the pods of a group are read side by side)
        self._reading: dict[str | tuple[str, str], _Read] = {}
        #: reads sent to the apiserver (``numadra state`` and tests count them)
        self.reads = 0

    def learned(self, claim_uid: str) -> frozenset[str]:
        """The pods confirmed as consumers of ``claim_uid`` since start."""
        with self._lock:
            return self._learned.get(claim_uid, frozenset())

    def confirm(self, binding: ClaimBinding, pod_uid: str, pod_name: str = "") -> ClaimBinding:
        """``binding`` with the consumers known now, read from the apiserver when ``pod_uid`` is
        not among them (at most once per claim at a time, see the module docstring). ``pod_name``
        is the pod's name, read when the claim is reserved for PodGroups.

        Raises :class:`~driver.errors.ConsumersUnknownError` when they cannot be learned, and
        :class:`~driver.errors.PinRefusedError` for a claim with CPUs the apiserver confirms gone.
        """
        uid = binding.claim_uid
        for _ in range(2):  # a second round after waiting for another thread's read
            with self._lock:
                answered = self._remembered(binding, pod_uid)
                if answered is not None:
                    return answered
                key = self._read_key(binding, pod_uid)
                pending = self._reading.get(key)
                if pending is None:
                    pending = self._reading[key] = _Read(threading.Event())
                    break
            if not pending.done.wait(WAIT_FOR_READ_S):
                raise ConsumersUnknownError(
                    f"the read of claim {binding.namespace}/{binding.name}'s consumers started for "
                    "another container has not finished"
                )
            got = pending.result
            if got is not None and got.exists and not got.groups and pod_uid and pod_uid not in got.pods:
                with self._lock:  # that read answers for this pod too: not one of its consumers
                    self._remember_not_consumer(uid, pod_uid, self._clock())
        else:
            raise ConsumersUnknownError(f"the consumers of claim uid {uid} could not be learned")
        return self._read(binding, pod_uid, pod_name, key, pending)

    def remembered(self, binding: ClaimBinding, pod_uid: str) -> ClaimBinding | None:
        """What :meth:`confirm` would answer from what it remembers, without a read: None when
        the answer needs one. The NRI plugin asks this first, on the path that must never wait
        for the apiserver (it raises as :meth:`confirm` does for a remembered failure or a claim
        confirmed gone)."""
        with self._lock:
            return self._remembered(binding, pod_uid)

    def _remembered(self, binding: ClaimBinding, pod_uid: str) -> ClaimBinding | None:
        """The answer the remembered reads give (caller holds the lock); None: a read is needed."""
        uid = binding.claim_uid
        known = self._learned.get(uid)
        if (known is not None and pod_uid in known) or (binding.pods is not None and pod_uid in binding.pods):
            return _with(binding, known)
        now = self._clock()
        gone = self._gone.get(uid)
        if gone is not None and now - gone[0] < self._negative_ttl:
            return self._gone_binding(binding, gone[1])
        if pod_uid and now - self._not_consumer.get((uid, pod_uid), -1e18) < self._negative_ttl:
            return _with(binding, known)
        failed = self._failed.get(uid)
        if failed is not None and now - failed[0] < self._failure_ttl:
            raise ConsumersUnknownError(failed[1])
        return None

    def _read_key(self, binding: ClaimBinding, pod_uid: str) -> str | tuple[str, str]:
        """Which read a container waits for (caller holds the lock): the claim's, unless its
        PodGroups are known, then its pod's own."""
        uid = binding.claim_uid
        if binding.pod_groups or uid in self._learned_groups:
            return (uid, pod_uid)
        return uid

    def _read(
        self, binding: ClaimBinding, pod_uid: str, pod_name: str, key: str | tuple[str, str], pending: _Read
    ) -> ClaimBinding:
        """Ask the apiserver (this thread started the claim's read), then let the waiters go."""
        uid = binding.claim_uid
        try:
            got, member = self._ask(binding, pod_uid, pod_name)
            pending.result = got
        except ConsumersUnknownError as exc:
            with self._lock:
                self._failed[uid] = (self._clock(), str(exc))
                pending.error = str(exc)
            raise
        finally:
            with self._lock:
                self._reading.pop(key, None)
            pending.done.set()
        with self._lock:
            now = self._clock()
            self._failed.pop(uid, None)
            if got is not None and not got.exists:
                self._gone[uid] = (now, got.detail)
                return self._gone_binding(binding, got.detail)
            if got is not None:
                self._gone.pop(uid, None)
            confirmed = (got.pods if got is not None else frozenset()) | (
                frozenset({pod_uid}) if member else frozenset()
            )
            before = self._learned.get(uid)
            if got is not None or member:
                self._learned[uid] = (before or frozenset()) | confirmed
            known = self._learned.get(uid)
            if pod_uid and pod_uid not in confirmed:
                self._remember_not_consumer(uid, pod_uid, now)
        new = confirmed - (before or frozenset()) - (binding.pods or frozenset())
        if new and self._recorder is not None:
            try:
                self._recorder(uid, confirmed)
            except Exception as exc:  # the decision stands; the record follows at the next read
                _log.warning("cannot record the claim's consumers", claim_uid=uid, error=str(exc))
        if pod_uid and pod_uid not in confirmed:
            _log.info(
                "pod is not among the claim's consumers on the apiserver",
                claim_uid=uid,
                pod_uid=pod_uid,
                pods=sorted(got.pods) if got is not None else None,
                pod_groups=sorted(self._groups_of(binding)),
                other_consumers=got.others if got is not None else None,
            )
        return _with(binding, known)

    def _groups_of(self, binding: ClaimBinding) -> frozenset[str]:
        """The PodGroups the claim is known to be reserved for: recorded, or read since start."""
        with self._lock:
            return binding.group_names | self._learned_groups.get(binding.claim_uid, frozenset())

    def _ask(self, binding: ClaimBinding, pod_uid: str, pod_name: str) -> tuple[ClaimConsumers | None, bool]:
        """The reads the answer needs: the claim's consumers, unless a PodGroup of it is known
        already; then, when the claim has PodGroups and does not list the pod, the pod's own group.
        Returns the claim's consumers (None when not read) and whether the pod is a member."""
        groups = self._groups_of(binding)
        got = None
        if not groups:
            got = self._read_claim(binding)
            if not got.exists or pod_uid in got.pods or not got.groups:
                return got, False
            groups = got.groups
            with self._lock:
                self._learned_groups[binding.claim_uid] = groups
        return got, self._is_member(binding, pod_uid, pod_name, groups)

    def _read_claim(self, binding: ClaimBinding) -> ClaimConsumers:
        uid = binding.claim_uid
        if not binding.name or not binding.namespace:
            raise ConsumersUnknownError(
                f"the name of claim uid {uid} is not recorded (its entry was rebuilt without its "
                "metadata file), so its consumers cannot be read"
            )
        with self._lock:
            self.reads += 1
        return self._reader(binding.namespace, binding.name, uid)

    def _is_member(self, binding: ClaimBinding, pod_uid: str, pod_name: str, groups: frozenset[str]) -> bool:
        """Whether the pod's own ``spec.schedulingGroup`` names one of ``groups``, as the
        apiserver has it (the pod read in the claim's namespace, its UID checked)."""
        claim = f"claim {binding.namespace}/{binding.name} (uid {binding.claim_uid})"
        named = ", ".join(sorted(groups))
        if self._pod_groups is None:
            raise ConsumersUnknownError(
                f"{claim} is reserved for PodGroup {named}, and this check cannot read pods to "
                "tell that group's members"
            )
        if not pod_uid or not pod_name:
            raise ConsumersUnknownError(
                f"{claim} is reserved for PodGroup {named}, and the runtime did not name the pod "
                "(its name and UID), so its membership cannot be read"
            )
        with self._lock:
            self.reads += 1
        group = self._pod_groups(binding.namespace, pod_name, pod_uid)
        if group in groups:
            _log.info(
                "pod is a member of a PodGroup the claim is reserved for",
                claim_uid=binding.claim_uid,
                pod_uid=pod_uid,
                pod_group=group,
            )
            return True
        return False

    def _remember_not_consumer(self, uid: str, pod_uid: str, now: float) -> None:
        """Keep the negative answer (caller holds the lock); drop expired ones when many."""
        table = self._not_consumer
        if len(table) >= _PRUNE_ABOVE:
            for key in [k for k, t in table.items() if now - t >= self._negative_ttl]:
                del table[key]
        table[(uid, pod_uid)] = now

    @staticmethod
    def _gone_binding(binding: ClaimBinding, detail: str) -> ClaimBinding:
        """No pod holds a claim the apiserver confirms gone: refused with CPUs, else no pods."""
        if binding.pinning is not None:
            raise PinRefusedError(
                f"claim {binding.namespace}/{binding.name} (uid {binding.claim_uid}) is gone from "
                f"the apiserver ({detail}): no pod holds it, so no container is pinned for it",
                reason=REASON_NOT_RESERVED,
            )
        return replace(binding, pods=frozenset())


def _with(binding: ClaimBinding, learned: frozenset[str] | None) -> ClaimBinding:
    """``binding`` whose pods include those learned; ``learned`` None: the claim was never read
    (then pods the record does not know stay unknown)."""
    if learned is None:
        return binding
    return replace(binding, pods=(binding.pods or frozenset()) | learned)
