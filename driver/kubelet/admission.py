"""Admission of the DRA socket's gRPC calls by kind, so no kind can take the threads of another.

The synchronous gRPC server runs every call, of every service on the socket, on one thread pool,
first come first served. Without admission, prepares stuck on a slow apiserver fill the pool and
queue an unrelated unprepare behind them until the kubelet's 45 s call timeout runs out, and open
health streams (``NodeWatchResources``, which last as long as the kubelet watches) starve prepare
altogether.

:class:`CallSlots` gives each kind of call its own number of slots: prepare, unprepare and health
streams. A call that finds its kind's slots all taken is answered at once with
``RESOURCE_EXHAUSTED`` (the kubelet retries a failed prepare or unprepare, and reopens a failed
health stream after a pause) instead of waiting for a thread. The server's pool has a thread for every
slot plus a few spare ones to answer those refusals, so an admitted call never waits for a thread
and a slow kind only ever fills its own slots.

The slots are taken by the servicers' own methods, wrapped once when the server is built
(:meth:`CallSlots.guard`), not by a gRPC server interceptor: grpc runs an interceptor on its one
polling thread for every call and builds a new method handler each time, a cost every call pays
on the one thread that polls for all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import Any

import grpc

from driver.log import get_logger

__all__ = ["CallKind", "CallSlots"]

_log = get_logger("kubelet.admission")


class CallKind(StrEnum):
    """The kinds of call that get their own slots."""

    PREPARE = "prepare"
    UNPREPARE = "unprepare"
    HEALTH = "health stream"


#: the methods that take a slot (the same names in every version of their service)
_BY_METHOD = {
    "NodePrepareResources": CallKind.PREPARE,
    "NodeUnprepareResources": CallKind.UNPREPARE,
    "NodeWatchResources": CallKind.HEALTH,
}
#: the kinds whose method is a server stream; the others are unary
_STREAMING = frozenset({CallKind.HEALTH})

#: threads beyond the slots: they only answer refusals (and calls of no kind), which return at once
SPARE_THREADS = 4


_Unary = Callable[[Any, grpc.ServicerContext], Any]
_Stream = Callable[[Any, grpc.ServicerContext], Iterator[Any]]


class CallSlots:
    """A bounded number of slots per :class:`CallKind`, taken by the guarded servicer methods."""

    def __init__(self, limits: Mapping[CallKind, int]) -> None:
        self.limits = dict(limits)
        self._lock = threading.Lock()
        self._in_use: dict[CallKind, int] = dict.fromkeys(self.limits, 0)
        #: calls refused per kind since start (for tests and debugging)
        self.refused: dict[CallKind, int] = dict.fromkeys(self.limits, 0)

    def free(self, kind: CallKind) -> int:
        """How many calls of ``kind`` would be admitted now."""
        with self._lock:
            return self.limits[kind] - self._in_use[kind]

    @property
    def threads(self) -> int:
        """The worker threads the server needs so that an admitted call never waits for one."""
        return sum(self.limits.values()) + SPARE_THREADS

    def guard(self, servicer: object, service: str) -> None:
        """Make each method of ``servicer`` that has a kind run in a slot of it or be refused.

        ``service`` is the full gRPC service name (``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``),
        for the refusal's log line. Call it before the servicer is added to the server: the
        generated ``add_*_to_server`` reads the methods then.
        """
        for name, kind in _BY_METHOD.items():
            behavior = getattr(servicer, name, None)
            if behavior is None or kind not in self.limits:
                continue
            method = f"/{service}/{name}"
            wrap = self._stream if kind in _STREAMING else self._unary
            setattr(servicer, name, wrap(kind, method, behavior))

    def _admit(self, kind: CallKind, method: str, context: grpc.ServicerContext) -> None:
        """Take a slot, or end the call with RESOURCE_EXHAUSTED (``abort`` raises)."""
        limit = self.limits[kind]
        with self._lock:
            if self._in_use[kind] < limit:
                self._in_use[kind] += 1
                return
            self.refused[kind] += 1
        _log.warning(
            "call refused: all slots of its kind are taken", method=method, kind=str(kind), slots=limit
        )
        context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{method.rpartition('/')[2]}: {limit} {kind} calls are already running "
            "(a slow apiserver?); retry later",
        )

    def _release(self, kind: CallKind) -> None:
        with self._lock:
            self._in_use[kind] -= 1

    def _unary(self, kind: CallKind, method: str, behavior: _Unary) -> _Unary:
        def admitted(request: Any, context: grpc.ServicerContext) -> Any:
            self._admit(kind, method, context)
            try:
                return behavior(request, context)
            finally:
                self._release(kind)

        return admitted

    def _stream(self, kind: CallKind, method: str, behavior: _Stream) -> _Stream:
        def admitted(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            self._admit(kind, method, context)
            once = threading.Lock()

            def release() -> None:
                # the RPC ended (finished, cancelled or failed): grpc may drop a suspended generator
                # without closing it, so its end is known here, not in a ``finally``
                if once.acquire(blocking=False):
                    self._release(kind)

            if not context.add_callback(release):
                release()  # already over
            return behavior(request, context)

        return admitted
