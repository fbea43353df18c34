"""The door of the DRA socket: its calls wait until the servicers behind it are attached.

``numadra run`` serves both sockets before it builds its claims logic (see
:mod:`driver.kubelet.server`), so the DRA socket must take calls it cannot answer yet. Two gRPC
server interceptors do it, around the call slots (:mod:`driver.kubelet.admission`):

* :class:`Door`, the outermost, holds every call until :meth:`Door.let_in` (then lets it through)
  or :meth:`Door.shut` (then ends it with ``UNAVAILABLE``). A held call waits on a condition
  that opening, shutting and the caller hanging up each wake; it takes no slot while it waits,
  so the slots count the calls that run. Once open, a call pays one attribute read here.
* :class:`Servicers`, the innermost, answers each call with the handler of the servicer attached
  for its service (:meth:`Servicers.attach`). Until then the server has only placeholders
  registered (the generated base servicers, which answer ``UNIMPLEMENTED``): the door keeps
  every call from reaching them.

The handlers of an attached servicer are the ones its generated ``add_*_to_server`` function
registers, collected by :class:`Collected` instead of a server, so each method keeps the
(de)serializers of its generated code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import grpc

from driver.errors import DriverError
from driver.kubelet.admission import Behavior, Interceptor, behavior_of, handler_with, method_name

if TYPE_CHECKING:
    from driver.kubelet.admission import Continuation, Handler

__all__ = ["Collected", "Door", "Servicers"]


class Door(Interceptor):
    """Holds calls until :meth:`let_in` or :meth:`shut` (module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        #: None while closed; "" once open; the reason once shut before it opened
        self._verdict: str | None = None

    def let_in(self) -> None:
        """Let the held calls, and every later one, through (once; not after :meth:`shut`)."""
        self._decide("")

    def shut(self, reason: str) -> None:
        """Before :meth:`let_in`: end the held calls, and any later one, with UNAVAILABLE."""
        self._decide(reason)

    def _decide(self, verdict: str) -> None:
        with self._cond:
            if self._verdict is None:
                self._verdict = verdict
                self._cond.notify_all()

    def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        """After :meth:`let_in`: the call's own handler; before, one that waits at the door first."""
        handler = continuation(handler_call_details)
        if self._verdict == "" or handler is None:
            return handler
        return handler_with(handler, self._held(continuation, handler_call_details))

    def _held(self, continuation: Continuation, details: grpc.HandlerCallDetails) -> Behavior:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            verdict = self._wait(context)
            name = method_name(details.method)
            if verdict:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"{name}: {verdict}")
            handler = continuation(details)  # asked again: the servicers are attached now
            if handler is None:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name}: not served here")
            return behavior_of(handler)(request, context)

        return call

    def _wait(self, context: grpc.ServicerContext) -> str:
        """The verdict once there is one; a caller that hangs up first ends the call (CANCELLED)."""
        hung_up = threading.Event()

        def wake() -> None:  # grpc calls it when the RPC ends, also a normal end (then it is late)
            hung_up.set()
            with self._cond:
                self._cond.notify_all()

        if context.add_callback(wake):
            with self._cond:
                self._cond.wait_for(lambda: self._verdict is not None or hung_up.is_set())
                verdict = self._verdict
        else:
            verdict = None  # the RPC is over already
        if verdict is None:
            context.abort(grpc.StatusCode.CANCELLED, "the caller went away")
        return verdict


class Collected:
    """Takes a generated ``add_*Servicer_to_server``'s handlers in place of a ``grpc.Server``."""

    def __init__(self) -> None:
        #: full method path (``/<service>/<method>``) -> handler
        self.handlers: dict[str, Handler] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        """Ignored: the same handlers come by :meth:`add_registered_method_handlers`."""

    def add_registered_method_handlers(self, service: str, method_handlers: Mapping[str, Handler]) -> None:
        """Keep the handlers of ``service``'s methods by their full path."""
        self.handlers.update({f"/{service}/{name}": h for name, h in method_handlers.items()})


class Servicers(Interceptor):
    """Answers each call with the attached servicer's handler for its method (module docstring)."""

    def __init__(self) -> None:
        self._handlers: Mapping[str, Handler] = {}

    def attach(self, add_all: Callable[[Collected], None]) -> None:
        """Serve what ``add_all`` registers (it calls the generated add functions on a :class:`Collected`)."""
        collected = Collected()
        add_all(collected)
        if not collected.handlers:
            raise DriverError("no handlers registered: the generated gRPC code registers no methods")
        self._handlers = collected.handlers

    def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        """The attached handler of the call's method, else the registered one."""
        handler = self._handlers.get(handler_call_details.method)
        return handler if handler is not None else continuation(handler_call_details)
