"""Warning Events about a claim's NVIDIA user space: on its pods (else the claim), off the call path."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from structlog.testing import capture_logs

from driver.claims.events import ClaimEvents, userspace_event
from driver.inventory.nvidia_source import UserspaceSource
from driver.kube.events import MAX_MESSAGE, EventPoster
from driver.observability.metrics import USERSPACE_WARNING_SOURCES, Metrics

CLAIM: dict[str, Any] = {
    "metadata": {"namespace": "ml", "name": "gpu-claim", "uid": "u-1"},
    "status": {
        "reservedFor": [
            {"resource": "pods", "name": "train-0", "uid": "p-0"},
            {"resource": "pods", "name": "train-1", "uid": "p-1"},
            {"resource": "widgets", "apiGroup": "example.com", "name": "w", "uid": "w-0"},
        ]
    },
}


def test_one_warning_event_per_reserved_pod() -> None:
    """The pods are where users look (kubectl describe pod); other consumer kinds are not pods."""
    now = datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC)
    events = userspace_event(
        CLAIM,
        UserspaceSource.NONE,
        ["no toolkit spec", "no libcuda"],
        component="numadra.dev",
        node="n1",
        now=now,
    )
    assert [e["involvedObject"]["name"] for e in events] == ["train-0", "train-1"]
    first = events[0]
    assert first["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "train-0",
        "uid": "p-0",
    }
    assert first["type"] == "Warning"
    assert first["reason"] == "NvidiaUserspaceMissing"
    assert first["message"] == (
        "claim ml/gpu-claim on node n1 gets no NVIDIA driver user space (CUDA will find no driver): "
        "no toolkit spec; no libcuda"
    )
    assert first["metadata"] == {"generateName": "train-0.", "namespace": "ml"}
    assert first["firstTimestamp"] == first["lastTimestamp"] == "2026-12-03T09:00:00Z"


def test_a_claim_without_pods_gets_the_event_and_long_messages_are_cut() -> None:
    """No pod named: the claim itself; the apiserver's message limit holds."""
    claim = {"metadata": {"namespace": "ml", "name": "c", "uid": "u-2"}, "status": {}}
    (event,) = userspace_event(claim, UserspaceSource.DRIVER_ROOT, ["x" * 5000], component="d", node="n")
    assert event["involvedObject"]["kind"] == "ResourceClaim"
    assert event["involvedObject"]["uid"] == "u-2"
    assert event["reason"] == "NvidiaUserspaceFromDriverRoot"
    assert len(event["message"]) == MAX_MESSAGE


def test_posted_from_a_worker_and_failures_only_logged() -> None:
    """warn() returns at once; a failing post is logged, the next one still goes out."""
    posted: list[tuple[str, str]] = []
    done = threading.Event()

    def post(namespace: str, obj: Mapping[str, Any]) -> None:
        name = obj["involvedObject"]["name"]
        posted.append((namespace, name))
        if name == "train-0":
            raise OSError("apiserver unreachable")
        done.set()

    poster = EventPoster(post)
    sink = ClaimEvents(poster, component="numadra.dev", node="n1")
    with capture_logs() as logs:
        sink.warn(CLAIM, UserspaceSource.DRIVER_ROOT, ["toolkit spec not used: x"])
        assert done.wait(10)
        poster.close()
    assert posted == [("ml", "train-0"), ("ml", "train-1")]
    assert [e["object"] for e in logs if e["event"] == "cannot post event"] == ["Pod ml/train-0"]


def test_metric_catches_up_with_the_drivers_totals() -> None:
    """numadra_nvidia_userspace_warnings_total follows the claims driver's running totals."""
    metrics = Metrics()
    assert tuple(s.name.lower() for s in UserspaceSource if s.name != "TOOLKIT") == USERSPACE_WARNING_SOURCES
    metrics.set_userspace_warnings({"driver_root": 2, "none": 1})
    metrics.set_userspace_warnings({"driver_root": 2, "none": 1})
    name = "numadra_nvidia_userspace_warnings_total"
    assert metrics.sample(name, {"source": "driver_root"}) == 2
    assert metrics.sample(name, {"source": "none"}) == 1


def test_posted_and_dropped_events_reach_the_metric() -> None:
    """numadra_events_total counts what became of each Event: written, or lost (here: refused)."""
    calls = 0

    def create(namespace: str, event: Mapping[str, Any]) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("apiserver refused the Event")

    poster = EventPoster(create)
    try:
        for name in ("a", "b", "c"):
            event = {"metadata": {"namespace": "ml", "name": name}, "reason": "Test", "involvedObject": {}}
            poster.post(event)
        assert poster.flush(10)
    finally:
        poster.close()
    metrics = Metrics()
    totals = {"posted": poster.posted, "dropped": poster.dropped}
    assert totals == {"posted": 2, "dropped": 1}
    metrics.set_events(totals)
    metrics.set_events(totals)  # the same totals again add nothing
    assert metrics.sample("numadra_events_total", {"result": "posted"}) == 2
    assert metrics.sample("numadra_events_total", {"result": "dropped"}) == 1
