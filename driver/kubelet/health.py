"""The ``DRAResourceHealth`` streams (v1 and v1alpha1) fed by a :class:`driver.plugin.HealthSource`.

The kubelet marks a device Unknown when it hears nothing about it within its health timeout, so
every stream sends the full snapshot when it opens, after every change, and at least every
``resend_interval`` seconds (:data:`DEFAULT_RESEND_INTERVAL`, well inside that timeout) even when
nothing changed.

One :class:`HealthFanout` thread waits on the source and wakes all open streams; each stream waits
on that fan-out, its own cancellation (the kubelet went away) and server stop, so neither a
cancelled client nor ``stop()`` waits for a full resend interval. Streams end with status OK when
the server stops. A failing snapshot ends the stream with ``UNAVAILABLE`` (the kubelet retries
after a pause); ``UNIMPLEMENTED`` is never returned, because it would stop the kubelet watching.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import grpc
from structlog.typing import FilteringBoundLogger

from driver._proto import health_v1_pb2, health_v1_pb2_grpc, health_v1alpha1_pb2, health_v1alpha1_pb2_grpc
from driver.kubelet import translate
from driver.log import get_logger
from driver.plugin import DeviceHealth, HealthSource, HealthState
from driver.supervise import supervised

__all__ = ["DEFAULT_RESEND_INTERVAL", "HealthFanout", "HealthV1Servicer", "HealthV1alpha1Servicer"]

DEFAULT_RESEND_INTERVAL = 10.0

_log = get_logger("kubelet.health")
_Response = TypeVar("_Response")


class HealthFanout:
    """Turns the single-consumer ``wait_for_change`` of a source into a wake-up for many streams."""

    def __init__(
        self,
        source: HealthSource,
        on_error: Callable[[BaseException, str], None],
        driver_name: str,
        resend_interval: float = DEFAULT_RESEND_INTERVAL,
        poll: float = 1.0,
    ) -> None:
        self.source = source
        self.driver_name = driver_name
        self.resend_interval = resend_interval
        self._on_error = on_error
        self._poll = poll
        self._cond = threading.Condition()
        self._version = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the watcher thread (a daemon: a blocked source never holds up process exit)."""
        if self._thread is None:
            self._thread = supervised("health-fanout", self._watch)
            self._thread.start()

    def stop(self) -> None:
        """End every stream; the watcher thread exits at its next wake-up."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wake(self) -> None:
        """Make waiting streams re-check their exit conditions (a client went away)."""
        with self._cond:
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """True once :meth:`stop` ran."""
        return self._closed

    def _watch(self) -> None:
        while not self._closed:
            try:
                changed = self.source.wait_for_change(self._poll)
            except Exception as exc:
                self._on_error(exc, "health source wait_for_change failed")
                with self._cond:  # a pause before the next try that stop() ends at once
                    self._cond.wait_for(lambda: self._closed, self._poll)
                continue
            if changed:
                with self._cond:
                    self._version += 1
                    self._cond.notify_all()

    def stream(self, cancelled: threading.Event) -> Iterator[Sequence[DeviceHealth]]:
        """Snapshots to send: one now, then after each change or resend interval, until done."""
        with self._cond:
            seen = self._version
        while True:
            yield self.source.health_snapshot()
            deadline = time.monotonic() + self.resend_interval
            with self._cond:
                while not (self._closed or cancelled.is_set() or self._version != seen):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._closed or cancelled.is_set():
                    return
                seen = self._version


def _log_transitions(
    log: FilteringBoundLogger,
    driver_name: str,
    last: dict[tuple[str, str], HealthState],
    snapshot: Sequence[DeviceHealth],
) -> None:
    """Log each device whose state differs from the previous report of this stream.

    ``device`` is the resourceID the kubelet shows in pod status, so the two can be matched.
    """
    for health in snapshot:
        key = (health.pool_name, health.device_name)
        before = last.get(key, HealthState.HEALTHY)
        last[key] = health.state
        if health.state != before:
            log.warning(
                "device health changed",
                device=translate.resource_id(driver_name, health),
                state=str(health.state),
                previous=str(before),
                reason=health.reason,
            )


def _serve(
    fanout: HealthFanout,
    context: grpc.ServicerContext,
    build: Callable[[Sequence[DeviceHealth], int], _Response],
    version: str,
) -> Iterator[_Response]:
    cancelled = threading.Event()
    log = _log.bind(service=f"{version}.DRAResourceHealth")
    sent = [0]

    def on_done() -> None:
        # runs when the RPC ends for any reason; grpc may abandon a suspended generator without
        # closing it, so this (not a ``finally``) is where the stream's end is known promptly
        cancelled.set()
        fanout.wake()
        log.info("health stream closed", reports=sent[0])

    context.add_callback(on_done)
    log.info("health stream opened")
    last: dict[tuple[str, str], HealthState] = {}
    try:
        for snapshot in fanout.stream(cancelled):
            sent[0] += 1
            _log_transitions(log, fanout.driver_name, last, snapshot)
            yield build(snapshot, int(time.time()))
    except Exception as exc:
        log.exception("health snapshot failed")
        context.abort(grpc.StatusCode.UNAVAILABLE, f"health snapshot failed: {type(exc).__name__}: {exc}")


class HealthV1Servicer(health_v1_pb2_grpc.DRAResourceHealthServicer):
    """``v1.DRAResourceHealth``: the version a 1.37 kubelet prefers."""

    def __init__(self, fanout: HealthFanout) -> None:
        self._fanout = fanout

    def NodeWatchResources(  # noqa: N802 (gRPC method name)
        self, request: health_v1_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_v1_pb2.NodeWatchResourcesResponse]:
        """Stream full health reports until the kubelet cancels or the server stops."""
        return _serve(self._fanout, context, translate.health_response_v1, "v1")


class HealthV1alpha1Servicer(health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    """``v1alpha1.DRAResourceHealth``: for kubelets before the v1 health API."""

    def __init__(self, fanout: HealthFanout) -> None:
        self._fanout = fanout

    def NodeWatchResources(  # noqa: N802 (gRPC method name)
        self, request: health_v1alpha1_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_v1alpha1_pb2.NodeWatchResourcesResponse]:
        """Stream full health reports until the kubelet cancels or the server stops."""
        return _serve(self._fanout, context, translate.health_response_v1alpha1, "v1alpha1")
