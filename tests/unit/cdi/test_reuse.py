"""ReusedWhileSame: a kept value is handed out only for the very objects it was made from."""

from __future__ import annotations

from cdi.reuse import ReusedWhileSame


def test_the_same_objects_reuse_and_equal_ones_make_anew() -> None:
    made: list[str] = []
    cache: ReusedWhileSame[str] = ReusedWhileSame(8)
    device = ["gpu-0"]  # unhashable and mutable: compared by identity only
    assert cache.get("gpu-0", (device,), lambda: made.append("first") or "v1") == "v1"
    assert cache.get("gpu-0", (device,), lambda: made.append("again") or "v2") == "v1"
    equal = ["gpu-0"]  # equal, not the same: a new inventory's object
    assert cache.get("gpu-0", (equal,), lambda: made.append("new") or "v3") == "v3"
    assert cache.get("gpu-0", (device, "extra"), lambda: made.append("more") or "v4") == "v4"
    assert made == ["first", "new", "more"]


def test_a_full_cache_is_emptied_not_grown() -> None:
    cache: ReusedWhileSame[int] = ReusedWhileSame(2)
    keep = object()
    for key in range(5):
        cache.get(key, (keep,), lambda key=key: key)
    calls: list[int] = []
    assert cache.get(0, (keep,), lambda: calls.append(0) or 10) == 10  # 0 was dropped when full
    assert calls == [0]


def _fresh(*parts: str) -> tuple[str, ...]:
    """A new tuple object on every call (``*parts`` is built anew), equal to others of its parts."""
    return parts


def test_of_reuses_for_the_very_object_and_holds_it() -> None:
    """``of`` keys by the object itself: the same tuple is reused, an equal one is made anew, and
    the kept object is held, so its identity cannot pass to another object while kept."""
    made: list[tuple[str, ...]] = []
    cache: ReusedWhileSame[str] = ReusedWhileSame(8)

    def spell(parts: tuple[str, ...]) -> str:
        made.append(parts)
        return ",".join(parts)

    env = ("A=1", "B=2")
    assert cache.of(env, spell) == "A=1,B=2"
    assert cache.of(env, spell) == "A=1,B=2"
    equal = _fresh("A=1", "B=2")
    assert equal is not env
    assert cache.of(equal, spell) == "A=1,B=2"
    assert made == [env, equal]
    for _ in range(3):  # new equal objects, each dropped: none gets a value kept for another
        assert cache.of(_fresh("C=3"), spell) == "C=3"
    assert len(made) == 5
