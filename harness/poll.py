"""Polling helpers shared by the process-level tests, the e2e tier and the benches.

Tests of real processes wait for effects (a socket, a slice, a log line) instead of sleeping a
fixed time; one helper keeps the timeout message uniform: it names what was awaited.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["ephemeral_range", "free_port", "wait_for"]

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


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections (Linux's default if unreadable)."""
    try:
        low, high = (int(part) for part in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def _worker_share() -> tuple[int, int]:
    """(this process's index, how many share the range): ``(N, count)`` in pytest-xdist's worker
    ``gwN`` of ``count`` (it sets both variables), ``(0, 1)`` anywhere else.

    Each process remembers only its own ports, and between the bind check and a child's bind
    another worker could pick the same one; ports with ``port % count == N`` are this worker's alone.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > int(worker[2:]):
        return int(worker[2:]), int(count)
    return 0, 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now, for a process about to be started.

    Why not port 0's pick: the kernel hands those out from its ephemeral range, the same range it
    takes every outgoing connection's source port from, so between this call and the child's bind
    any client (etcd's, the apiserver's own, an earlier test's) may sit on it and the child fails
    with "address already in use" (CI saw the apiserver do so). A port below that range is never a
    source port; each is handed out once per process, so two children never get the same one.
    Under pytest-xdist each worker draws from its own residue class (:func:`_worker_share`), so
    two workers never hand out the same port either.
    """
    low, _ = ephemeral_range()
    first = _LOWEST_PORT if low > _LOWEST_PORT + 1000 else 1024
    index, count = _worker_share()
    with _handed_out_lock:
        for _ in range(1000):
            port = random.randrange(first, low)
            port -= (port - index) % count  # the nearest port of this worker's share, not below it
            if port < first:
                continue
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free TCP port on 127.0.0.1 in {first}-{low - 1}")
