"""Fixtures: a fake apiserver on loopback with this node's Node object, a client for it, and a
publisher of two GPUs that retries fast (for the tests of hostile answers)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.slices.builder import build_slices
from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer

from .inventories import gpu_inventory

NODE = "node-a"
DRIVER = "numadra.dev"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    server.start()
    server.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    yield server
    server.close()


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[KubeClient]:
    kube = KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    yield kube
    kube.close()


@pytest.fixture
def fast_publisher(client: KubeClient) -> Iterator[SlicePublisher]:
    """A publisher of two GPUs, not started, whose retries take at most half a second."""
    pub = SlicePublisher(
        client,
        node_name=NODE,
        driver_name=DRIVER,
        retry=RetryPolicy(floor=0.05, cap=0.5, healthy_after=0.5),
        rng=random.Random(7),
    )
    pub.publish(build_slices(gpu_inventory(2), node_name=NODE, driver_name=DRIVER))
    yield pub
    pub.stop()
