"""The one retry policy of every loop that talks to the apiserver.

Why one: a loop that retries at once turns a broken apiserver (or a proxy in front of it) into a
request storm, multiplied by every node of the fleet. A loop that decides on its own when to
wait gets it wrong somewhere: a watch that does not wait when the server ends it at once turns an
empty 200, a 410 or a stream cut mid-chunk into requests as fast as the network carries them. So
every such loop asks a :class:`Backoff` (its own state under the shared :class:`RetryPolicy`) how
long to wait, and ``tests/unit/kube/test_retry_class.py`` checks that every ``while`` loop in
``driver/`` that reaches an apiserver call also reaches one.

The rules, as client-go's reflector and rate limiters have them:

* after a failure, wait ``floor * factor**n`` (``n`` failures in a row), capped at ``cap``, with
  up to ``jitter`` of it added at random, so a fleet that failed together does not retry in step;
  the delay is never under ``floor``, whatever the jitter, so requests per minute stay bounded;
* a 429 or 503 answer's ``Retry-After`` is honoured when it asks for longer, up to ``cap`` (a
  hostile value cannot park the loop for ever);
* a success resets the count; a watch counts as a success only when it stayed open long enough
  (``healthy_after`` seconds, or the whole ``timeoutSeconds`` it asked for): a watch the server
  ends at once, with or without events, is a failure, and so is a 410 (the re-list it calls for
  happens once per backoff step, not in a loop).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from driver.errors import KubeError

__all__ = ["Backoff", "RetryPolicy"]

#: statuses whose Retry-After header says when to come back
_RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a loop that talks to the apiserver waits after a failure (see the module docstring).

    ``floor``: the first and shortest delay; ``cap``: the longest (Retry-After included);
    ``factor``: growth per failure in a row; ``jitter``: up to this fraction of the delay is added;
    ``healthy_after``: seconds a watch must stay open to count as a success.
    """

    floor: float = 0.5
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    healthy_after: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.cap:
            raise ValueError(f"retry floor must be > 0 and <= cap, not {self.floor} (cap {self.cap})")
        if self.factor < 1 or self.jitter < 0:
            raise ValueError(f"retry factor must be >= 1 and jitter >= 0, not {self.factor}, {self.jitter}")

    def backoff(self, rng: random.Random | None = None) -> Backoff:
        """A fresh state for one loop (``rng``: tests pass a seeded one)."""
        return Backoff(self, rng)


class Backoff:
    """One loop's failures in a row under a :class:`RetryPolicy`; thread-safe.

    :meth:`failed` says how long to wait before the next attempt, :meth:`succeeded` resets,
    :meth:`watch_ended` judges a watch by how long it stayed open. :meth:`wait_turn` is the gate for
    a loop that has nothing else to wait on: it sleeps until the last failure's delay is over.
    """

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        self.policy = policy
        self._rng = rng or random.Random()  # noqa: S311 - spreads load, guards no secret
        self._failures = 0
        self._not_before = 0.0  # monotonic time before which wait_turn() does not return
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @property
    def failures(self) -> int:
        """Failures in a row since the last success."""
        return self._failures

    def failed(self, err: BaseException | None = None) -> float:
        """Count a failure; return the seconds to wait before the next attempt (also for :meth:`wait_turn`).

        ``err``: the failure, whose ``Retry-After`` (a 429 or 503 :class:`KubeError`) is honoured.
        """
        policy = self.policy
        with self._lock:
            base = min(policy.cap, policy.floor * policy.factor ** min(self._failures, 64))
            self._failures += 1
            delay = min(policy.cap, base * (1.0 + policy.jitter * self._rng.random()))
            asked = _retry_after(err)
            if asked is not None:
                delay = max(delay, min(policy.cap, asked))
            self._not_before = time.monotonic() + delay
        return delay

    def succeeded(self) -> None:
        """Forget the failures: the next failure waits ``floor`` again."""
        with self._lock:
            self._failures = 0
            self._not_before = 0.0

    def watch_ended(
        self, opened_for: float, timeout_seconds: float, err: BaseException | None = None
    ) -> float:
        """A watch ended after ``opened_for`` seconds (with ``err``, or cleanly); the seconds to wait.

        A watch that ran ``healthy_after`` seconds or the ``timeout_seconds`` it asked for, and
        ended cleanly, is a success (0: renew at once); anything shorter, or an error, is a failure.
        """
        healthy = opened_for >= min(self.policy.healthy_after, timeout_seconds)
        if err is None and healthy:
            self.succeeded()
            return 0.0
        return self.failed(err)

    def wait_turn(self) -> bool:
        """Sleep until the delay of the last failure is over; False when :meth:`stop` was called."""
        while not self._stop.is_set():
            left = self._not_before - time.monotonic()
            if left <= 0:
                return True
            self._stop.wait(left)
        return False

    def stop(self) -> None:
        """End every :meth:`wait_turn`, now and later (the loop is shutting down)."""
        self._stop.set()


def _retry_after(err: BaseException | None) -> float | None:
    """The seconds a 429/503 answer asked us to wait, if it said."""
    if isinstance(err, KubeError) and err.status in _RETRY_AFTER_STATUSES:
        return err.retry_after
    return None
