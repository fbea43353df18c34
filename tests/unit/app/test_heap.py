"""freeze_startup_heap: start-up objects leave the collector's scans; later garbage is still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from driver.heap import freeze_startup_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the test session runs as before


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def _scanned() -> set[int]:
    """The ids of every object a full collection walks (the frozen ones are not among them)."""
    return {id(o) for o in gc.get_objects()}


def test_freeze_moves_live_objects_out_of_full_collections(unfrozen: None) -> None:
    """Every object alive at the call is frozen: no collection walks it any more."""
    ballast = [_Node() for _ in range(1000)]  # long-lived objects, like imported modules' state
    assert {id(n) for n in ballast} <= _scanned()
    frozen = freeze_startup_heap()  # threads left by other tests may free frozen objects later
    assert frozen >= len(ballast)
    assert {id(n) for n in ballast} & _scanned() == set()


def test_garbage_made_after_the_freeze_is_still_collected(unfrozen: None) -> None:
    """The collector keeps freeing new reference cycles (a prepare's garbage)."""
    freeze_startup_heap()
    node = _Node()
    ref = weakref.ref(node)
    del node
    gc.collect()
    assert ref() is None
