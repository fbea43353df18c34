"""The node tier's second DRA driver (harness/standin_gpu_driver.py) does what its tiers rely on.

Over real sockets, without a kubelet or a control plane: the stand-in runs as its own process
against the test apiserver (harness/fakeapiserver.py) and this test plays the kubelet
(harness/kubeletclient.py). It must register, publish its slice with the GPU's standard
``numaNode`` read from the host tree, prepare a claim by a CDI spec that names its GPU, refuse a
device that is not its own, unprepare by removing the spec, and delete its slice when stopped.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.kubelet.paths import socket_paths
from driver.plugin import ClaimRef
from harness.fakeapiserver import FakeApiServer
from harness.hostspec import GpuSpec, Topology
from harness.hosttree import write_host_tree
from harness.kubeletclient import KubeletClient
from harness.poll import wait_for
from harness.standin_gpu_driver import (
    STANDIN_DRIVER,
    STANDIN_ENV,
    command,
    device_name,
    logged_ready,
    slice_name,
)

REPO = Path(__file__).resolve().parents[3]
NODE = "standin-node"
BUS_ID = "0000:98:00.0"
TOPOLOGY = Topology(
    name="standin", cores_per_socket=2, nodes_per_socket=2, gpus=(GpuSpec(bus_id=BUS_ID, numa_node=1),)
)


def _claim(name: str, uid: str, device: str) -> dict[str, Any]:
    result = {"request": "gpu", "driver": STANDIN_DRIVER, "pool": NODE, "device": device}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ns", "name": name, "uid": uid},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def test_standin_publishes_prepares_by_cdi_and_deletes_its_slice(tmp_path: Path, api: FakeApiServer) -> None:
    tree = write_host_tree(tmp_path / "tree", TOPOLOGY)
    registrar, plugin_dir, cdi = tmp_path / "reg", tmp_path / "plugin", tmp_path / "cdi"
    registrar.mkdir()
    log = tmp_path / "standin.log"
    argv = command(
        node_name=NODE,
        kubeconfig=Path(api.kubeconfig_path),
        registrar_dir=registrar,
        plugin_dir=plugin_dir,
        cdi_dir=cdi,
        gpus=[BUS_ID],
        host_root=tree,
    )
    paths = socket_paths(registrar, plugin_dir, STANDIN_DRIVER, None)
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        wait_for(
            lambda: paths.registration.exists() or proc.poll() is not None, 30, "its registration socket"
        )
        assert proc.poll() is None, log.read_text()
        with KubeletClient() as kubelet:
            registration = kubelet.register(paths.registration)
            assert registration.info.name == STANDIN_DRIVER
            wait_for(lambda: logged_ready(log), 30, "its slice to be published")

            (stored,) = api.objects("ResourceSlice")
            assert stored["metadata"]["name"] == slice_name(NODE)
            assert (stored["spec"]["driver"], stored["spec"]["nodeName"]) == (STANDIN_DRIVER, NODE)
            (device,) = stored["spec"]["devices"]
            assert device["name"] == device_name(BUS_ID)
            assert device["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 1}  # from the tree
            assert device["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": BUS_ID}

            good = ClaimRef("ns", "good", "11111111-0000-4000-8000-000000000001")
            foreign = ClaimRef("ns", "foreign", "11111111-0000-4000-8000-000000000002")
            api.put_object(_claim(good.name, good.uid, device_name(BUS_ID)))
            api.put_object(_claim(foreign.name, foreign.uid, "gpu-0000-99-00-0"))
            answer = kubelet.prepare(registration.info.endpoint, [good, foreign])
            error = answer.claims[foreign.uid].error
            assert "ns/foreign" in error and f"'gpu-0000-99-00-0' is not one of {STANDIN_DRIVER}'s" in error
            (prepared,) = answer.claims[good.uid].devices
            cdi_id = f"example.com/gpu={good.uid}-{device_name(BUS_ID)}"
            assert (prepared.device_name, list(prepared.cdi_device_ids)) == (device_name(BUS_ID), [cdi_id])
            spec_file = cdi / f"example.com_gpu_{good.uid}.json"
            spec = json.loads(spec_file.read_text())
            assert spec["kind"] == "example.com/gpu"
            (cdi_device,) = spec["devices"]
            assert cdi_device["containerEdits"]["env"] == [f"{STANDIN_ENV}={BUS_ID}"]
            assert [p.name for p in cdi.iterdir()] == [spec_file.name]

            answer = kubelet.unprepare(registration.info.endpoint, [good])
            assert answer.claims[good.uid].error == ""
            assert not spec_file.exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, log.read_text()
    assert api.objects("ResourceSlice") == []  # deleted on stop
