"""Fixtures: a fake apiserver on loopback with this node's Node object, and a client for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from driver.kube.client import KubeClient
from harness.fakeapiserver import FakeApiServer

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
