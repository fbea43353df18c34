"""The run loop of ``numadra run``: the file limit, signals, the shutdown pipe and :func:`serve`.

What :func:`serve` does, top down: :func:`driver.app.build_front` builds the kubelet plugin
server and :class:`~driver.lifecycle.Lifecycle` starts it (the registration socket appears, the
DRA socket's calls wait); :func:`driver.app.build` builds the parts that serve the kubelet's calls
and starts them, the last step letting the calls through; then it waits for the kubelet's
registration, at most ``registration_wait``, builds the background parts
(:func:`driver.app.build_background`: slices, health thread, metrics, pinning) and starts them;
then it serves until SIGTERM or SIGINT (exit 0) or a fatal background error (exit 1), and stops
every started part in reverse. SIGHUP rediscovers the host. :mod:`driver.app` says why the start
is split at the registration; the cyclic garbage collector stays off until the start is over,
and the start-up heap is frozen then (:mod:`driver.heap`).

The main thread never polls: it sleeps on the shutdown pipe (:class:`Shutdown`) until a signal,
a stop request or the kubelet's registration wakes it.
"""

from __future__ import annotations

import gc
import os
import resource
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import TYPE_CHECKING

from driver.errors import ConfigError, DriverError
from driver.lifecycle import Lifecycle
from driver.log import get_logger

if TYPE_CHECKING:
    from driver.app import Core
    from driver.config import RunConfig

__all__ = ["MIN_OPEN_FILES", "Shutdown", "Signals", "check_open_files", "serve"]

_log = get_logger("run")


#: descriptors ``numadra run`` needs at the least: gRPC (epoll, wakeups, two listening sockets and
#: one per kubelet connection), the journal (two), the lock, the apiserver connections, the NRI
#: socket, metrics connections and udev, with room for bursts of claim reads (one per connection)
MIN_OPEN_FILES = 256


def check_open_files(minimum: int = MIN_OPEN_FILES) -> None:
    """Raise the soft ``RLIMIT_NOFILE`` to ``minimum`` if the hard limit allows; else ConfigError.

    A limit too low to run failed deep inside gRPC with a traceback; this is one line instead.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= minimum:
        return
    if hard == resource.RLIM_INFINITY or hard >= minimum:
        resource.setrlimit(resource.RLIMIT_NOFILE, (minimum, hard))
        return
    raise ConfigError(
        f"open file limit (RLIMIT_NOFILE) is {soft} (hard {hard}); numadra run needs at least "
        f"{minimum}: raise it (ulimit -n, or the container runtime's LimitNOFILE)"
    )


# -- signals and the main loop --------------------------------------------------------------------


class Signals:
    """SIGTERM, SIGINT and SIGHUP, noted by the handler and acted on by the main loop.

    The handler runs in the main thread between any two bytecodes, maybe while that thread holds
    the log's lock or an Event's. A log line or ``Event.set()`` in the handler would take that
    lock again and wait for it forever (a SIGTERM that landed while the main thread logged hung
    the process so). So :meth:`note`, the handler, only appends to a list and calls the wake
    :func:`serve` hands in (:meth:`Shutdown.wake`: one byte into a pipe), neither of which takes
    a lock; the main loop, woken, acts on what :meth:`take` returns.
    """

    HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self._noted: list[int] = []
        self._wake: Callable[[], None] = _no_wake

    def wake_with(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` after noting each signal; it runs in the handler, so it takes no lock."""
        self._wake = wake

    def note(self, signum: int, _frame: FrameType | None = None) -> None:
        """The signal handler: remember ``signum`` and wake the main loop, nothing else."""
        self._noted.append(signum)
        self._wake()

    def take(self) -> list[int]:
        """The signals noted since the last call, oldest first."""
        taken: list[int] = []
        while self._noted:
            taken.append(self._noted.pop(0))
        return taken

    @contextmanager
    def installed(self) -> Iterator[Signals]:
        """Handle :attr:`HANDLED` with :meth:`note` inside the block (the main thread only)."""
        previous = {sig: signal.signal(sig, self.note) for sig in self.HANDLED}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _no_wake() -> None:
    """The wake of :class:`Signals` before :func:`serve` hands in its own."""


class Shutdown:
    """Whether ``numadra run`` is to stop, and why: a signal (exit 0) or a fatal error (exit 1).

    The main thread sleeps in :meth:`wait` until something asks it to look: a stop request (any
    thread) or a noted signal (the handler calls :meth:`wake`). A wake is one byte into a
    non-blocking pipe, which takes no lock; one that lands between the main loop's check and its
    wait stays in the pipe, so that wait returns at once. The main thread does not wake on a
    timer: it sleeps until there is something to act on, and acts on a signal at once.
    """

    def __init__(self) -> None:
        self._requested = threading.Event()
        self._fatal = ""
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        weakref.finalize(self, _close_all, self._wake_read, self._wake_write)

    @property
    def requested(self) -> bool:
        """True once a stop was asked for."""
        return self._requested.is_set()

    @property
    def fatal(self) -> str:
        """The first fatal error that asked for the stop ("" for a signal)."""
        return self._fatal

    def request(self, fatal: str = "") -> None:
        """Stop; ``fatal`` says which background error made the driver unable to go on."""
        if fatal and not self._fatal:
            self._fatal = fatal
        self._requested.set()
        self.wake()

    def wake(self) -> None:
        """End the current (or the next) :meth:`wait`; takes no lock, so a signal handler may call it."""
        with suppress(BlockingIOError):  # the pipe is full: a wake is pending anyway
            os.write(self._wake_write, b"\0")

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until a wake, a stop or ``timeout`` seconds; True once a stop was asked for."""
        if not self._requested.is_set():
            waiting = select.poll()  # not select(): no limit on the descriptor's number
            waiting.register(self._wake_read, select.POLLIN)
            waiting.poll(None if timeout is None else timeout * 1000)
            with suppress(BlockingIOError):  # nothing came: the timeout ended the wait
                while os.read(self._wake_read, 512):
                    pass
        return self._requested.is_set()


def _close_all(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


def _acted_on(signals: Signals, shutdown: Shutdown, rescan: Callable[[], None]) -> bool:
    """Act on the noted signals (SIGHUP: rescan; the others: stop); True once a stop is asked for."""
    for signum in signals.take():
        if signum == signal.SIGHUP:
            rescan()
            continue
        _log.info("signal received", signal=signal.Signals(signum).name)
        shutdown.request()
    return shutdown.requested


def _wait_registered(core: Core, timeout: float, shutdown: Shutdown, stop_asked: Callable[[], bool]) -> None:
    """Until the kubelet registers us, a stop is asked for, or ``timeout`` seconds passed.

    The registration wakes the shutdown pipe as a signal does, so the main thread sleeps on it.
    """
    core.kubelet.on_registered(shutdown.wake)
    deadline = time.monotonic() + timeout
    while not (stop_asked() or core.kubelet.registered.is_set()):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        shutdown.wait(left)


def serve(config: RunConfig, signals: Signals, shutdown: Shutdown | None = None) -> int:
    """Build, start, serve until SIGTERM/SIGINT, stop: 0; a fatal background error: DriverError.

    Whatever started is stopped on the way out, also after a failed start (the exception goes on).
    """
    from driver.app import build, build_background, build_front
    from driver.heap import freeze_startup_heap

    shutdown = shutdown if shutdown is not None else Shutdown()
    signals.wake_with(shutdown.wake)
    lifecycle = Lifecycle()
    t0 = time.monotonic()
    gc.disable()  # until the start is over (driver.cli says why)
    try:
        front = build_front(config)
        lifecycle.start(front.steps)
        _log.info("registration socket serving", ms=round((time.monotonic() - t0) * 1000, 1))
        core = build(front, on_fatal=shutdown.request)
        lifecycle.start(core.steps)
        _log.info("kubelet plugin serving", ms=round((time.monotonic() - t0) * 1000, 1))

        def stop_asked() -> bool:
            return _acted_on(signals, shutdown, core.housekeeping.request_rescan)

        _wait_registered(core, config.registration_wait, shutdown, stop_asked)
        if not stop_asked():
            lifecycle.start(build_background(core).steps)
            frozen = freeze_startup_heap()  # the start-up objects never become garbage
            _log.info("numadra started", ms=round((time.monotonic() - t0) * 1000, 1), gc_frozen=frozen)
        gc.enable()
        while not stop_asked():
            shutdown.wait()
        _log.info("stopping", reason=shutdown.fatal or "signal")
    finally:
        gc.enable()
        lifecycle.stop()
    if shutdown.fatal:
        raise DriverError(shutdown.fatal)
    _log.info("numadra stopped")
    return 0
