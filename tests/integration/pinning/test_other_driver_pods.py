"""A pod holding another DRA driver's GPU runs on that GPU's NUMA node, read once, never blocked.

Before, a container of a pod whose GPU came from another driver (``gpu.example.com`` here, as
``gpu.nvidia.com`` would be) carried no numadra marker and kept every CPU and memory node of the
host. Now the NRI plugin reads the pod (its claims, and the extended-resource claim the
scheduler made) and its claims from the apiserver once, finds each device in the other
driver's ResourceSlice of this node, and places the container as it places a numadra GPU's.

Real pieces: a generated 2-node host tree (CPUs 0-7 / 8-15, the stand-in GPUs' PCI functions
with their ``numa_node`` in sysfs) discovered by numadra's discovery; the fake apiserver over
real HTTP serving the Pods, ResourceClaims and the other driver's ResourceSlice; numadra's
foreign-slices watcher LISTing that slice; the NRI plugin on a real unix socket, with its read
pool, slots and deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from driver._proto.nri import api_pb2 as nri
from driver.inventory.discovery import discover
from driver.pinning.align import ALIGN_ANNOTATION, DeviceAligner
from driver.pinning.failures import REASON_DEVICES_UNPLACED, REASON_DEVICES_UNREAD, PinFailure
from driver.pinning.nri.readslots import ReadSlots
from driver.pinning.otherdevices import OtherDevices, SysfsPciNodes
from driver.pinning.planner import CpuPlanner
from driver.slices.foreign import ForeignOwners
from harness.fake_nri_runtime import FakePluginConnection, container, pod
from harness.fakeapiserver import Fault
from harness.hosttree import GpuSpec, Topology, write_host_tree
from harness.poll import wait_for
from tests.integration.claims._world import DRIVER, NODE, claim
from tests.integration.pinning._node import PinningNode, cpuset, reserved

OTHER = "gpu.example.com"
POOL = NODE
GPU_NODE0, GPU_NODE1, GPU_NO_NODE = "0000:3b:00.0", "0000:af:00.0", "0000:c1:00.0"
TRAINER = pod("sb-t", "7c1d0e4a-1111-4c3a-9e8f-00000000000a", name="trainer", namespace="ml")
SECOND = pod("sb-s", "7c1d0e4a-2222-4c3a-9e8f-00000000000b", name="second", namespace="ml")
PLAIN = pod("sb-p", "7c1d0e4a-3333-4c3a-9e8f-00000000000c", name="plain", namespace="ml")
GiB = 1 << 30


def _host(root: Path) -> Path:
    """2 NUMA nodes x 8 CPUs; the other driver's GPUs on node 0, node 1 and on none (-1)."""
    topo = Topology(
        name="two-node",
        sockets=2,
        cores_per_socket=8,
        memory_per_node_kib=64 * 1024 * 1024,
        gpus=(
            GpuSpec(GPU_NODE0, numa_node=0, driver=None),
            GpuSpec(GPU_NODE1, numa_node=1, driver=None),
            GpuSpec(GPU_NO_NODE, numa_node=-1, driver=None),
        ),
    )
    return write_host_tree(root, topo)


def _device(name: str, **attributes: Any) -> dict[str, Any]:
    return {"name": name, "attributes": attributes}


def _slice(
    devices: Sequence[Mapping[str, Any]], *, name: str = "other-gpus", node: str = NODE
) -> dict[str, Any]:
    """The other driver's ResourceSlice of ``node``, as its kubelet plugin publishes it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": OTHER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


NUMA = "resource.kubernetes.io/numaNode"
BUS = "resource.kubernetes.io/pciBusID"
STANDARD_GPUS = [
    _device("gpu-0", **{NUMA: {"int": 0}, BUS: {"string": GPU_NODE0}}),
    _device("gpu-1", **{NUMA: {"int": 1}, BUS: {"string": GPU_NODE1}}),
]


def _other_claim(uid: str, name: str, holder: nri.PodSandbox, *devices: tuple[str, str]) -> dict[str, Any]:
    """A claim the other driver's devices were allocated to, reserved for ``holder``:
    ``devices`` are (request, device) pairs of this node's pool."""
    results = [{"request": r, "driver": OTHER, "pool": POOL, "device": d} for r, d in devices]
    obj = claim(uid, name, holder.namespace, results=results)
    obj["status"]["reservedFor"] = reserved(holder.uid)
    return obj


def _pod_object(
    sandbox: nri.PodSandbox,
    containers: Mapping[str, Sequence[Mapping[str, str]]],
    *,
    resource_claims: Sequence[Mapping[str, str]] = (),
    status: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod as the apiserver serves it: containers with their ``resources.claims``."""
    spec = {
        "containers": [
            {"name": n, "image": "busybox", "resources": {"claims": list(refs)}}
            for n, refs in containers.items()
        ],
        "resourceClaims": list(resource_claims),
    }
    meta: dict[str, Any] = {"name": sandbox.name, "namespace": sandbox.namespace, "uid": sandbox.uid}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": dict(status or {})}


def _extended_pod(sandbox: nri.PodSandbox, claim_name: str, **kwargs: Any) -> dict[str, Any]:
    """A pod that asked for ``gpu.example.com/gpu: 1`` in container ``app``: no claim in its
    spec; the scheduler's claim and mapping in ``status.extendedResourceClaimStatus``."""
    status = {
        "extendedResourceClaimStatus": {
            "resourceClaimName": claim_name,
            "requestMappings": [
                {
                    "containerName": "app",
                    "resourceName": f"{OTHER}/gpu",
                    "requestName": "container-0-request-0",
                }
            ],
        }
    }
    return _pod_object(sandbox, {"app": [], "sidecar": []}, status=status, **kwargs)


class OtherDriverNode:
    """The pinning node beside another DRA driver: its slices watched, pods read on the NRI path."""

    def __init__(self, node: PinningNode, host: Path, *, slices: Sequence[Mapping[str, Any]] = ()) -> None:
        self.node = node
        self.host = host
        node.world.inventory = discover(host)
        for obj in slices or (_slice(STANDARD_GPUS),):
            node.api.put_object(dict(obj))
        inventory = node.world.inventory
        self.owners = ForeignOwners(
            node.kube(), inventory=lambda: inventory, node_name=NODE, driver_name=DRIVER
        )
        self.owners.list_once()  # what its watch thread does first
        self.other: OtherDevices | None = None

    def start(self, *, read_deadline: float = 0.5, **kwargs: Any) -> FakePluginConnection:
        node = self.node
        node.start_driver()
        index, inventory = node.index, node.world.inventory
        assert index is not None
        planner = CpuPlanner(lambda: inventory)
        aligner = DeviceAligner(lambda: inventory, lambda: planner.node_shared_pool(index.claimed_cpus()))
        kube = node.kube(read_deadline=2.0)
        self.other = OtherDevices(
            kube,
            kube,
            places=self.owners.device_places,
            pci_nodes=SysfsPciNodes(self.host),
            own_driver=DRIVER,
            deadline=read_deadline,
        )
        _plugin, conn = node.start_plugin(aligner=aligner, other_devices=self.other, **kwargs)
        conn.synchronize([], pods=[TRAINER, SECOND, PLAIN])
        return conn


@pytest.fixture
def other(node: PinningNode, tmp_path: Path) -> OtherDriverNode:
    host = _host(tmp_path / "host")
    return OtherDriverNode(node, host)


def _ctr(cid: str, name: str, sandbox: nri.PodSandbox, *, cpus: float = 0, memory: int = 0) -> nri.Container:
    """A container without numadra's marker, with its CPU request and memory limit."""
    ctr = container(cid, name, ["PATH=/bin"], sandbox=sandbox.id)
    ctr.linux.resources.cpu.shares.value = int(cpus * 1024) if cpus else 2
    if memory:
        ctr.linux.resources.memory.limit.value = memory
    return ctr


def _reads(node: PinningNode, what: str) -> list[str]:
    return [r.path for r in node.api.requests if r.method == "GET" and f"/{what}/" in r.path]


def _reasons(failures: list[PinFailure]) -> list[tuple[str, str, bool]]:
    return [(f.reason, f.action, f.event) for f in failures]


def test_a_pod_holding_another_drivers_gpu_on_node_1_runs_on_node_1(other: OtherDriverNode) -> None:
    """The extended-resource pod: its ``app`` container holds gpu-1 (numaNode 1): node 1's CPUs
    and memory; its sidecar holds nothing and is left alone. One pod GET, one claim GET."""
    node = other.node
    node.put_claim(_other_claim("c-ext-1", "trainer-gpu-ext", TRAINER, ("container-0-request-0", "gpu-1")))
    node.api.put_object(_extended_pod(TRAINER, "trainer-gpu-ext"))
    conn = other.start()
    got = conn.create_container(_ctr("c-app", "app", TRAINER, cpus=2, memory=8 * GiB), pod=TRAINER)
    assert cpuset(got) == ("8-15", "1")
    side = conn.create_container(_ctr("c-side", "sidecar", TRAINER), pod=TRAINER)
    assert cpuset(side) == ("", "")
    assert _reads(node, "pods") == ["/api/v1/namespaces/ml/pods/trainer"]
    assert _reads(node, "resourceclaims") == [
        "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/trainer-gpu-ext"
    ]
    assert node.failures == []
    # it runs on shared CPUs: the planner must not hand their last one to a claim under it
    assert node.plugins[-1].handlers.pool_users() == 1


def test_each_container_gets_the_nodes_of_the_requests_it_holds(other: OtherDriverNode) -> None:
    """A direct claim (``resourceClaimName``) and one made from a template
    (``status.resourceClaimStatuses``): per container, per request, the union of its devices'."""
    node = other.node
    node.put_claim(_other_claim("c-direct", "shared-gpus", TRAINER, ("first", "gpu-0"), ("second", "gpu-1")))
    node.put_claim(_other_claim("c-tmpl", "trainer-tmpl-x7", TRAINER, ("gpu", "gpu-1")))
    node.api.put_object(
        _pod_object(
            TRAINER,
            {
                "zero": [{"name": "direct", "request": "first"}],
                "one": [{"name": "made"}],
                "both": [{"name": "direct"}],
                "none": [],
            },
            resource_claims=[
                {"name": "direct", "resourceClaimName": "shared-gpus"},
                {"name": "made", "resourceClaimTemplateName": "one-gpu"},
            ],
            status={"resourceClaimStatuses": [{"name": "made", "resourceClaimName": "trainer-tmpl-x7"}]},
        )
    )
    conn = other.start()
    placed = {
        n: cpuset(conn.create_container(_ctr(f"c-{n}", n, TRAINER), pod=TRAINER))
        for n in ("zero", "one", "both", "none")
    }
    assert placed == {"zero": ("0-7", "0"), "one": ("8-15", "1"), "both": ("0-15", "0-1"), "none": ("", "")}
    assert len(_reads(node, "pods")) == 1  # one read for the pod's four containers
    assert len(_reads(node, "resourceclaims")) == 2


@pytest.mark.parametrize(
    "numa",
    [None, {"int": -1}, {"int": [1]}, {"string": "1"}, {"int": True}, {"int": 5000}, [{"int": 1}], "1"],
    ids=["missing", "negative", "list", "string", "bool", "huge", "list-typed", "bare-string"],
)
def test_a_junk_numa_node_falls_back_to_the_pci_bus_id_through_sysfs(
    node: PinningNode, tmp_path: Path, numa: Any
) -> None:
    """Whatever the other driver wrote as numaNode, its pciBusID (upper case too) is found in
    this host's sysfs, which says node 1."""
    host = _host(tmp_path / "host")
    attributes: dict[str, Any] = {BUS: {"string": GPU_NODE1.upper()}}
    if numa is not None:
        attributes[NUMA] = numa
    other = OtherDriverNode(node, host, slices=[_slice([{"name": "gpu-1", "attributes": attributes}])])
    node.put_claim(_other_claim("c-ext-1", "gpu-ext", TRAINER, ("container-0-request-0", "gpu-1")))
    node.api.put_object(_extended_pod(TRAINER, "gpu-ext"))
    conn = other.start()
    assert cpuset(conn.create_container(_ctr("c-app", "app", TRAINER), pod=TRAINER)) == ("8-15", "1")
    assert node.failures == []


@pytest.mark.parametrize(
    ("attributes", "why"),
    [
        ({BUS: {"string": "0000:99:00.0"}}, "not a PCI device with a NUMA node on this host"),
        ({BUS: {"string": GPU_NO_NODE}}, "not a PCI device with a NUMA node on this host"),
        ({BUS: {"string": "../../../../etc"}}, "no numaNode and no pciBusID"),
        ({BUS: {"int": 3}, NUMA: {"string": "x"}}, "is not an int attribute"),
        ({}, "no numaNode and no pciBusID"),
    ],
    ids=["bus-not-here", "bus-without-node", "bus-malformed", "both-junk", "neither"],
)
def test_a_device_without_a_known_node_leaves_the_container_unconfined_and_says_why(
    node: PinningNode, tmp_path: Path, attributes: dict[str, Any], why: str
) -> None:
    host = _host(tmp_path / "host")
    other = OtherDriverNode(node, host, slices=[_slice([{"name": "gpu-1", "attributes": attributes}])])
    node.put_claim(_other_claim("c-ext-1", "gpu-ext", TRAINER, ("container-0-request-0", "gpu-1")))
    node.api.put_object(_extended_pod(TRAINER, "gpu-ext"))
    conn = other.start()
    assert cpuset(conn.create_container(_ctr("c-app", "app", TRAINER), pod=TRAINER)) == ("", "")
    assert _reasons(node.failures) == [(REASON_DEVICES_UNPLACED, "unpinned", True)]
    assert why in node.failures[0].message


def test_a_claim_on_another_nodes_pool_or_missing_places_nothing(other: OtherDriverNode) -> None:
    """The pod's status names a claim that does not exist, and a claim whose device is in
    another node's pool: nothing is placed, nothing crashes, the reasons are said."""
    node = other.node
    away = _other_claim("c-away", "away", TRAINER)
    away["status"]["allocation"]["devices"]["results"] = [
        {"request": "gpu", "driver": OTHER, "pool": "node-b", "device": "gpu-1"}
    ]
    node.put_claim(away)
    node.api.put_object(
        _pod_object(
            TRAINER,
            {"away": [{"name": "away"}], "ghost": [{"name": "ghost"}]},
            resource_claims=[
                {"name": "away", "resourceClaimName": "away"},
                {"name": "ghost", "resourceClaimTemplateName": "t"},
            ],
            status={"resourceClaimStatuses": [{"name": "ghost", "resourceClaimName": "never-made"}]},
        )
    )
    conn = other.start()
    assert cpuset(conn.create_container(_ctr("c-away", "away", TRAINER), pod=TRAINER)) == ("", "")
    assert cpuset(conn.create_container(_ctr("c-ghost", "ghost", TRAINER), pod=TRAINER)) == ("", "")
    assert [f.reason for f in node.failures] == [REASON_DEVICES_UNPLACED] * 2
    assert "another node's pool" in node.failures[0].message
    assert "claim never-made: not found" in node.failures[1].message


def test_a_claim_not_reserved_for_the_pod_places_nothing(other: OtherDriverNode) -> None:
    """A pod spec can name any claim of its namespace; only one reserved for it counts."""
    node = other.node
    node.put_claim(_other_claim("c-theirs", "theirs", SECOND, ("gpu", "gpu-1")))
    node.api.put_object(
        _pod_object(
            TRAINER, {"app": [{"name": "g"}]}, resource_claims=[{"name": "g", "resourceClaimName": "theirs"}]
        )
    )
    conn = other.start()
    assert cpuset(conn.create_container(_ctr("c-app", "app", TRAINER), pod=TRAINER)) == ("", "")
    assert "not reserved for this pod" in node.failures[0].message


def test_a_slow_apiserver_leaves_the_container_unconfined_inside_the_time_box(other: OtherDriverNode) -> None:
    """The pod GET takes 3 s; the read's deadline is 0.3 s: the container is created at once
    (no adjustment, not refused), counted without an Event; the pod's next container does not
    wait again."""
    node = other.node
    node.put_claim(_other_claim("c-ext-1", "gpu-ext", TRAINER, ("container-0-request-0", "gpu-1")))
    node.api.put_object(_extended_pod(TRAINER, "gpu-ext"))
    node.api.add_latency(3.0, method="GET", path_contains="/pods/")
    conn = other.start(read_deadline=0.3)
    got = conn.create_container(_ctr("c-app", "app", TRAINER), pod=TRAINER, timeout=2.0)
    assert cpuset(got) == ("", "")
    side = conn.create_container(_ctr("c-side", "sidecar", TRAINER), pod=TRAINER, timeout=2.0)
    assert cpuset(side) == ("", "")
    assert len(_reads(node, "pods")) == 1
    assert _reasons(node.failures) == [(REASON_DEVICES_UNREAD, "unpinned", False)] * 2
    assert (
        "took" in node.failures[0].message
        or "timed out" in node.failures[0].message.lower()
        or "deadline" in node.failures[0].message
    )


def test_without_get_on_pods_the_containers_run_unconfined_and_it_is_said_once(
    other: OtherDriverNode,
) -> None:
    """RBAC without ``get pods`` (no rbac.readPods): a 403, then no more pod reads for a while;
    every container is created unconfined and counted, none gets an Event."""
    node = other.node
    node.put_claim(_other_claim("c-ext-1", "gpu-ext", TRAINER, ("container-0-request-0", "gpu-1")))
    node.api.put_object(_extended_pod(TRAINER, "gpu-ext"))
    node.api.put_object(_extended_pod(SECOND, "gpu-ext"))
    node.api.inject_fault(Fault(403, method="GET", path_contains="/pods/", times=100))
    conn = other.start()
    assert cpuset(conn.create_container(_ctr("c-a", "app", TRAINER), pod=TRAINER)) == ("", "")
    assert cpuset(conn.create_container(_ctr("c-b", "app", SECOND), pod=SECOND)) == ("", "")
    assert len(_reads(node, "pods")) == 1
    assert _reasons(node.failures) == [(REASON_DEVICES_UNREAD, "unpinned", False)] * 2
    assert "forbidden" in node.failures[1].message


def test_pods_cost_no_read_without_another_driver_or_with_alignment_off(
    node: PinningNode, tmp_path: Path
) -> None:
    """No other driver's device on this node: no pod is read. The annotation off: not either."""
    host = _host(tmp_path / "host")
    other = OtherDriverNode(node, host, slices=[_slice([], name="empty")])
    conn = other.start()
    assert cpuset(conn.create_container(_ctr("c-p", "app", PLAIN), pod=PLAIN)) == ("", "")
    assert _reads(node, "pods") == []


def test_the_align_annotation_off_reads_nothing(other: OtherDriverNode) -> None:
    node = other.node
    off = pod("sb-off", "7c1d0e4a-4444-4c3a-9e8f-00000000000d", name="off", namespace="ml")
    off.annotations[ALIGN_ANNOTATION] = "off"
    conn = other.start()
    assert cpuset(conn.create_container(_ctr("c-off", "app", off), pod=off)) == ("", "")
    assert _reads(node, "pods") == []


def test_thousands_of_devices_are_bounded_and_the_pods_gpu_is_found(
    node: PinningNode, tmp_path: Path
) -> None:
    """4,000 devices in the other driver's slices, the pod's among the last: placed; the places
    are built once for the slices' version, not per pod."""
    host = _host(tmp_path / "host")
    many = [_device(f"gpu-{i}", **{NUMA: {"int": i % 2}}) for i in range(4000)]
    other = OtherDriverNode(node, host, slices=[_slice(many[:2000], name="a"), _slice(many[2000:], name="b")])
    node.put_claim(_other_claim("c-ext-1", "gpu-ext", TRAINER, ("container-0-request-0", "gpu-3999")))
    node.api.put_object(_extended_pod(TRAINER, "gpu-ext"))
    conn = other.start()
    assert cpuset(conn.create_container(_ctr("c-app", "app", TRAINER), pod=TRAINER)) == ("8-15", "1")
    assert other.owners.device_places() is other.owners.device_places()  # kept until a slice changes
    assert len(other.owners.device_places().places) == 4000


def test_concurrent_containers_of_one_pod_cost_one_read(other: OtherDriverNode) -> None:
    """Two containers of a pod created at once, the pod GET slowed: one read answers both."""
    node = other.node
    node.put_claim(_other_claim("c-ext-1", "gpu-ext", TRAINER, ("container-0-request-0", "gpu-1")))
    pod_obj = _extended_pod(TRAINER, "gpu-ext")
    pod_obj["status"]["extendedResourceClaimStatus"]["requestMappings"].append(
        {"containerName": "sidecar", "resourceName": f"{OTHER}/gpu", "requestName": "container-0-request-0"}
    )
    node.api.put_object(pod_obj)
    node.api.add_latency(0.15, method="GET", path_contains="/pods/")
    conn = other.start()
    got: dict[str, tuple[str, str]] = {}
    start = threading.Barrier(2)

    def create(name: str) -> None:
        start.wait()
        got[name] = cpuset(conn.create_container(_ctr(f"c-{name}", name, TRAINER), pod=TRAINER))

    threads = [threading.Thread(target=create, args=(n,)) for n in ("app", "sidecar")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert got == {"app": ("8-15", "1"), "sidecar": ("8-15", "1")}
    assert len(_reads(node, "pods")) == 1


def test_busy_reads_and_a_spent_time_box_create_the_containers_unconfined(other: OtherDriverNode) -> None:
    """One read slot; the pod GET outlasts the NRI time box. The first container's answer is
    the fallback when its box runs out; a second pod's container, while that read still holds
    the slot, gets it at once: both created unconfined, neither refused (a claim container
    would be refused here: these hold nothing of numadra's to protect)."""
    node = other.node
    node.put_claim(_other_claim("c-ext-1", "gpu-ext", TRAINER, ("container-0-request-0", "gpu-1")))
    node.api.put_object(_extended_pod(TRAINER, "gpu-ext"))
    node.api.put_object(_extended_pod(SECOND, "gpu-ext"))
    node.api.add_latency(1.5, method="GET", path_contains="/pods/")
    conn = other.start(read_deadline=3.0, read_slots=ReadSlots(per_namespace=1, total=1))
    plugin = node.plugins[-1]
    first: list[nri.CreateContainerResponse] = []
    thread = threading.Thread(
        target=lambda: first.append(conn.create_container(_ctr("c-a", "app", TRAINER), pod=TRAINER))
    )
    thread.start()
    wait_for(lambda: plugin.read_slots.in_flight("ml") == 1, 5.0, "the first pod's read to hold its slot")
    second = conn.create_container(_ctr("c-b", "app", SECOND), pod=SECOND)
    thread.join(10)
    assert cpuset(second) == ("", "") and cpuset(first[0]) == ("", "")
    messages = sorted(f.message for f in node.failures)
    assert [f.reason for f in node.failures] == [REASON_DEVICES_UNREAD] * 2
    assert any("reads of the apiserver in flight" in m for m in messages)
    assert any("time box" in m for m in messages)
