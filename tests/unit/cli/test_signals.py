"""The signals of ``numadra run``: the handler only notes them; the main loop takes them in order."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
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
