"""ClaimFetcher: one GET for one claim, one LIST page for many, GETs for what the page lacks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from driver.errors import KubeError
from driver.kube.types import JsonObject
from driver.kubelet.claims import ClaimFetcher, ClaimLister
from driver.plugin import ClaimRef


def _claim(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"}, "spec": {}}


class RecordingGetter:
    """An in-memory claim source with GET only; records every call (thread-safe)."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self.store = {(ns, n): _claim(ns, n) for ns, ns_names in names.items() for n in ns_names}
        self.calls: list[tuple[str, ...]] = []
        self.get_errors: dict[str, Exception] = {}
        self._lock = threading.Lock()

    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        with self._lock:
            self.calls.append(("get", namespace, name))
        if name in self.get_errors:
            raise self.get_errors[name]
        try:
            return self.store[(namespace, name)]
        except KeyError:
            raise KubeError(f"get resourceclaims/{namespace}/{name}: HTTP 404", status=404) from None


class RecordingLister(RecordingGetter):
    """The same source with LIST (sorted by name, paged by ``limit``, like the apiserver)."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        super().__init__(names)
        self.list_error: Exception | None = None
        self.junk: list[Any] = []  # items put on every page as they are, like a broken apiserver

    def list_resource_claims(
        self, namespace: str, *, limit: int = 0, continue_token: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        with self._lock:
            self.calls.append(("list", namespace, str(limit)))
        if self.list_error is not None:
            raise self.list_error
        items = sorted((obj for (ns, _), obj in self.store.items() if ns == namespace), key=_name)
        if limit and len(items) > limit:
            return [*self.junk, *items[:limit]], "more"
        return [*self.junk, *items], ""


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _refs(namespace: str, names: list[str]) -> list[ClaimRef]:
    return [ClaimRef(namespace, name, f"uid-{name}") for name in names]


@pytest.fixture
def fetchers() -> Iterator[list[ClaimFetcher]]:
    made: list[ClaimFetcher] = []
    yield made
    for fetcher in made:
        fetcher.close()


def _fetcher(made: list[ClaimFetcher], source: RecordingGetter) -> ClaimFetcher:
    fetcher = ClaimFetcher(source)
    made.append(fetcher)
    return fetcher


NAMES = [f"c{i:02d}" for i in range(40)]


def test_lister_protocol_is_recognised() -> None:
    """A source with list_resource_claims is a ClaimLister; a GET-only source is not."""
    assert isinstance(RecordingLister({}), ClaimLister)
    assert not isinstance(RecordingGetter({}), ClaimLister)


def test_one_claim_is_one_get(fetchers: list[ClaimFetcher]) -> None:
    """A single claim is read with a GET, never a LIST."""
    source = RecordingLister({"ns": NAMES})
    got = _fetcher(fetchers, source).fetch(_refs("ns", ["c05"]))
    assert got == {"uid-c05": source.store[("ns", "c05")]}
    assert source.calls == [("get", "ns", "c05")]


def test_many_claims_of_a_namespace_are_one_list(fetchers: list[ClaimFetcher]) -> None:
    """32 claims of one namespace: one LIST of at most 4 x 32 objects, no GET."""
    source = RecordingLister({"ns": NAMES, "other": ["c01"]})
    refs = _refs("ns", NAMES[:32])
    got = _fetcher(fetchers, source).fetch(refs)
    assert source.calls == [("list", "ns", "128")]
    assert got == {ref.uid: source.store[("ns", ref.name)] for ref in refs}


def test_page_is_at_least_64(fetchers: list[ClaimFetcher]) -> None:
    """A small batch still asks for a page of 64, so small namespaces fit in one page."""
    source = RecordingLister({"ns": NAMES})
    _fetcher(fetchers, source).fetch(_refs("ns", NAMES[:4]))
    assert source.calls == [("list", "ns", "64")]


def test_below_the_threshold_claims_are_got_one_by_one(fetchers: list[ClaimFetcher]) -> None:
    """Three claims are three GETs (concurrent), no LIST."""
    source = RecordingLister({"ns": NAMES})
    got = _fetcher(fetchers, source).fetch(_refs("ns", ["c01", "c02", "c03"]))
    assert sorted(source.calls) == [("get", "ns", "c01"), ("get", "ns", "c02"), ("get", "ns", "c03")]
    assert set(got) == {"uid-c01", "uid-c02", "uid-c03"}


def test_missing_from_a_complete_list_is_not_found(fetchers: list[ClaimFetcher]) -> None:
    """A claim absent from a complete listing gets the same error as a GET answered 404."""
    source = RecordingLister({"ns": NAMES[:10]})
    refs = _refs("ns", ["c01", "c02", "c03", "gone"])
    got = _fetcher(fetchers, source).fetch(refs)
    assert [c[0] for c in source.calls] == ["list"]
    assert (
        got["uid-gone"] == "claim ns/gone (uid uid-gone): ResourceClaim not found in the apiserver (deleted?)"
    )
    single = _fetcher(fetchers, source).fetch(_refs("ns", ["gone"]))
    assert single["uid-gone"] == got["uid-gone"]


def test_claims_beyond_an_incomplete_page_are_got(fetchers: list[ClaimFetcher]) -> None:
    """With more claims in the namespace than the page holds, the ones not on it get a GET."""
    names = [f"c{i:03d}" for i in range(200)]
    source = RecordingLister({"ns": names})
    wanted = ["c001", "c002", "c003", "c150", "c199"]
    got = _fetcher(fetchers, source).fetch(_refs("ns", wanted))
    assert source.calls[0] == ("list", "ns", "64")
    assert sorted(source.calls[1:]) == [("get", "ns", "c150"), ("get", "ns", "c199")]
    assert {uid: obj["metadata"]["name"] for uid, obj in got.items() if not isinstance(obj, str)} == {
        f"uid-{n}": n for n in wanted
    }


def test_list_failure_falls_back_to_gets(fetchers: list[ClaimFetcher]) -> None:
    """A failing LIST (500) costs one try: every claim is then read with a GET, LISTs go on later."""
    source = RecordingLister({"ns": NAMES})
    source.list_error = KubeError("list resourceclaims: HTTP 500", status=500, transient=True)
    fetcher = _fetcher(fetchers, source)
    refs = _refs("ns", NAMES[:5])
    got = fetcher.fetch(refs)
    assert set(got) == {ref.uid for ref in refs} and not any(isinstance(v, str) for v in got.values())
    assert [c[0] for c in source.calls].count("get") == 5
    assert not fetcher.list_forbidden
    source.calls.clear()
    source.list_error = None
    fetcher.fetch(refs)
    assert source.calls == [("list", "ns", "64")]


def test_forbidden_list_turns_lists_off(fetchers: list[ClaimFetcher]) -> None:
    """A 403 on LIST (RBAC grants only get) makes the fetcher use GETs from then on."""
    source = RecordingLister({"ns": NAMES})
    source.list_error = KubeError("list resourceclaims: HTTP 403: forbidden", status=403)
    fetcher = _fetcher(fetchers, source)
    refs = _refs("ns", NAMES[:6])
    fetcher.fetch(refs)
    assert fetcher.list_forbidden
    source.calls.clear()
    got = fetcher.fetch(refs)
    assert all(call[0] == "get" for call in source.calls) and len(source.calls) == 6
    assert all(not isinstance(v, str) for v in got.values())


def test_unexpected_list_error_falls_back(fetchers: list[ClaimFetcher]) -> None:
    """A bug-like exception in LIST still leaves every claim fetched (by GET)."""
    source = RecordingLister({"ns": NAMES})
    source.list_error = ValueError("undecodable")
    got = _fetcher(fetchers, source).fetch(_refs("ns", NAMES[:4]))
    assert all(not isinstance(v, str) for v in got.values()) and len(got) == 4


def test_get_only_source_never_lists(fetchers: list[ClaimFetcher]) -> None:
    """A source without LIST (tests, explain) gets one GET per claim."""
    source = RecordingGetter({"ns": NAMES})
    got = _fetcher(fetchers, source).fetch(_refs("ns", NAMES[:8]))
    assert len(source.calls) == 8 and len(got) == 8


def test_each_namespace_decides_on_its_own(fetchers: list[ClaimFetcher]) -> None:
    """Four claims in one namespace are listed; one claim in another is got."""
    source = RecordingLister({"a": NAMES, "b": NAMES})
    refs = [*_refs("a", NAMES[:4]), ClaimRef("b", "c09", "uid-b-c09")]
    got = _fetcher(fetchers, source).fetch(refs)
    assert sorted(source.calls) == [("get", "b", "c09"), ("list", "a", "64")]
    assert got["uid-b-c09"] == source.store[("b", "c09")]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(
            KubeError("get resourceclaims/ns/c01: HTTP 404", status=404),
            "claim ns/c01 (uid uid-c01): ResourceClaim not found in the apiserver (deleted?)",
            id="404",
        ),
        pytest.param(
            KubeError("get resourceclaims/ns/c01: HTTP 500: etcd down", status=500, transient=True),
            "claim ns/c01 (uid uid-c01): cannot get ResourceClaim: "
            "get resourceclaims/ns/c01: HTTP 500: etcd down",
            id="500",
        ),
        pytest.param(
            RuntimeError("boom"),
            "claim ns/c01 (uid uid-c01): cannot get ResourceClaim: RuntimeError('boom')",
            id="bug",
        ),
    ],
)
def test_get_errors_become_claim_errors(
    fetchers: list[ClaimFetcher], error: Exception, expected: str
) -> None:
    """A failed GET is that claim's error text; the other claims of the call are still read."""
    source = RecordingGetter({"ns": NAMES})
    source.get_errors["c01"] = error
    got = _fetcher(fetchers, source).fetch(_refs("ns", ["c01", "c02"]))
    assert got["uid-c01"] == expected
    assert got["uid-c02"] == source.store[("ns", "c02")]


@pytest.mark.parametrize(
    "junk",
    [42, "claim", None, [], {"metadata": None}, {"metadata": {"name": 7}}, {"kind": "ResourceClaim"}],
    ids=["int", "string", "null", "list", "null-metadata", "numeric-name", "no-metadata"],
)
def test_junk_list_items_fall_back_to_gets(fetchers: list[ClaimFetcher], junk: Any) -> None:
    """A LIST page with an item that is not a named object (a broken or hostile apiserver) is not a
    failed call: the claims found on it are used, the others are fetched one GET each, and a claim
    that does not exist gets its own 404 error rather than an INTERNAL for the whole call."""
    source = RecordingLister({"ns": ["a", "b", "c", "d"]})
    source.junk = [junk]
    del source.store[("ns", "d")]  # "d" is missing: not on the page, 404 on GET
    got = _fetcher(fetchers, source).fetch(_refs("ns", ["a", "b", "c", "d"]))
    assert {uid: _name(obj) for uid, obj in got.items() if isinstance(obj, dict)} == {
        "uid-a": "a",
        "uid-b": "b",
        "uid-c": "c",
    }
    assert "not found in the apiserver" in str(got["uid-d"])
    assert ("get", "ns", "d") in source.calls
    assert not any(call[0] == "get" and call[2] != "d" for call in source.calls)


class StuckGetter(RecordingGetter):
    """GETs that never answer until released (reads queued behind stuck ones), with a read deadline."""

    read_deadline = 0.2

    def __init__(self, names: dict[str, list[str]]) -> None:
        super().__init__(names)
        self.release = threading.Event()

    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        self.release.wait(30)
        return super().get_resource_claim(namespace, name)


def test_a_call_stops_waiting_for_queued_gets(fetchers: list[ClaimFetcher]) -> None:
    """GETs stuck in the shared I/O pool (its threads all taken) give each claim an error once the
    call has waited two read deadlines: the kubelet gets an answer, not its own 45 s timeout."""
    source = StuckGetter({"ns": ["a", "b", "c"]})
    fetcher = ClaimFetcher(source, max_workers=1)  # one thread: b and c queue behind a
    fetchers.append(fetcher)
    try:
        got = fetcher.fetch(_refs("ns", ["a", "b", "c"]))
    finally:
        source.release.set()
    assert set(got) == {"uid-a", "uid-b", "uid-c"}
    for uid, value in got.items():
        assert isinstance(value, str) and "no answer from the apiserver" in value, (uid, value)
