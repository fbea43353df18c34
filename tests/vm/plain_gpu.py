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
from typing import Any

from tests.vm import probe

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

    product = Path("/sys/devices/virtual/dmi/id/product_name").read_text().strip()
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
        {"name": _request(i), "exactly": {"deviceClassName": "gpu.numadra.dev", "count": 1}}
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


def plain_gpu_facts(work: Path) -> dict[str, Any]:
    """Place the plain GPU pod's containers through the NRI plugin and run them (module docstring)."""
    timer = _Timer()
    from driver.claims import ClaimsDriver, claims_journal
    from driver.claims.consumers import ApiConsumerReader, ApiPodGroupReader, ConsumerRecords
    from driver.inventory.discovery import discover
    from driver.kube.client import KubeClient
    from driver.kubelet import claims as claim_layer
    from driver.kubelet.paths import SERIALIZE_LOCK_NAME
    from driver.kubelet.serialize import SerializeLock
    from driver.pinning.align import DeviceAligner
    from driver.pinning.binding import binding_lookup
    from driver.pinning.consumers import READ_DEADLINE_S, ConsumerCheck
    from driver.pinning.factory import NriService
    from driver.pinning.failures import PinFailure
    from driver.pinning.nri import NriPlugin
    from driver.pinning.nri.plugin import PINNER_LOCK_NAME
    from driver.pinning.planner import CpuPlanner
    from driver.plugin import ClaimRef
    from driver.state.index import PreparedIndex
    from harness.fake_nri_runtime import FakeNriRuntime, container, pod
    from harness.fakeapiserver import FakeApiServer

    timer.lap("imports")
    base = work / "plain-gpu"
    cdi_dir, plugin_dir = base / "cdi", base / "plugin"
    cdi_dir.mkdir(parents=True)
    plugin_dir.mkdir()
    facts: dict[str, Any] = {}
    with ExitStack() as stack:
        tree = stack.enter_context(host_tree(base / "host"))
        inventory = discover(tree, use_nvml=False)
        facts["inventory"] = {
            "gpus": {g.name: g.pci.numa_node for g in inventory.gpus},
            "nodes": {str(n.id): list(n.cpus) for n in inventory.numa_nodes},
        }
        timer.lap("host tree and discovery")

        def current() -> Any:
            return inventory

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

        # numadra run --pinning nri, as driver.app builds it
        planner = CpuPlanner(current, shared_pool=True)
        claims = ClaimsDriver(
            driver_name=DRIVER,
            node_name=NODE_NAME,
            inventory=current,
            cdi_dir=cdi_dir,
            plugin_dir=plugin_dir,
            journal=claims_journal(
                cdi_dir=cdi_dir, plugin_dir=plugin_dir, driver_name=DRIVER, pool=NODE_NAME
            ),
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
        service = NriService(plugin)
        timer.lap("numadra wired")

        # the kubelet: the pod's extended-resource claim, prepared through numadra's claim path
        status = kube.get_pod(NAMESPACE, POD_NAME)["status"]["extendedResourceClaimStatus"]
        claim_obj = kube.get_resource_claim(NAMESPACE, status["resourceClaimName"])
        ref = ClaimRef(NAMESPACE, CLAIM_NAME, claim_obj["metadata"]["uid"])
        fetcher = claim_layer.ClaimFetcher(kube)
        stack.callback(fetcher.close)
        prepared = claim_layer.prepare(claims, fetcher, lock.hold, [ref])[ref.uid]
        if not prepared.ok:
            raise RuntimeError(f"prepare of {CLAIM_NAME}: {prepared.error}")
        index.invalidate()  # as numadra run does after every prepare
        by_request = {m["requestName"]: m["containerName"] for m in status["requestMappings"]}
        cdi_ids: dict[str, list[str]] = {name: [] for name in CONTAINERS}
        for device in prepared.devices:
            for request in device.request_names:
                cdi_ids[by_request[request]] += device.cdi_device_ids
        facts["cdi_ids"] = cdi_ids
        timer.lap("prepare")

        # the runtime: NRI handshake, then each container's creation
        runtime = FakeNriRuntime(base / "nri.sock")
        stack.callback(runtime.close)
        service.start()
        try:
            conn = runtime.accept(timeout=TIME_BOX_S)
        except BaseException:
            service.stop()
            raise
        stack.callback(conn.close)
        stack.callback(service.stop)  # first: a plugin left connected would dial the runtime again
        conn.configure(request_timeout_ms=RUNTIME_TIMEOUT_MS, timeout=TIME_BOX_S)
        sandbox = pod("sb-trainer", POD_UID, name=POD_NAME, namespace=NAMESPACE)
        conn.synchronize([], pods=[sandbox], timeout=TIME_BOX_S)
        timer.lap("nri handshake")
        facts["containers"] = containers = {}
        envs: dict[str, list[str]] = {}
        for i, name in enumerate(CONTAINERS):
            envs[name] = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", *cdi_env(cdi_dir, cdi_ids[name])]
            ctr = container(f"ctr-{name}", name, envs[name], sandbox=sandbox.id)
            ctr.linux.resources.cpu.shares.value = 1024  # the kubelet's shares for a 1-CPU request
            ctr.linux.resources.memory.limit.value = MEMORY_LIMIT
            started = time.monotonic()
            adjusted = conn.create_container(ctr, timeout=RUNTIME_TIMEOUT_MS / 1000, pod=sandbox)
            cpu = adjusted.adjust.linux.resources.cpu
            containers[name] = {
                "index": i,
                "env": envs[name],
                "adjustment": {"cpus": cpu.cpus, "mems": cpu.mems},
                "create_container_s": round(time.monotonic() - started, 3),
            }
        facts["failures"] = [f"{f.reason} {f.action}: {f.message}" for f in failures]
        timer.lap("create containers")

        # runc: each container's cgroup gets the adjusted cpuset, its process joins, then execs
        (CGROUP_ROOT / "cgroup.subtree_control").write_text("+cpuset")
        children: dict[str, subprocess.Popen[str]] = {}
        try:
            for name, ctr_facts in containers.items():
                cgroup = CGROUP_ROOT / f"numadra-vm-{name}"
                cgroup.mkdir()
                (cgroup / "cpuset.cpus").write_text(ctr_facts["adjustment"]["cpus"])
                (cgroup / "cpuset.mems").write_text(ctr_facts["adjustment"]["mems"])
                children[name] = child = probe.spawn(dict(e.split("=", 1) for e in envs[name]))
                ctr_facts["outside"] = probe.allowed(child.pid)
                (cgroup / "cgroup.procs").write_text(str(child.pid))
                ctr_facts["cgroup"] = {
                    f: (cgroup / f).read_text().strip() for f in ("cpuset.cpus", "cpuset.mems")
                }
            for child in children.values():  # the pod's containers start together
                probe.release(child)
            for name, child in children.items():
                containers[name].update(probe.measure(child))
        finally:
            for child in children.values():
                child.kill()
                child.wait(timeout=30)
            for name in containers:
                probe.remove_cgroup(CGROUP_ROOT / f"numadra-vm-{name}")
        timer.lap("containers ran")
        facts["apiserver_requests"] = [f"{r.method} {r.path}" for r in api.requests]
    facts["seconds"] = timer.seconds
    return facts
