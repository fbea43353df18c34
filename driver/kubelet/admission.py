"""Admission of the DRA socket's gRPC calls by kind, so no kind can take the threads of another.

The synchronous gRPC server runs every call, of every service on the socket, on one thread pool,
first come first served. With 16 threads, 17 prepares stuck on a slow apiserver queued an unrelated
unprepare behind them until the kubelet's 45 s ran out, and 20 open health streams
(``NodeWatchResources``, which last as long as the kubelet watches) starved prepare altogether.

:class:`CallSlots` gives each kind of call its own number of slots: prepare, unprepare and health
streams. A call that finds its kind's slots all taken is answered at once with
``RESOURCE_EXHAUSTED`` (the kubelet retries a failed prepare or unprepare, and reopens a failed
health stream after 5 s) instead of waiting for a thread. The server's pool has a thread for every
slot plus a few spare ones to answer those refusals, so an admitted call never waits for a thread
and a slow kind only ever fills its own slots.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import grpc

from driver.log import get_logger

__all__ = ["CallKind", "CallSlots"]

_log = get_logger("kubelet.admission")


class CallKind(StrEnum):
    """The kinds of call that get their own slots."""

    PREPARE = "prepare"
    UNPREPARE = "unprepare"
    HEALTH = "health stream"


_BY_METHOD = {
    "NodePrepareResources": CallKind.PREPARE,
    "NodeUnprepareResources": CallKind.UNPREPARE,
    "NodeWatchResources": CallKind.HEALTH,
}

#: threads beyond the slots: they only answer refusals (and calls of no kind), which take microseconds
SPARE_THREADS = 4


def _kind(method: str) -> CallKind | None:
    """``/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources`` -> PREPARE."""
    return _BY_METHOD.get(method.rpartition("/")[2])


if TYPE_CHECKING:
    _Interceptor = grpc.ServerInterceptor[Any, Any]  # generic in the type stubs only
else:
    _Interceptor = grpc.ServerInterceptor


class CallSlots(_Interceptor):
    """A server interceptor holding a bounded number of slots per :class:`CallKind`."""

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

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        """Wrap the handler of a call of a known kind so that it runs in a slot or is refused."""
        details = handler_call_details
        handler = continuation(details)
        kind = _kind(details.method)
        if handler is None or kind is None or kind not in self.limits:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(kind, details.method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(kind, details.method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

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

    def _unary(
        self, kind: CallKind, method: str, behavior: Callable[[Any, grpc.ServicerContext], Any]
    ) -> Callable[[Any, grpc.ServicerContext], Any]:
        def admitted(request: Any, context: grpc.ServicerContext) -> Any:
            self._admit(kind, method, context)
            try:
                return behavior(request, context)
            finally:
                self._release(kind)

        return admitted

    def _stream(
        self, kind: CallKind, method: str, behavior: Callable[[Any, grpc.ServicerContext], Iterator[Any]]
    ) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
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
