"""Containers of a claim that were not pinned as their claim says: the vocabulary to report them.

A claim container that cannot be pinned is refused (the runtime does not create it) or, where
refusing would stop more than it protects, created without the claim's pinning. Neither may pass
silently: each backend hands a :class:`PinFailure` to a :data:`PinFailureSink`, which ``numadra
run`` turns into a counter (``numadra_pinning_failures_total``) and a Warning Event on the pod
(``driver.observability.pinreports``). The labels are fixed sets, so a bug or a hostile pod
cannot grow the metric's series.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "ACTION_DEFAULTED",
    "ACTION_REFUSED",
    "ACTION_UNCHECKED",
    "ACTION_UNPINNED",
    "ACTION_WIDENED",
    "PIN_FAILURE_ACTIONS",
    "PIN_FAILURE_REASONS",
    "REASON_ALIGN_UNCONFINED",
    "REASON_ALIGN_WIDENED",
    "REASON_BAD_ANNOTATION",
    "REASON_BAD_MARKER",
    "REASON_CONSUMERS_UNKNOWN",
    "REASON_DEVICES_UNPLACED",
    "REASON_DEVICES_UNREAD",
    "REASON_LOOKUP_FAILED",
    "REASON_NOT_PINNER",
    "REASON_NOT_RESERVED",
    "REASON_POOL_EMPTY",
    "REASON_READS_BUSY",
    "REASON_TIMEOUT",
    "REASON_UNKNOWN_CLAIM",
    "PinFailure",
    "PinFailureSink",
]

#: the container's pod is not one the claim is reserved for (a copied marker, in the usual case)
REASON_NOT_RESERVED = "not_reserved"
#: the claim's consumers could not be learned from the apiserver (outage, timeout, name unknown)
REASON_CONSUMERS_UNKNOWN = "consumers_unknown"
#: the marker names no claim, or one this driver has not prepared (or there are no records)
REASON_UNKNOWN_CLAIM = "unknown_claim"
#: the driver's record of the claim could not be read (the journal unreadable, say)
REASON_LOOKUP_FAILED = "lookup_failed"
#: a malformed marker, or a request the claim has no CPUs for
REASON_BAD_MARKER = "bad_marker"
#: the node shared pool is empty: a container on it would run on every CPU
REASON_POOL_EMPTY = "pool_empty"
#: this process may not adjust containers and cannot tell that another one does (pinner lock)
REASON_NOT_PINNER = "not_pinner"
#: the answer did not come within the runtime's time box, so it carried no adjustment
REASON_TIMEOUT = "timeout"
#: the claim's consumers needed a read, and the pod's namespace (or the node) had as many reads
#: of the apiserver in flight as the NRI plugin allows
REASON_READS_BUSY = "reads_busy"
#: a device container's NUMA node(s) could not hold its CPU request or memory limit: widened to
#: the nearest nodes (``driver.pinning.align``)
REASON_ALIGN_WIDENED = "align_widened"
#: a device container that no set of NUMA nodes could hold: left unconfined
REASON_ALIGN_UNCONFINED = "align_unconfined"
#: the pod's ``numadra.dev/align`` annotation is neither "on" nor "off"
REASON_BAD_ANNOTATION = "bad_annotation"
#: a container without numadra's marker whose pod could not be read for the devices of other
#: DRA drivers it holds (no RBAC to get pods, a slow apiserver, the reads busy): left unconfined
REASON_DEVICES_UNREAD = "devices_unread"
#: a container holding other DRA drivers' devices none of which has a NUMA node known on this
#: host (a junk numaNode and no pciBusID here, a claim on another node's pool): left unconfined
REASON_DEVICES_UNPLACED = "devices_unplaced"
PIN_FAILURE_REASONS = (
    REASON_NOT_RESERVED,
    REASON_CONSUMERS_UNKNOWN,
    REASON_UNKNOWN_CLAIM,
    REASON_LOOKUP_FAILED,
    REASON_BAD_MARKER,
    REASON_POOL_EMPTY,
    REASON_NOT_PINNER,
    REASON_TIMEOUT,
    REASON_READS_BUSY,
    REASON_ALIGN_WIDENED,
    REASON_ALIGN_UNCONFINED,
    REASON_BAD_ANNOTATION,
    REASON_DEVICES_UNREAD,
    REASON_DEVICES_UNPLACED,
)

#: the runtime was told to refuse the container
ACTION_REFUSED = "refused"
#: the container was created without (all of) its claim's pinning
ACTION_UNPINNED = "unpinned"
#: a running container was left as it runs: whether its pod holds the claim could not be checked
ACTION_UNCHECKED = "unchecked"
#: the container was pinned, on more NUMA nodes than its devices'
ACTION_WIDENED = "widened"
#: a setting of the pod was not understood: the default was applied
ACTION_DEFAULTED = "defaulted"
PIN_FAILURE_ACTIONS = (ACTION_REFUSED, ACTION_UNPINNED, ACTION_UNCHECKED, ACTION_WIDENED, ACTION_DEFAULTED)


@dataclass(frozen=True, slots=True)
class PinFailure:
    """One claim container not pinned as its claim says, with the pod to report it on."""

    reason: str
    action: str
    pod_namespace: str
    pod_name: str
    pod_uid: str
    container: str
    claim_uid: str
    #: the same text the log line and the refusal carry (names claim, pod and container)
    message: str
    #: False: count it, but write no Event (a cause said once for the node, not on every pod)
    event: bool = True

    def __post_init__(self) -> None:
        if self.reason not in PIN_FAILURE_REASONS:
            raise ValueError(f"unknown pinning failure reason {self.reason!r}")
        if self.action not in PIN_FAILURE_ACTIONS:
            raise ValueError(f"unknown pinning failure action {self.action!r}")


#: where a backend reports a :class:`PinFailure` (must not block: it runs on the runtime's path)
PinFailureSink = Callable[[PinFailure], None]
