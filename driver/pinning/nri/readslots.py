"""How many reads of the apiserver the NRI plugin has in flight, per namespace and in all.

A container whose pod is not among its claim's recorded consumers costs a read of the claim
(:mod:`driver.pinning.consumers`), and any pod can ask for that: its spec names a claim of its
namespace that it does not hold. The reads run on a pool of their own, never on the threads that
answer the other containers; this bounds them so that one namespace (one tenant) cannot take
them all: at most ``per_namespace`` reads in flight for the pods of one namespace, ``total`` for
the node. A container that would need a read beyond that is refused at once, with the reason
``reads_busy``, and the kubelet retries it; by then the reads in flight have usually taught the
plugin the answer, which it gives without a read.

A slot is held from the moment a read is admitted until its handler returns, also when the
runtime's time box ran out first and the answer went without it: the bound counts the reads that
really run, so the read pool (``total`` threads) never has a read waiting for a thread.
"""

from __future__ import annotations

import threading

__all__ = ["READS_IN_FLIGHT", "READS_PER_NAMESPACE", "ReadSlots"]

#: reads in flight for the pods of one namespace
READS_PER_NAMESPACE = 4
#: reads in flight for the whole node (the read pool's size)
READS_IN_FLIGHT = 16


class ReadSlots:
    """Admission to the NRI plugin's reads: ``per_namespace`` and ``total`` at a time."""

    def __init__(self, per_namespace: int = READS_PER_NAMESPACE, total: int = READS_IN_FLIGHT) -> None:
        if not 0 < per_namespace <= total:
            raise ValueError(f"read slots: need 0 < per_namespace <= total, got {per_namespace}, {total}")
        self.per_namespace = per_namespace
        self.total = total
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._in_flight = 0
        #: reads refused since start, because a bound was reached
        self.refused = 0

    def take(self, namespace: str) -> bool:
        """Take a slot for a read on behalf of a pod of ``namespace``; False when a bound is reached."""
        with self._lock:
            held = self._held.get(namespace, 0)
            if held >= self.per_namespace or self._in_flight >= self.total:
                self.refused += 1
                return False
            self._held[namespace] = held + 1
            self._in_flight += 1
            return True

    def give_back(self, namespace: str) -> None:
        """Return the slot :meth:`take` gave for ``namespace``."""
        with self._lock:
            held = self._held.get(namespace, 0)
            if held <= 0:
                return
            if held == 1:
                del self._held[namespace]  # the table holds only namespaces with reads in flight
            else:
                self._held[namespace] = held - 1
            self._in_flight -= 1

    def in_flight(self, namespace: str | None = None) -> int:
        """Reads in flight for ``namespace``, or for the node when None."""
        with self._lock:
            return self._in_flight if namespace is None else self._held.get(namespace, 0)

    def why_not(self, namespace: str) -> str:
        """Which bound a refused read met, for the refusal's text."""
        with self._lock:
            if self._held.get(namespace, 0) >= self.per_namespace:
                return (
                    f"namespace {namespace or '?'} has {self.per_namespace} reads of the apiserver in flight"
                )
            return f"the node has {self.total} reads of the apiserver in flight"
