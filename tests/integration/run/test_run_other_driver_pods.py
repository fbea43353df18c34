"""``numadra run --pinning nri`` places a pod holding another DRA driver's GPU: the process wiring.

A generated 2-node host (CPUs 0-7 / 8-15) with a stand-in GPU's PCI function on node 1. Another
driver (``gpu.example.com``) publishes that GPU in a ResourceSlice of this node; a pod that asked
for its extended resource holds it through the scheduler's claim. The process's own foreign
watcher, apiserver client, sysfs view and NRI plugin must all be wired for its container to get
node 1's CPUs and memory.
"""

from __future__ import annotations

import shutil

from driver._proto.nri import api_pb2 as nri
from harness.fake_nri_runtime import FakeNriRuntime
from harness.fake_nri_runtime import container as nri_container
from harness.hosttree import GpuSpec, Topology, write_host_tree
from harness.poll import wait_for
from tests.integration.run.conftest import NODE, RunNode, load_slack

OTHER = "gpu.example.com"
BUS = "0000:af:00.0"
POD = nri.PodSandbox(id="sb-1", name="trainer", uid="6d0e6a3c-1111-4c3a-9e8f-0000000000a1", namespace="ml")


def _objects(node: RunNode) -> None:
    """The other driver's slice (pciBusID only: resolved through the host's sysfs), the pod and
    the scheduler's claim for its ``gpu.example.com/gpu: 1``."""
    device = {"name": "gpu-1", "attributes": {"resource.kubernetes.io/pciBusID": {"string": BUS}}}
    spec = {"driver": OTHER, "nodeName": NODE, "pool": {"name": NODE}, "devices": [device]}
    node.api.put_object({"kind": "ResourceSlice", "metadata": {"name": "other-gpus"}, "spec": spec})
    result = {"request": "container-0-request-0", "driver": OTHER, "pool": NODE, "device": "gpu-1"}
    node.api.put_object(
        {
            "kind": "ResourceClaim",
            "metadata": {
                "name": "trainer-gpu",
                "namespace": "ml",
                "uid": "6d0e6a3c-2222-4c3a-9e8f-0000000000a2",
            },
            "status": {
                "allocation": {"devices": {"results": [result]}},
                "reservedFor": [{"resource": "pods", "name": POD.name, "uid": POD.uid}],
            },
        }
    )
    mapping = {"containerName": "app", "resourceName": f"{OTHER}/gpu", "requestName": "container-0-request-0"}
    node.api.put_object(
        {
            "kind": "Pod",
            "metadata": {"name": POD.name, "namespace": "ml", "uid": POD.uid},
            "spec": {"containers": [{"name": "app"}]},
            "status": {
                "extendedResourceClaimStatus": {
                    "resourceClaimName": "trainer-gpu",
                    "requestMappings": [mapping],
                }
            },
        }
    )


def _ours(node: RunNode) -> list[dict[str, object]]:
    return [s for s in node.slices() if s["spec"]["driver"] != OTHER]


def test_a_pod_of_another_drivers_gpu_runs_on_its_node(node: RunNode) -> None:
    shutil.rmtree(node.host)
    write_host_tree(
        node.host,
        Topology(
            name="two-node", sockets=2, cores_per_socket=8, gpus=(GpuSpec(BUS, numa_node=1, driver=None),)
        ),
    )
    _objects(node)
    runtime = FakeNriRuntime(node.root / "nri.sock")
    try:
        process = node.spawn("--pinning", "nri", "--nri-socket", str(node.root / "nri.sock"))
        node.register(process)
        # the publisher writes nothing before the foreign watcher's first LIST: once our slices
        # are there, the other driver's slice is known
        wait_for(lambda: _ours(node), 20 * load_slack(), "numadra's slices")
        conn = runtime.accept(timeout=10 * load_slack())
        try:
            conn.configure()
            conn.synchronize([], pods=[POD])
            resp = conn.create_container(
                nri_container("c-app", "app", ["PATH=/bin"], sandbox=POD.id), pod=POD
            )
            cpu = resp.adjust.linux.resources.cpu
            assert (cpu.cpus, cpu.mems) == ("8-15", "1"), process.log_text()[-6000:]
            assert process.stop() == 0
        finally:
            conn.close()
    finally:
        runtime.close()
