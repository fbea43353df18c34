"""Polling helpers shared by the process-level tests, the e2e tier and the benches.

Tests of real processes wait for effects (a socket, a slice, a log line) instead of sleeping a
fixed time; one helper keeps the timeout message uniform: it names what was awaited.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["free_port", "wait_for"]

T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now (the usual small race is accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
