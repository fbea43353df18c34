"""The one Warning Event builder and the one poster: shape, namespace, message limit, counting."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from structlog.testing import capture_logs

from driver.errors import KubeError
from driver.kube.events import ELLIPSIS, MAX_MESSAGE, EventPoster, InvolvedObject, warning_event

NOW = datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC)
POD = InvolvedObject("Pod", "train-0", uid="p-0", namespace="ml", field_path="spec.containers{app}")


def _event(name: str = "train-0", reason: str = "Because") -> dict[str, Any]:
    return warning_event(
        InvolvedObject("Pod", name, uid="u", namespace="ml"),
        reason=reason,
        message="m",
        component="numadra.dev",
        host="node-a",
    )


def test_an_event_on_a_namespaced_object_carries_what_kubectl_describe_shows() -> None:
    event = warning_event(
        POD,
        reason="NumadraPinningRefused",
        message="refused",
        component="numadra.dev",
        host="node-a",
        now=NOW,
    )
    assert event == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "train-0.", "namespace": "ml"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": "ml",
            "name": "train-0",
            "uid": "p-0",
            "fieldPath": "spec.containers{app}",
        },
        "reason": "NumadraPinningRefused",
        "message": "refused",
        "type": "Warning",
        "source": {"component": "numadra.dev", "host": "node-a"},
        "reportingComponent": "numadra.dev",
        "reportingInstance": "node-a",
        "firstTimestamp": "2026-12-03T09:00:00Z",
        "lastTimestamp": "2026-12-03T09:00:00Z",
        "count": 1,
    }


def test_an_event_on_a_cluster_scoped_object_goes_to_default() -> None:
    """The apiserver takes a Node's Event in ``default`` only; the Node itself has no namespace."""
    event = warning_event(
        InvolvedObject("Node", "node-a", uid="n-uid"), reason="R", message="m", component="c", host="node-a"
    )
    assert event["metadata"] == {"generateName": "node-a.", "namespace": "default"}
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "n-uid"}


def test_fields_not_given_are_left_out_and_a_nameless_object_still_names_the_event() -> None:
    claim = InvolvedObject("ResourceClaim", "", namespace="ml", api_version="resource.k8s.io/v1")
    event = warning_event(claim, reason="R", message="m", component="c", host="h")
    assert event["involvedObject"] == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "namespace": "ml",
        "name": "",
    }
    assert event["metadata"]["generateName"] == "resourceclaim."


def test_timestamps_are_utc_whatever_zone_now_is_in() -> None:
    later = NOW.astimezone(timezone(timedelta(hours=2)))
    event = warning_event(POD, reason="R", message="m", component="c", host="h", now=later)
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-12-03T09:00:00Z"


def test_the_message_limit_is_counted_in_utf8_and_a_cut_says_so() -> None:
    def message(text: str) -> str:
        return str(warning_event(POD, reason="R", message=text, component="c", host="h")["message"])

    assert message("x" * MAX_MESSAGE) == "x" * MAX_MESSAGE  # exactly the limit: kept whole
    cut = message("x" * 5000)
    assert len(cut) == MAX_MESSAGE and cut.endswith(ELLIPSIS)
    wide = message("é" * MAX_MESSAGE)  # two UTF-8 units each: cut on a character, never inside one
    assert len(wide.encode()) <= MAX_MESSAGE and wide.endswith(ELLIPSIS)
    assert set(wide.removesuffix(ELLIPSIS)) == {"é"}


class Api:
    """What ``KubeClient.create_event`` looks like to the poster: records, or fails by name."""

    def __init__(self, fail: Mapping[str, BaseException] | None = None) -> None:
        self.fail = dict(fail or {})
        self.written: list[tuple[str, str]] = []
        self.holding = threading.Event()
        self.open = threading.Event()
        self.open.set()

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        name = event["involvedObject"]["name"]
        self.holding.set()
        assert self.open.wait(30)
        if name in self.fail:
            raise self.fail[name]
        self.written.append((namespace, name))


def test_the_poster_writes_in_order_and_counts() -> None:
    api = Api()
    poster = EventPoster(api.create_event)
    results: list[bool] = []
    for name in ("a", "b", "c"):
        assert poster.post(_event(name), on_result=results.append)
    assert poster.flush(10)
    assert api.written == [("ml", "a"), ("ml", "b"), ("ml", "c")]
    assert results == [True, True, True]
    assert (poster.posted, poster.dropped) == (3, 0)
    assert poster.close(10)


def test_a_failed_post_is_logged_once_with_its_reason_and_object_and_the_next_goes_out() -> None:
    api = Api(
        {
            "down": KubeError("create events ml/: connection refused"),
            "gone": OSError("broken pipe"),
            "bug": ValueError("not an apiserver failure"),
        }
    )
    poster = EventPoster(api.create_event, name="events-under-test")
    results: list[bool] = []
    with capture_logs() as logs:
        for name in ("down", "gone", "bug", "fine"):
            assert poster.post(_event(name, reason=f"R-{name}"), on_result=results.append)
        assert poster.flush(10)
    assert api.written == [("ml", "fine")]
    assert results == [False, False, False, True]
    assert (poster.posted, poster.dropped) == (1, 3)
    failed = [(e["reason"], e["object"]) for e in logs if e["event"] == "cannot post event"]
    assert failed == [("R-down", "Pod ml/down"), ("R-gone", "Pod ml/gone")]
    (bug,) = [e for e in logs if e["event"] == "queue worker handler failed"]
    assert bug["worker"] == "events-under-test"  # not an apiserver failure: a bug, with its trace
    assert poster.close(10)


def test_a_full_queue_drops_counts_and_logs_once_per_run_of_drops() -> None:
    """The apiserver hangs on the first Event: the caller still returns at once for every one."""
    api = Api()
    api.open.clear()
    poster = EventPoster(api.create_event, max_queued=2)
    with capture_logs() as logs:
        assert poster.post(_event("first"))
        assert api.holding.wait(10)
        taken = [poster.post(_event(f"e{i}", reason="Flood")) for i in range(10)]
        assert taken == [True, True] + [False] * 8
        assert poster.backlog == 2
        api.open.set()
        assert poster.flush(10)
        assert poster.post(_event("after"))
        assert poster.flush(10)
    assert (poster.posted, poster.dropped) == (4, 8)
    dropped = [e for e in logs if e["event"] == "event dropped"]
    assert [(e["why"], e["reason"], e["object"], e["max_queued"]) for e in dropped] == [
        ("queue full", "Flood", "Pod ml/e2", 2)
    ]
    assert [e["dropped"] for e in logs if e["event"] == "events queued again"] == [8]
    assert poster.close(10)


def test_after_close_nothing_is_taken_and_what_close_gave_up_counts_as_dropped() -> None:
    api = Api()
    api.open.clear()
    poster = EventPoster(api.create_event)
    assert poster.post(_event("held"))
    assert api.holding.wait(10)
    assert poster.post(_event("queued"))
    assert not poster.close(0.05)
    assert not poster.post(_event("late"))
    api.open.set()
    assert poster.close(10)
    assert api.written == [("ml", "held")]
    assert (poster.posted, poster.dropped) == (1, 2)
