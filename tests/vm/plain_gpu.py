"""A plain GPU pod on the VM's real kernel, placed by numadra's NRI plugin (guest side).

The pod asks for ``nvidia.com/gpu: 1`` in each of its two containers and for no CPUs of numadra:
the scheduler's extended-resource claim holds one GPU per container (``container-<i>-request-0``),
GPU0 on node 0 and GPU1 on node 1. Each container must run on its own GPU's node: ``cpuset.cpus``
the node's CPUs, ``cpuset.mems`` the node. Everything runs in the guest, in this order:

* **the node** (:func:`host_tree`): a host tree whose CPU and NUMA part *is* the kernel's (its
  ``/sys/devices/system``, ``/sys/kernel/mm/hugepages`` and ``/proc/meminfo`` bind-mounted in),
  with stand-in PCI entries for the two GPUs from the host-tree generator the other tiers use (a
  VM has no GPU to pass through). numadra's discovery reads it as ``numadra run --host-root``
  would: its CPUs, nodes, SLIT and memory are the kernel's own;
* **the apiserver**: the harness's stand-in (:class:`~harness.fakeapiserver.FakeApiServer`) on the
  guest's loopback, holding the Pod (its ``status.extendedResourceClaimStatus``) and the claim. The
  kubelet's reads (the pod, the claim) and numadra's (the claim at prepare; the consumer reads of
  the NRI path, which the pod's recorded reservation answers without one) go to it over real HTTP;
* **numadra**: its claims driver, prepared-claims index, CPU planner (with the node shared pool),
  consumer check and NRI plugin with the device aligner, wired as ``numadra run --pinning nri``
  wires them (``driver.app``), in this process; the claim is prepared through the kubelet layer's
  claim path (read, check, lock, driver call), as the kubelet's NodePrepareResources is served;
* **the runtime** (:class:`~harness.fake_nri_runtime.FakeNriRuntime`, containerd's stand-in): each
  container gets the env of the CDI devices the prepare returned for its request (the kubelet maps
  requests to containers from the pod's status), CreateContainer goes to the plugin over the NRI
  wire protocol, and the adjustment's ``cpuset.cpus`` and ``cpuset.mems`` are written into a new
  cgroup v2 of the guest, which the container's process joins before it execs its workload
  (:mod:`tests.vm.probe`), as runc does.

The plugin's time box is widened to :data:`TIME_BOX_S`: under TCG the guest runs many times
slower than the hardware numadra's 1 s box is sized for (``numadra discover`` takes about 1 s on
the CI host and most of the guest's 28 s discover step), and the box itself is tested in the
integration tier.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.vm import probe

if TYPE_CHECKING:
    from driver.claims import ClaimsDriver
    from driver.inventory.model import Inventory
    from driver.kube.client import KubeClient
    from driver.kubelet.serialize import SerializeLock
    from driver.pinning.factory import NriService
    from driver.pinning.failures import PinFailure
    from driver.state.index import PreparedIndex

__all__ = ["CONTAINERS", "GPUS", "MEMORY_LIMIT", "StandInGpu", "plain_gpu_facts"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
DRIVER = "numadra.dev"
NODE_NAME = "numadra-vm"
NAMESPACE = "ml"
POD_NAME = "trainer"
POD_UID = "0b6f3d52-5a5a-4c3a-9e8f-00000000a11c"
CLAIM_NAME = "trainer-extended-resources-vm7qz"
CLAIM_UID = "5a6b7c8d-0d1b-4c3a-9e8f-00000000a11c"
#: the plugin's time box (seconds) and the runtime's NRI request timeout (ms) in the guest
TIME_BOX_S = 30.0
RUNTIME_TIMEOUT_MS = 60_000
#: each container asks for one CPU and is limited to this much memory (fits either CPU node)
MEMORY_LIMIT = 256 << 20
#: numadra's NRI path and the harness's runtime, imported first so the step's timing shows what
#: the imports cost apart from the work (each phase imports what it uses, too)
_TIMED_IMPORTS = (
    "driver.claims.consumers",
    "driver.kubelet.claims",
    "driver.pinning.factory",
    "driver.state.index",
    "harness.fake_nri_runtime",
    "harness.hosttree",
)
#: the kernel's view that replaces the generated one in the host tree
REAL_PARTS = ("sys/devices/system", "sys/kernel/mm/hugepages", "proc/meminfo")


@dataclass(frozen=True)
class StandInGpu:
    """A GPU that exists only as sysfs and procfs entries of the host tree."""

    bus_id: str
    numa_node: int
    minor: int

    @property
    def device_name(self) -> str:
        """numadra's device name for it (``gpu-0000-af-00-0``)."""
        return "gpu-" + self.bus_id.replace(":", "-").replace(".", "-")


GPUS = (StandInGpu("0000:3b:00.0", 0, 0), StandInGpu("0000:af:00.0", 1, 1))
#: container name -> the GPU its ``nvidia.com/gpu: 1`` got
CONTAINERS = {f"gpu-{i}": gpu for i, gpu in enumerate(GPUS)}


def _request(index: int) -> str:
    return f"container-{index}-request-0"


def loopback_up() -> None:
    """Bring ``lo`` up (what ifupdown's ``auto lo`` does; the guest has no network set-up)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        (flags,) = struct.unpack_from("H", fcntl.ioctl(sock, siocgifflags, request), 16)
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


@contextmanager
def host_tree(root: Path) -> Iterator[Path]:
    """The node's host tree (module docstring): the kernel's CPU/NUMA part, stand-in GPUs."""
    from harness.hosttree import GpuSpec, Topology, write_host_tree

    dmi = Path("/sys/devices/virtual/dmi/id/product_name")
    product = dmi.read_text().strip() if dmi.exists() else "QEMU"
    spec = Topology(
        name="vm-stand-in-gpus",
        sockets=1,
        cores_per_socket=1,
        gpus=tuple(
            GpuSpec(
                g.bus_id, numa_node=g.numa_node, nvidia_minor=g.minor, product_name="NVIDIA H100 (stand-in)"
            )
            for g in GPUS
        ),
        kernel=os.uname().release,
        product=product,
    )
    write_host_tree(root, spec)
    with ExitStack() as mounts:
        for rel in REAL_PARTS:
            target, source = root / rel, Path("/") / rel
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
            else:
                target.write_text("")
            subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
            mounts.callback(subprocess.run, ["umount", str(target)], check=False)
        yield root


def _pod() -> dict[str, Any]:
    """The Pod as the apiserver holds it once the scheduler made its extended-resource claim."""
    containers = [
        {"name": name, "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        for name in CONTAINERS
    ]
    mappings = [
        {"containerName": name, "resourceName": "nvidia.com/gpu", "requestName": _request(i)}
        for i, name in enumerate(CONTAINERS)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD_NAME, "namespace": NAMESPACE, "uid": POD_UID},
        "spec": {"nodeName": NODE_NAME, "containers": containers},
        "status": {
            "extendedResourceClaimStatus": {"resourceClaimName": CLAIM_NAME, "requestMappings": mappings}
        },
    }


def _claim() -> dict[str, Any]:
    """The scheduler's claim for the pod's ``nvidia.com/gpu`` limits: one request per container."""
    requests = [
        {"name": _request(i), "exactly": {"deviceClassName": "nvidia-gpu.numadra.dev", "count": 1}}
        for i in range(len(GPUS))
    ]
    results = [
        {"request": _request(i), "driver": DRIVER, "pool": NODE_NAME, "device": g.device_name}
        for i, g in enumerate(GPUS)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": CLAIM_NAME,
            "namespace": NAMESPACE,
            "uid": CLAIM_UID,
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": POD_NAME, "uid": POD_UID}],
        },
        "spec": {"devices": {"requests": requests}},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": POD_NAME, "uid": POD_UID}],
        },
    }


def cdi_env(cdi_dir: Path, cdi_ids: list[str]) -> list[str]:
    """The env a CDI-aware runtime gives a container for these CDI device IDs: each spec's
    ``containerEdits`` then the device's, from the specs in ``cdi_dir``."""
    wanted = [tuple(i.split("=", 1)) for i in cdi_ids]
    env: list[str] = []
    for path in sorted(cdi_dir.glob("*.json")):
        spec = json.loads(path.read_text())
        for device in spec["devices"]:
            if (spec["kind"], device["name"]) in wanted:
                env += spec.get("containerEdits", {}).get("env", [])
                env += device.get("containerEdits", {}).get("env", [])
    return env


@dataclass(frozen=True)
class LoopbackAccess:
    """The cluster access (:class:`driver.kube.client.ClusterAccess`) of the apiserver stand-in on
    the guest's loopback: plain HTTP, no credentials.

    numadra in a pod never loads a kubeconfig: it reads its in-cluster settings (an address, a
    CA, a service account token) without the official ``kubernetes`` client, which only the
    kubeconfig path imports (0.9 s on the CI host, several seconds under TCG). The stand-in
    speaks plain HTTP without credentials, so the client is handed its address the same way;
    every request still goes through numadra's own client and transport.
    """

    port: int

    @property
    def settings(self) -> Any:
        from driver.kube.transport import TransportSettings

        return TransportSettings(scheme="http", host="127.0.0.1", port=self.port)

    def headers(self) -> dict[str, str]:
        return {}


class _Timer:
    """Seconds per phase of the step, for the report."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[phase] = round(now - self._last, 3)
        self._last = now


@dataclass
class _Numadra:
    """numadra's parts of the node, wired as ``numadra run --pinning nri`` wires them."""

    claims: ClaimsDriver
    lock: SerializeLock
    index: PreparedIndex
    service: NriService
    failures: list[PinFailure]


def _numadra(stack: ExitStack, inventory: Inventory, kube: KubeClient, base: Path) -> _Numadra:
    """The claims driver, the prepared-claims index, the planner with the node shared pool and
    the NRI plugin with the consumer check and the device aligner (``driver.app``); not started."""
    from driver.claims import ClaimsDriver, claims_journal
    from driver.claims.consumers import ApiConsumerReader, ApiPodGroupReader, ConsumerRecords
    from driver.kubelet.paths import SERIALIZE_LOCK_NAME
    from driver.kubelet.serialize import SerializeLock
    from driver.pinning.align import DeviceAligner
    from driver.pinning.binding import binding_lookup
    from driver.pinning.consumers import READ_DEADLINE_S, ConsumerCheck
    from driver.pinning.factory import NriService
    from driver.pinning.nri import NriPlugin
    from driver.pinning.nri.plugin import PINNER_LOCK_NAME
    from driver.pinning.planner import CpuPlanner
    from driver.state.index import PreparedIndex

    def current() -> Inventory:
        return inventory

    cdi_dir, plugin_dir = base / "cdi", base / "plugin"
    planner = CpuPlanner(current, shared_pool=True)
    claims = ClaimsDriver(
        driver_name=DRIVER,
        node_name=NODE_NAME,
        inventory=current,
        cdi_dir=cdi_dir,
        plugin_dir=plugin_dir,
        journal=claims_journal(cdi_dir=cdi_dir, plugin_dir=plugin_dir, driver_name=DRIVER, pool=NODE_NAME),
        planner=planner,
    )
    stack.callback(claims.close)
    lock = SerializeLock(plugin_dir / SERIALIZE_LOCK_NAME)
    lock.open()
    stack.callback(lock.close)
    with lock.hold():
        claims.reconcile()
    index = PreparedIndex(claims.prepared_claims, claims.journal_changes)
    index.refresh()
    records = ConsumerRecords(claims, hold=lock.hold, on_change=index.invalidate)
    stack.callback(records.close)

    def node_shared() -> frozenset[int]:
        return planner.node_shared_pool(index.claimed_cpus())

    failures: list[PinFailure] = []
    plugin = NriPlugin(
        claim_lookup=binding_lookup(index.view, current),
        node_shared_pool=node_shared,
        socket_path=base / "nri.sock",
        leader_lock=plugin_dir / PINNER_LOCK_NAME,
        consumers=ConsumerCheck(
            ApiConsumerReader(kube, deadline=READ_DEADLINE_S),
            records.record,
            pod_groups=ApiPodGroupReader(kube, deadline=READ_DEADLINE_S),
        ),
        on_failure=failures.append,
        aligner=DeviceAligner(current, node_shared),
        handler_budget_s=TIME_BOX_S,
    )
    planner.watch_pool(plugin.handlers.pool_users)
    return _Numadra(claims, lock, index, NriService(plugin), failures)


def _kubelet_prepares(stack: ExitStack, kube: KubeClient, node: _Numadra) -> dict[str, list[str]]:
    """The kubelet's part: read the pod and its extended-resource claim, have numadra prepare the
    claim (through the kubelet layer's claim path), map each request's CDI devices to the
    container the pod's status names for it. Container name -> CDI device IDs."""
    from driver.kubelet import claims as claim_layer
    from driver.plugin import ClaimRef

    status = kube.get_pod(NAMESPACE, POD_NAME)["status"]["extendedResourceClaimStatus"]
    claim = kube.get_resource_claim(NAMESPACE, status["resourceClaimName"])
    ref = ClaimRef(NAMESPACE, claim["metadata"]["name"], claim["metadata"]["uid"])
    fetcher = claim_layer.ClaimFetcher(kube)
    stack.callback(fetcher.close)
    prepared = claim_layer.prepare(node.claims, fetcher, node.lock.hold, [ref])[ref.uid]
    if not prepared.ok:
        raise RuntimeError(f"prepare of {ref.name}: {prepared.error}")
    node.index.invalidate()  # as numadra run does after every prepare
    by_request = {m["requestName"]: m["containerName"] for m in status["requestMappings"]}
    cdi_ids: dict[str, list[str]] = {name: [] for name in CONTAINERS}
    for device in prepared.devices:
        for request in device.request_names:
            cdi_ids[by_request[request]] += device.cdi_device_ids
    return cdi_ids


def _runtime_creates(
    stack: ExitStack, node: _Numadra, base: Path, cdi_ids: dict[str, list[str]]
) -> dict[str, dict[str, Any]]:
    """The runtime's part: connect the plugin, then create each container with its CDI env, a
    1-CPU request and :data:`MEMORY_LIMIT`. Container name -> its env and the adjusted cpuset."""
    from harness.fake_nri_runtime import FakeNriRuntime, container, pod

    runtime = FakeNriRuntime(base / "nri.sock")
    stack.callback(runtime.close)
    node.service.start()
    try:
        conn = runtime.accept(timeout=TIME_BOX_S)
    except BaseException:
        node.service.stop()
        raise
    stack.callback(conn.close)
    stack.callback(node.service.stop)  # first: a plugin left connected would dial the runtime again
    conn.configure(request_timeout_ms=RUNTIME_TIMEOUT_MS, timeout=TIME_BOX_S)
    sandbox = pod("sb-trainer", POD_UID, name=POD_NAME, namespace=NAMESPACE)
    conn.synchronize([], pods=[sandbox], timeout=TIME_BOX_S)
    created: dict[str, dict[str, Any]] = {}
    for name, ids in cdi_ids.items():
        env = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", *cdi_env(base / "cdi", ids)]
        ctr = container(f"ctr-{name}", name, env, sandbox=sandbox.id)
        ctr.linux.resources.cpu.shares.value = 1024  # the kubelet's shares for a 1-CPU request
        ctr.linux.resources.memory.limit.value = MEMORY_LIMIT
        started = time.monotonic()
        adjusted = conn.create_container(ctr, timeout=RUNTIME_TIMEOUT_MS / 1000, pod=sandbox)
        cpu = adjusted.adjust.linux.resources.cpu
        created[name] = {
            "env": env,
            "adjustment": {"cpus": cpu.cpus, "mems": cpu.mems},
            "create_container_s": round(time.monotonic() - started, 3),
        }
    return created


def _runc_runs(containers: dict[str, dict[str, Any]]) -> None:
    """runc's part: each container's cgroup gets its adjusted cpuset, its process joins it and
    then execs the workload; both run at once. Adds what each process saw to its facts."""
    (CGROUP_ROOT / "cgroup.subtree_control").write_text("+cpuset")
    children: dict[str, subprocess.Popen[str]] = {}
    try:
        for name, facts in containers.items():
            cgroup = CGROUP_ROOT / f"numadra-vm-{name}"
            cgroup.mkdir()
            (cgroup / "cpuset.cpus").write_text(facts["adjustment"]["cpus"])
            (cgroup / "cpuset.mems").write_text(facts["adjustment"]["mems"])
            children[name] = child = probe.spawn(dict(e.split("=", 1) for e in facts["env"]))
            facts["outside"] = probe.allowed(child.pid)
            (cgroup / "cgroup.procs").write_text(str(child.pid))
            facts["cgroup"] = {f: (cgroup / f).read_text().strip() for f in ("cpuset.cpus", "cpuset.mems")}
        for child in children.values():
            probe.release(child)
        for name, child in children.items():
            containers[name].update(probe.measure(child))
    finally:
        for child in children.values():
            child.kill()
            child.wait(timeout=30)
        for name in containers:
            probe.remove_cgroup(CGROUP_ROOT / f"numadra-vm-{name}")


def plain_gpu_facts(work: Path) -> dict[str, Any]:
    """Place the plain GPU pod's containers through the NRI plugin and run them (module docstring)."""
    timer = _Timer()
    from driver.inventory.discovery import discover
    from driver.kube.client import KubeClient
    from harness.fakeapiserver import FakeApiServer

    for module in _TIMED_IMPORTS:
        importlib.import_module(module)
    timer.lap("imports")
    base = work / "plain-gpu"
    (base / "cdi").mkdir(parents=True)
    (base / "plugin").mkdir()
    facts: dict[str, Any] = {}
    with ExitStack() as stack:
        inventory = discover(stack.enter_context(host_tree(base / "host")), use_nvml=False)
        facts["inventory"] = {
            "gpus": {g.name: g.pci.numa_node for g in inventory.gpus},
            "nodes": {str(n.id): list(n.cpus) for n in inventory.numa_nodes},
        }
        timer.lap("host tree and discovery")
        loopback_up()
        api = FakeApiServer()
        api.start()
        stack.callback(api.close)
        api.put_object(_pod())
        api.put_object(_claim())
        kube = KubeClient(
            in_cluster=LoopbackAccess(api.port),  # type: ignore[arg-type]
            timeout=30.0,
            connect_timeout=10.0,
            read_deadline=30.0,
        )
        kube.configure()
        stack.callback(kube.close)
        node = _numadra(stack, inventory, kube, base)
        timer.lap("numadra wired")
        facts["cdi_ids"] = cdi_ids = _kubelet_prepares(stack, kube, node)
        timer.lap("prepare")
        facts["containers"] = containers = _runtime_creates(stack, node, base, cdi_ids)
        facts["failures"] = [f"{f.reason} {f.action}: {f.message}" for f in node.failures]
        timer.lap("nri handshake and create containers")
        _runc_runs(containers)
        timer.lap("containers ran")
        facts["apiserver_requests"] = [f"{r.method} {r.path}" for r in api.requests]
    facts["seconds"] = timer.seconds
    return facts
