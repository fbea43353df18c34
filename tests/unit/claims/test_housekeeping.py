"""The housekeeping thread: index after the journal, rescans on request, survives a bad round."""

from __future__ import annotations

import threading

from driver.claims.housekeeping import Housekeeping
from driver.errors import DriverError
from driver.state.index import PreparedIndex
from driver.state.journal import ChangeMark


def _cannot_say(mark: ChangeMark | None) -> tuple[ChangeMark, None]:
    """No journal behind the index: a feed that cannot say, so the (empty) source is read."""
    return (0, 0), None


WAIT = 10.0  # generous upper bound on a round: the thread is woken, never polled


def _started(
    fail_rescan: int = 0, failed: threading.Event | None = None
) -> tuple[Housekeeping, PreparedIndex, list[str], threading.Semaphore]:
    index = PreparedIndex(list, _cannot_say)
    calls: list[str] = []
    rounds = threading.Semaphore(0)
    failures = [fail_rescan]

    def rescan() -> None:
        calls.append("rescan")
        if failures[0]:
            failures[0] -= 1
            if failed is not None:
                failed.set()
            raise DriverError("sysfs went away")

    def after() -> None:
        calls.append("after")
        rounds.release()

    keeper = Housekeeping(index=index, rescan=rescan, rescan_interval=0.0)  # no periodic rescan
    keeper.after_each_round(after)
    keeper.request_rescan()  # asked before the thread exists (a SIGHUP during the start)
    keeper.start()
    return keeper, index, calls, rounds


def test_request_before_start_is_served_and_index_follows_the_journal() -> None:
    """The first round rescans (asked before start), refreshes the stale index, then runs after."""
    keeper, index, calls, rounds = _started()
    assert rounds.acquire(timeout=WAIT)
    assert calls == ["rescan", "after"]
    assert not index.stale
    index.invalidate()
    keeper.wake()
    assert rounds.acquire(timeout=WAIT)
    # no rescan asked, none periodic (a 5 s round on a slow machine may add an "after")
    assert calls.count("rescan") == 1 and calls[-1] == "after"
    assert not index.stale
    keeper.stop(WAIT)


def test_a_failing_round_does_not_stop_the_next() -> None:
    """A rescan raising DriverError is logged; the next request rescans again and runs after."""
    failed = threading.Event()
    keeper, _, calls, rounds = _started(fail_rescan=1, failed=failed)
    assert failed.wait(WAIT)
    keeper.request_rescan()
    assert rounds.acquire(timeout=WAIT)
    assert calls.count("rescan") == 2 and calls[-1] == "after"
    keeper.stop(WAIT)


def test_stop_ends_the_thread() -> None:
    """After stop the thread is gone and runs no further round."""
    keeper, _, calls, rounds = _started()
    assert rounds.acquire(timeout=WAIT)
    keeper.stop(WAIT)
    assert "app-housekeeping" not in {t.name for t in threading.enumerate()}
    done = list(calls)
    keeper.request_rescan()
    assert calls == done


def test_wakes_within_the_settle_time_share_one_round() -> None:
    """A busy node wakes the thread after every call: the wakes of the settle time make one round,
    and a rescan request does not wait for it."""
    index = PreparedIndex(list, _cannot_say)
    rounds: list[str] = []
    done = threading.Semaphore(0)
    pause = threading.Event()

    def after() -> None:
        rounds.append("after")
        done.release()

    keeper = Housekeeping(
        index=index, rescan=lambda: rounds.append("rescan"), rescan_interval=0.0, settle=3.0
    )
    keeper.after_each_round(after)
    keeper.start()
    for _ in range(3):  # three calls a little apart: without the settle time, three rounds
        index.invalidate()
        keeper.wake()
        pause.wait(0.2)
    assert done.acquire(timeout=WAIT)
    assert rounds == ["after"]
    assert not index.stale
    keeper.request_rescan()
    assert done.acquire(timeout=WAIT)
    assert rounds == ["after", "rescan", "after"]
    keeper.stop(WAIT)


def test_a_wake_during_a_round_gets_a_round_of_its_own() -> None:
    """A wake finds the flag set while a wake waits out the settle time and leaves it; one that
    comes while a round runs (the flag cleared) must still get the next round, which then reads
    the journal change it announced."""
    index = PreparedIndex(list, _cannot_say)
    in_round = threading.Event()
    go_on = threading.Event()
    done = threading.Semaphore(0)

    def after() -> None:
        in_round.set()
        assert go_on.wait(WAIT)
        done.release()

    keeper = Housekeeping(index=index, rescan=lambda: None, rescan_interval=0.0, settle=0.0)
    keeper.after_each_round(after)
    keeper.start()
    keeper.wake()
    assert in_round.wait(WAIT)  # the first round runs, its wake already cleared
    index.invalidate()
    keeper.wake()
    keeper.wake()  # the flag is set now: this one shares the round the one before asked for
    go_on.set()
    assert done.acquire(timeout=WAIT)
    assert done.acquire(timeout=WAIT)  # the round of the wakes made during the first
    assert not index.stale
    keeper.stop(WAIT)
