"""Fail-closed pinning is visible: a counter on /metrics and a Warning Event on the pod.

The sink (``PinningReports``) writes Events over real HTTP to the fake apiserver with the real
client, and counts into a real ``Metrics``; the last test drives it from the NRI plugin over the
real socket, as ``numadra run`` wires it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from driver.kube.client import KubeClient
from driver.kube.events import EventPoster
from driver.observability import Metrics
from driver.observability.pinreports import PinningReports, pin_failure_event
from driver.pinning.failures import PinFailure
from harness.fake_nri_runtime import container, pod
from harness.fakeapiserver import FakeApiServer
from tests.integration.claims._world import claim, cpu_result
from tests.integration.pinning._node import PinningNode, claim_env, reserved


def _failure(pod_uid: str = "p-1", reason: str = "not_reserved", action: str = "refused") -> PinFailure:
    return PinFailure(
        reason=reason,
        action=action,
        pod_namespace="ml",
        pod_name=f"pod-{pod_uid}",
        pod_uid=pod_uid,
        container="app",
        claim_uid="c-1",
        message=f"container app of pod ml/pod-{pod_uid} carries the pinning marker of claim ml/x",
    )


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def kube(api: FakeApiServer) -> Iterator[KubeClient]:
    client = KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    client.configure()
    yield client
    client.close()


@pytest.fixture
def events(kube: KubeClient) -> Iterator[EventPoster]:
    """The driver's one Event poster, as ``numadra run`` hands it to the reports."""
    poster = EventPoster(kube.create_event)
    yield poster
    poster.close()


def _events(api: FakeApiServer) -> list[dict[str, Any]]:
    return api.objects("Event")


def test_a_failure_is_counted_and_becomes_a_warning_event_on_the_pod(
    api: FakeApiServer, events: EventPoster
) -> None:
    metrics = Metrics("numadra.dev", "node-a")
    reports = PinningReports(events, node_name="node-a")
    reports(_failure(action="refused"))  # before the metrics exist: replayed on attach
    reports.attach_metrics(metrics)
    reports(_failure("p-2", reason="consumers_unknown", action="unpinned"))
    assert reports.flush()
    sample = metrics.sample
    assert sample("numadra_pinning_failures_total", {"reason": "not_reserved", "action": "refused"}) == 1
    assert (
        sample("numadra_pinning_failures_total", {"reason": "consumers_unknown", "action": "unpinned"}) == 1
    )
    events = {e["involvedObject"]["uid"]: e for e in _events(api)}
    refused, unpinned = events["p-1"], events["p-2"]
    assert (refused["type"], refused["reason"]) == ("Warning", "NumadraPinningRefused")
    assert unpinned["reason"] == "NumadraNotPinned"
    assert refused["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "pod-p-1",
        "uid": "p-1",
        "fieldPath": "spec.containers{app}",
    }
    assert refused["metadata"]["namespace"] == "ml" and refused["source"]["host"] == "node-a"
    assert "claim ml/x" in refused["message"] and refused["message"].endswith("[not_reserved]")
    assert reports.posted == 2 and reports.dropped == 0
    reports.close()


def test_events_are_rate_limited_per_pod_and_overall(api: FakeApiServer, events: EventPoster) -> None:
    """A pod retrying (the kubelet's backoff) gets one Event per interval; many pods draw from
    one bucket, so a tenant's flood of forged pods cannot flood the apiserver. Every failure is
    still counted."""
    clock = Clock()
    metrics = Metrics()
    reports = PinningReports(events, node_name="n", burst=3, refill_per_s=0.0, clock=clock)
    reports.attach_metrics(metrics)
    for _ in range(5):
        reports(_failure("p-1"))
    clock.now += 61
    reports(_failure("p-1"))  # the interval passed: one more
    for i in range(10):
        reports(_failure(f"flood-{i}"))  # only the bucket's last token is left
    assert reports.flush()
    assert len(_events(api)) == 3
    assert (
        metrics.sample("numadra_pinning_failures_total", {"reason": "not_reserved", "action": "refused"})
        == 16
    )
    assert reports.dropped == 13
    reports.close()


def test_an_unreachable_apiserver_loses_the_event_not_the_count(
    api: FakeApiServer, events: EventPoster
) -> None:
    metrics = Metrics()
    reports = PinningReports(events, node_name="n")
    reports.attach_metrics(metrics)
    api.stop()
    reports(_failure())
    assert reports.flush()
    assert reports.dropped == 1 and reports.posted == 0
    assert (
        metrics.sample("numadra_pinning_failures_total", {"reason": "not_reserved", "action": "refused"}) == 1
    )
    reports.close()


def test_the_event_message_is_bounded() -> None:
    """A hostile env can make a long message (it quotes the claim UID): the Event carries 1024 chars."""
    long = PinFailure("bad_marker", "refused", "ml", "p", "u", "c", "x" * 5000, "m" * 5000)
    assert len(pin_failure_event(long, node_name="n")["message"]) == 1024


def test_a_forged_marker_puts_an_event_on_the_forgers_pod(node: PinningNode) -> None:
    """End to end over the NRI socket: the copied marker is refused and the forger's pod gets it."""
    obj = claim("7b8c9d0e-0d1b-4c3a-9e8f-0000000000d1", "cpus", "ml", results=[cpu_result("cpus", 1)])
    obj["status"]["reservedFor"] = reserved("holder-uid")
    ref = node.put_claim(obj)
    assert node.start_driver().prepare_claims([ref])[ref.uid].ok
    poster = EventPoster(node.kube().create_event)
    node.closers.append(poster.close)
    reports = PinningReports(poster, node_name="node-a")
    node.closers.append(reports.close)
    _plugin, conn = node.start_plugin(on_failure=reports)
    forger = pod("sb-f", "forger-uid", name="miner", namespace="ml")
    env = claim_env(node.world, ref.uid)
    assert (
        conn.create_container_raw(container("c-f", "miner", env, sandbox=forger.id), pod=forger).status.code
        == 9
    )
    assert reports.flush()
    (event,) = node.api.objects("Event")
    assert event["involvedObject"]["uid"] == "forger-uid" and event["reason"] == "NumadraPinningRefused"
    assert "not for this pod" in event["message"]
