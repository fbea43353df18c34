"""freeze_startup_heap: start-up objects leave the collector's scans; later garbage is still collected."""

from __future__ import annotations

import gc
import time
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


def test_freeze_moves_live_objects_out_of_full_collections(unfrozen: None) -> None:
    """Every object alive at the call is frozen, and a full collection no longer walks them."""
    ballast = [{"i": i} for i in range(20000)]  # long-lived objects, like imported modules' state
    start = time.perf_counter()
    gc.collect()
    before = time.perf_counter() - start
    frozen = freeze_startup_heap()
    assert frozen >= len(ballast)
    assert frozen == gc.get_freeze_count()
    start = time.perf_counter()
    gc.collect()
    after = time.perf_counter() - start
    assert after < before  # fewer objects to walk (by far: tens of thousands fewer)
    del ballast


def test_garbage_made_after_the_freeze_is_still_collected(unfrozen: None) -> None:
    """The collector keeps freeing new reference cycles (a prepare's garbage)."""
    freeze_startup_heap()
    node = _Node()
    ref = weakref.ref(node)
    del node
    gc.collect()
    assert ref() is None
