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

The slots are a gRPC server interceptor, so every version of every service on the socket is
counted by the method's name, whatever servicer serves it. grpc asks an interceptor for the handler
of every call on its one polling thread; the admitting handler of a method is built once and kept
(keyed by the handler it wraps), so a call pays a dictionary lookup there, not a new handler.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from driver.errors import DriverError
from driver.log import get_logger

__all__ = ["Behavior", "CallKind", "CallSlots", "Interceptor", "behavior_of", "handler_with", "method_name"]

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

#: threads beyond the slots: they only answer refusals (and calls of no kind), which return at once
SPARE_THREADS = 4


_Unary = Callable[[Any, grpc.ServicerContext], Any]
_Stream = Callable[[Any, grpc.ServicerContext], Iterator[Any]]


#: the function behind a handler of one request message: (request, context) -> answer or stream
Behavior = Callable[[Any, grpc.ServicerContext], Any]

if TYPE_CHECKING:  # grpc's classes are generic in its stubs only
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
    Interceptor: TypeAlias = grpc.ServerInterceptor[Any, Any]
    #: what grpc hands an interceptor: the rest of the chain, down to the registered handler
    Continuation: TypeAlias = Callable[[grpc.HandlerCallDetails], Handler | None]
else:
    Interceptor = grpc.ServerInterceptor


def behavior_of(handler: Handler) -> Behavior:
    """The function behind a unary-request handler (unary or server-streaming answer)."""
    behavior = handler.unary_stream if handler.response_streaming else handler.unary_unary
    if handler.request_streaming or behavior is None:
        raise DriverError("the DRA socket serves only methods with one request message")
    return behavior


def handler_with(handler: Handler, behavior: Behavior) -> Handler:
    """A handler of ``handler``'s shape and (de)serializers that runs ``behavior`` instead."""
    if handler.response_streaming:
        make = grpc.unary_stream_rpc_method_handler
    else:
        make = grpc.unary_unary_rpc_method_handler
    return make(
        behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def method_name(method: str) -> str:
    """The method's own name in a full gRPC method path (``/<service>/<method>``)."""
    return method.rpartition("/")[2]


class CallSlots(Interceptor):
    """A bounded number of slots per :class:`CallKind`; as an interceptor, it admits or refuses calls."""

    def __init__(self, limits: Mapping[CallKind, int]) -> None:
        self.limits = dict(limits)
        self._lock = threading.Lock()
        self._in_use: dict[CallKind, int] = dict.fromkeys(self.limits, 0)
        #: calls refused per kind since start (for tests and debugging)
        self.refused: dict[CallKind, int] = dict.fromkeys(self.limits, 0)
        #: per full method: the handler last wrapped and its admitting handler
        self._admitting: dict[str, tuple[Handler, Handler]] = {}

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
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        """The handler of the call, made to run in a slot of its kind (or be refused) if it has one."""
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        kind = _BY_METHOD.get(method_name(method))
        if handler is None or kind is None or kind not in self.limits:
            return handler
        known = self._admitting.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        admitting = self._wrap(kind, method, handler)
        self._admitting[method] = (handler, admitting)
        return admitting

    def _wrap(self, kind: CallKind, method: str, handler: Handler) -> Handler:
        behavior = behavior_of(handler)
        if handler.response_streaming:
            return handler_with(handler, self._stream(kind, method, behavior))
        return handler_with(handler, self._unary(kind, method, behavior))

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
            f"{method_name(method)}: {limit} {kind} calls are already running "
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
