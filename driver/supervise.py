"""The one way numadra starts a thread: every background loop runs under this supervisor.

Why: a loop that catches only the errors it expects dies on the first one it does not (a
``ValueError`` from a header it could not parse), and a dead daemon thread says nothing. The
process keeps running and keeps answering ready while, say, its slices are never published again.
So no loop is trusted to catch everything: :func:`supervised` makes the thread, and its ``run``

* logs an exception that escaped the loop, with its traceback and the loop's name;
* counts it in :data:`LOOPS` (``numadra_loop_restarts_total{loop}`` reads the totals);
* calls the loop again after the delay of the shared :class:`~driver.backoff.RetryPolicy`
  (floor, growth, cap, jitter), so a loop that fails at once does not spin;
* for a *core* loop (one the node cannot serve without, such as the slice publisher), keeps the
  loop named in :meth:`LoopRegistry.failing` while it restarted :data:`FAILING_AFTER` times in a
  row without running ``healthy_after`` seconds in between: ``/readyz`` then answers 503 with its
  name instead of a ready process that does nothing.

Some loops catch ``Exception`` at the edge of each iteration themselves, because one bad item or
round must not delay the next by a backoff step (the queue workers, the housekeeping round, the
health poll). They hand what they caught to :func:`survived`, which logs and counts it exactly as
a restart, under the same loop name: one log line and one series for every unexpected exception
of every loop, whichever of the two caught it.

A loop's target must be safe to call again: it keeps its state on its owner and re-reads it. A
target that is not (one that owns a connection or an event loop and closes it on the way out) is
started with ``restart=False``: its exception is logged and counted the same way, and the thread
ends; its owner notices the end (the NRI reader's ``finally`` marks the connection gone, and the
plugin reconnects).

A target that returns has finished: the thread ends, nothing is restarted. An owner stops a loop
by telling it to return (its own flag or event) and then joining the thread; :meth:`join` also
ends the supervisor's wait between restarts, so a stop is never held up by a pending restart.

The registry is one per process, as the threads it describes are (``threading.enumerate`` is too):
the metrics and readiness of ``numadra run`` read it, and tests read the growth of its totals.
``tests/unit/test_supervise.py`` checks by AST that no other module of ``driver/`` calls
``threading.Thread(`` and throws an exception into every loop it finds registered there.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from driver.backoff import RetryPolicy
from driver.log import get_logger

__all__ = [
    "FAILING_AFTER",
    "LOOPS",
    "LoopRegistry",
    "LoopState",
    "SupervisedThread",
    "supervised",
    "survived",
]

_log = get_logger("supervise")

#: a core loop that restarted this many times in a row, with no healthy run in between, is failing
FAILING_AFTER = 3


@dataclass(frozen=True, slots=True)
class LoopState:
    """What the registry knows of one loop name: ``restarts`` since the process started, and
    ``failing`` (a core loop in its streak of restarts; see the module docstring)."""

    name: str
    core: bool
    restarts: int
    failing: bool


class LoopRegistry:
    """Restart totals and failure streaks by loop name, for metrics and readiness; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._restarts: dict[str, int] = {}
        self._core: set[str] = set()
        self._streaks: dict[str, SupervisedThread] = {}  # name -> the thread in a restart streak

    def register(self, name: str, *, core: bool) -> None:
        """Make ``name`` known (its series starts at 0)."""
        with self._lock:
            self._restarts.setdefault(name, 0)
            if core:
                self._core.add(name)

    def restarted(self, thread: SupervisedThread) -> None:
        """Count one restart of ``thread``'s loop."""
        with self._lock:
            self._restarts[thread.name] = self._restarts.get(thread.name, 0) + 1
            self._streaks[thread.name] = thread

    def counted(self, name: str) -> None:
        """Count one exception the loop ``name`` caught itself and went on from (:func:`survived`)."""
        with self._lock:
            self._restarts[name] = self._restarts.get(name, 0) + 1

    def restarts(self) -> dict[str, int]:
        """Restarts by loop name since the process started (every registered name, 0 included)."""
        with self._lock:
            return dict(self._restarts)

    def failing(self) -> list[str]:
        """The core loops that keep failing now, sorted: what ``/readyz`` names."""
        with self._lock:
            streaks = [(name, t) for name, t in self._streaks.items() if name in self._core]
        return sorted(name for name, thread in streaks if thread.failing())

    def states(self) -> list[LoopState]:
        """Every registered loop, sorted by name (``numadra state`` and tests)."""
        failing = set(self.failing())
        with self._lock:
            return [
                LoopState(name, name in self._core, count, name in failing)
                for name, count in sorted(self._restarts.items())
            ]


#: the loops of this process
LOOPS = LoopRegistry()


class SupervisedThread(threading.Thread):
    """A daemon thread that runs ``target(*args)`` and restarts it after an exception (module docstring).

    It is a :class:`threading.Thread`, so owners compare it with ``current_thread()`` and join it
    as they would any thread.
    """

    def __init__(
        self,
        name: str,
        target: Callable[..., object],
        args: tuple[object, ...],
        *,
        core: bool,
        restart: bool,
        policy: RetryPolicy,
        registry: LoopRegistry,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._loop_target = target
        self._loop_args = args
        self.core = core
        self.restart = restart
        self._registry = registry
        self._healthy_after = policy.healthy_after
        self._backoff = policy.backoff(random.Random())  # noqa: S311 - spreads restarts, guards no secret
        self._ended = threading.Event()  # join() was called: no more restarts
        self._lock = threading.Lock()
        self._running_since: float | None = None  # when the current run began; None between runs

    def failing(self) -> bool:
        """True while the loop is in a streak of :data:`FAILING_AFTER` restarts or more: it either
        waits for its next run or has not yet run ``healthy_after`` seconds since the last.
        A loop its owner stopped (joined) is not failing."""
        with self._lock:
            if self._ended.is_set() or self._backoff.failures < FAILING_AFTER:
                return False  # stopped by its owner, or not (yet) in a streak
            since = self._running_since
        return since is None or time.monotonic() - since < self._healthy_after

    def run(self) -> None:
        """Run the target until it returns; after an exception, log, count, wait and run it again."""
        while True:
            started = time.monotonic()
            with self._lock:
                self._running_since = started
            try:
                self._loop_target(*self._loop_args)
            except Exception as exc:
                if not self._failed(exc, time.monotonic() - started):
                    return
            else:
                return

    def _failed(self, exc: Exception, ran_for: float) -> bool:
        """Log and count ``exc``; wait the backoff step. True when the target is to run again."""
        with self._lock:
            self._running_since = None
            if ran_for >= self._healthy_after:
                self._backoff.succeeded()  # it ran well before this failure: a new streak
            delay = self._backoff.failed()
            in_a_row = self._backoff.failures
        again = self.restart and not self._ended.is_set()
        self._registry.restarted(self)
        _log.error(
            "background loop failed",
            loop=self.name,
            error=str(exc),
            error_type=type(exc).__name__,
            failures_in_a_row=in_a_row,
            restart_in=round(delay, 2) if again else None,
            exc_info=True,  # called in the except block of run()
        )
        return again and not self._ended.wait(delay)

    def join(self, timeout: float | None = None) -> None:
        """End restarts (the owner has told the loop to stop), then wait for the thread."""
        self._ended.set()
        super().join(timeout)


def supervised(
    name: str,
    target: Callable[..., object],
    *args: object,
    core: bool = False,
    restart: bool = True,
    policy: RetryPolicy | None = None,
    registry: LoopRegistry | None = None,
) -> SupervisedThread:
    """The (unstarted) thread ``name`` that runs ``target(*args)`` under the supervisor.

    ``core``: readiness depends on it; ``restart=False``: the target cannot be run again (see the
    module docstring); ``policy``: the restart pacing (the driver's default policy when omitted).
    """
    reg = LOOPS if registry is None else registry
    reg.register(name, core=core)
    return SupervisedThread(
        name, target, args, core=core, restart=restart, policy=policy or RetryPolicy(), registry=reg
    )


def survived(
    loop: str, exc: BaseException, *, event: str = "background loop failed", **context: object
) -> None:
    """Log ``exc`` with its traceback and count it for ``loop``, which caught it and goes on.

    Call it in the ``except`` block (the traceback is the one being handled). ``event``: the log
    line's own words where the loop has them; ``context``: what the iteration was about (a claim
    UID, a worker's name), for the log line.
    """
    LOOPS.counted(loop)
    _log.error(event, loop=loop, error=str(exc), error_type=type(exc).__name__, exc_info=True, **context)
