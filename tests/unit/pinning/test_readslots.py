"""ReadSlots: the NRI plugin's reads of the apiserver, bounded per namespace and for the node."""

from __future__ import annotations

import pytest

from driver.pinning.nri.readslots import ReadSlots


def test_one_namespace_cannot_take_more_than_its_share() -> None:
    """A namespace at its bound is refused; another namespace still gets its reads."""
    slots = ReadSlots(per_namespace=2, total=5)
    assert [slots.take("tenant-a") for _ in range(3)] == [True, True, False]
    assert slots.take("team-b")
    assert "namespace tenant-a has 2 reads" in slots.why_not("tenant-a")
    assert (slots.in_flight("tenant-a"), slots.in_flight("team-b"), slots.in_flight()) == (2, 1, 3)
    assert slots.refused == 1


def test_the_node_bound_holds_across_namespaces() -> None:
    """Many namespaces together stop at the node's bound; a slot given back is taken again."""
    slots = ReadSlots(per_namespace=2, total=3)
    assert [slots.take(ns) for ns in ("a", "b", "c", "d")] == [True, True, True, False]
    assert "the node has 3 reads" in slots.why_not("d")
    slots.give_back("b")
    assert slots.take("d")
    slots.give_back("zzz")  # nothing held there: nothing changes
    assert slots.in_flight() == 3


def test_bounds_must_make_sense() -> None:
    with pytest.raises(ValueError, match="per_namespace"):
        ReadSlots(per_namespace=0, total=4)
    with pytest.raises(ValueError, match="per_namespace"):
        ReadSlots(per_namespace=5, total=4)
