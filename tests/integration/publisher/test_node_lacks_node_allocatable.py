"""A Node that does not declare ``DRANodeAllocatableResources``: named once, the slices still published.

kube-apiserver 1.37.2 admits a ResourceSlice with ``nodeAllocatableResources`` only for a Node
whose ``status.declaredFeatures`` lists the feature, which its kubelet declares when its own gate
is on. Seen on the real 1.37.2 apiserver (tests/e2e/test_aux_cpus.py needs the Node to declare
it): every slice of the node was refused with a 403, so numadra published nothing at all and
retried for ever. ``NodeLacksFeatureApi`` answers that 403 in front of the fake apiserver (a fake,
named as such); the publisher names the gate once and publishes the devices without the field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from driver.errors import KubeError
from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.kube.events import EventPoster
from driver.pinning.aux import AuxCpus
from driver.slices.builder import build_slices
from driver.slices.features import NODE_ALLOCATABLE
from driver.slices.missingfeatures import EVENT_REASON, MISSING_FEATURES_FILE, MissingFeatures, load_record
from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer
from tests.support.gatedapi import GateOffApi
from tests.unit.inventory.trees import inventory

from .conftest import DRIVER, NODE


class NodeLacksFeatureApi(GateOffApi):
    """Every gate on, but the Node declares no features: a slice with node allocatable resources
    gets the NodeDeclaredFeatures admission's 403, word for word as 1.37.2 answers."""

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client, ())

    def _gate(self, verb: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        devices = obj["spec"].get("devices") or []
        if any(d.get("nodeAllocatableResources") for d in devices):
            self.refusals += 1
            name = obj["metadata"]["name"]
            message = (
                f'resourceslices.resource.k8s.io "{name}" is forbidden: node "{NODE}" does not '
                f"support {NODE_ALLOCATABLE} feature"
            )
            raise KubeError(
                f"{verb} resourceslices/{name}: HTTP 403: {message}",
                verb=verb,
                resource="resourceslices",
                name=name,
                status=403,
            )
        return super()._gate(verb, obj)


@pytest.fixture
def poster(client: KubeClient) -> Iterator[EventPoster]:
    events = EventPoster(client.create_event)
    yield events
    events.close()


def test_the_slices_are_published_without_the_field_and_the_gate_named(
    api: FakeApiServer, client: KubeClient, poster: EventPoster, tmp_path: Path
) -> None:
    """One warning, one Node Event naming the kubelet's gate, the record; every device published."""
    gated = NodeLacksFeatureApi(client)
    features = MissingFeatures(
        node_name=NODE, driver_name=DRIVER, events=poster, record_path=tmp_path / MISSING_FEATURES_FILE
    )
    errors: list[BaseException] = []

    def build(inv: Any, taints: Any) -> list[dict[str, Any]]:
        return build_slices(
            inv,
            node_name=NODE,
            driver_name=DRIVER,
            taints=taints,
            node_allocatable=True,
            aux_cpus=AuxCpus(gpu=2),
        )

    publisher = SlicePublisher(
        gated,
        node_name=NODE,
        driver_name=DRIVER,
        on_error=errors.append,
        retry=RetryPolicy(floor=0.05, cap=0.2),
        features=features,
        build=build,
    )
    publisher.start()
    try:
        with capture_logs() as logs:
            publisher.republish(inventory("dgx"))
            assert publisher.wait_synced(15), "publisher did not converge"
        stored = {d["name"]: d for s in api.objects("ResourceSlice") for d in s["spec"].get("devices", [])}
        wanted = build(inventory("dgx"), {})
        assert set(stored) == {d["name"] for s in wanted for d in s["spec"]["devices"]}
        assert not any("nodeAllocatableResources" in d for d in stored.values())
        assert gated.refusals >= 1
        warnings = [e for e in logs if e.get("feature") == NODE_ALLOCATABLE]
        assert len(warnings) == 1
        assert poster.flush(10)
        (event,) = [e for e in api.objects("Event") if e["reason"] == EVENT_REASON]
        assert f"node {NODE} does not declare {NODE_ALLOCATABLE}" in event["message"]
        assert "kubelet" in event["message"]
        record = load_record(tmp_path)
        assert [(f.name, f.refused) for f in record.features] == [(NODE_ALLOCATABLE, True)]
    finally:
        publisher.stop()
