"""A hang guard for a blocking call: the answer, or a test failure once a generous limit passes.

A test proves "this returns without waiting for X" by making X long (a 30 s resend interval, a
60 s grace) and giving the call a limit well below it: the limit fails a hang, it measures
nothing. The call runs in a daemon thread so a stuck one cannot hold the test process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def within(seconds: float, call: Callable[[], T], what: str = "the call") -> T:
    """``call()``'s result (or its exception, raised here); fails the test when it is still
    blocked after ``seconds``."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(call())
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="within", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"{what} still blocked after {seconds} s")
    if errors:
        raise errors[0]
    return results[0]
