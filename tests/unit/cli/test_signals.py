"""The signals of ``numadra run``: the handler only notes them; the main loop takes them in order."""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from driver.cli.run import Shutdown, Signals

_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def _locks_taken(call: Callable[[], object]) -> list[str]:
    """The lock acquisitions ``call`` makes (any lock: an Event's, the log's, a Condition's)."""
    taken: list[str] = []

    def profile(_frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call" and isinstance(getattr(arg, "__self__", None), _LOCK_TYPES):
            taken.append(arg.__name__)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return taken


def test_the_detector_sees_what_a_handler_must_not_do() -> None:
    """Setting an Event or logging takes a lock; the check below would catch a handler that did."""
    assert _locks_taken(threading.Event().set)
    assert _locks_taken(lambda: logging.getLogger("numadra-test").warning("x"))


def test_the_handler_takes_no_lock() -> None:
    """The handler runs in the main thread between two bytecodes, maybe while that thread holds
    the log's lock or an Event's: taking either again would wait forever (the process hung on
    SIGTERM that way). So it takes none."""
    signals = Signals()
    assert _locks_taken(lambda: signals.note(signal.SIGTERM, None)) == []
    assert signals.take() == [signal.SIGTERM]


def test_the_main_loop_takes_the_signals_in_order_once() -> None:
    """What the handler noted comes back oldest first, and only once."""
    signals = Signals()
    for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGHUP):
        signals.note(signum)
    assert signals.take() == [signal.SIGHUP, signal.SIGTERM, signal.SIGHUP]
    assert signals.take() == []


def test_installed_handles_the_three_signals_and_restores_the_old_handlers() -> None:
    """Inside the block SIGTERM, SIGINT and SIGHUP are noted, not acted on; after it, as before."""
    before = {sig: signal.getsignal(sig) for sig in Signals.HANDLED}
    signals = Signals()
    with signals.installed():
        signal.raise_signal(signal.SIGHUP)  # would end the test run with the default handler
        signal.raise_signal(signal.SIGTERM)
        assert signals.take() == [signal.SIGHUP, signal.SIGTERM]
    assert {sig: signal.getsignal(sig) for sig in Signals.HANDLED} == before


def test_a_fatal_error_is_kept_over_later_requests() -> None:
    """The first fatal reason is the one the exit reports; a signal after it does not erase it."""
    shutdown = Shutdown()
    assert not shutdown.requested and not shutdown.wait(0)
    shutdown.request("health fan-out: stream broke")
    shutdown.request("slice publishing: later")
    shutdown.request()
    assert shutdown.requested
    assert shutdown.fatal == "health fan-out: stream broke"


def _waiting(shutdown: Shutdown) -> tuple[threading.Thread, list[bool]]:
    """``shutdown.wait()`` (no timeout) on a thread, as the main loop waits; its answer in the list."""
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(shutdown.wait()), daemon=True)
    waiter.start()
    return waiter, answers


def test_the_main_loop_sleeps_until_something_happens() -> None:
    """No timer: a wait without a timeout is still waiting a while later, and a stop ends it."""
    shutdown = Shutdown()
    waiter, answers = _waiting(shutdown)
    waiter.join(0.3)
    assert waiter.is_alive() and answers == []
    shutdown.request("health fan-out: stream broke")
    waiter.join(5)
    assert answers == [True]


def test_a_noted_signal_wakes_the_main_loop_without_a_lock() -> None:
    """The handler wakes the waiting main loop (which then takes the signal), taking no lock."""
    shutdown = Shutdown()
    signals = Signals()
    signals.wake_with(shutdown.wake)
    waiter, answers = _waiting(shutdown)
    assert _locks_taken(lambda: signals.note(signal.SIGHUP, None)) == []
    waiter.join(5)
    assert answers == [False]  # woken, not stopped: the loop looks at the signals and waits again
    assert signals.take() == [signal.SIGHUP]


def test_a_real_signal_wakes_the_main_loop() -> None:
    """A signal the kernel delivers runs the handler in the main thread, which wakes the waiter."""
    shutdown = Shutdown()
    signals = Signals()
    signals.wake_with(shutdown.wake)
    with signals.installed():
        waiter, answers = _waiting(shutdown)
        signal.raise_signal(signal.SIGHUP)
        waiter.join(5)
    assert answers == [False]
    assert signals.take() == [signal.SIGHUP]


def test_a_wake_before_the_wait_is_not_lost() -> None:
    """A signal noted between the loop's look and its wait: the wait returns at once."""
    shutdown = Shutdown()
    for _ in range(70_000):  # more wakes than a pipe holds: the extra ones are dropped, not raised
        shutdown.wake()
    waiter, answers = _waiting(shutdown)
    waiter.join(5)
    assert answers == [False]
    again, later = _waiting(shutdown)  # the first wait drained them all: the next one sleeps
    again.join(0.3)
    assert again.is_alive() and later == []
    shutdown.request()
    again.join(5)
    assert later == [True]


def test_a_dropped_shutdown_closes_its_pipe() -> None:
    """Every Shutdown holds two descriptors; they go with it (tests make many)."""
    before = _open_fds()
    shutdowns = [Shutdown() for _ in range(20)]
    assert _open_fds() >= before + 40
    del shutdowns
    gc.collect()
    assert _open_fds() <= before


def _open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())
