"""A small node for claims tests: inventory, claim builders, and a fake claim source.

``FakeClaimGetter`` stands in for the apiserver where a real one cannot exist in a unit-sized test
(one test goes through the real HTTP fake apiserver as well). :meth:`World.driver` serves the real
:class:`ClaimsDriver` through the real kubelet-layer claim path (:mod:`driver.kubelet.claims`:
reference checks, reads, claim checks, lock, driver call), the one ``KubeletPluginServer`` runs for
every call, without the gRPC wrapping, so these tests keep exercising the real read path.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.claims import ClaimsDriver, claims_journal
from driver.claims.parts import NO_PINNING
from driver.errors import KubeError
from driver.inventory.model import Cpu, Gpu, Inventory, Nic, NumaNode, PciTopology
from driver.kube.types import JsonObject
from driver.kubelet import claims as claim_layer
from driver.pinning.planner import CpuPlanner
from driver.plugin import ClaimRef, PrepareResult

DRIVER = "numadra.dev"
NODE = "node-a"
GPU0 = "gpu-0000-3b-00-0"
GPU1 = "gpu-0000-af-00-0"
NIC0 = "nic-0000-3c-00-0"
NIC1 = "nic-0000-b0-00-0"
CPU0 = "cpu-numa0"
CPU1 = "cpu-numa1"


def _cpus() -> tuple[Cpu, ...]:
    out = []
    for cpu_id in range(16):
        node = cpu_id // 8
        core = cpu_id // 2
        first = core * 2
        out.append(
            Cpu(
                id=cpu_id,
                core_id=core,
                package_id=node,
                die_id=0,
                numa_node=node,
                l3_id=node,
                thread_siblings=(first, first + 1),
            )
        )
    return tuple(out)


def make_inventory(*, with_gpu1: bool = True, nic0_interface: str = "eth1") -> Inventory:
    """2 NUMA nodes x 8 CPUs, one NVIDIA GPU and one NIC per node (NIC0 with RDMA)."""
    gpus = [
        Gpu(
            name=GPU0,
            pci=PciTopology("0000:3b:00.0", "pci0000:3a", 0),
            vendor="nvidia",
            vendor_id=0x10DE,
            device_id=0x2330,
            pci_class=0x030200,
            index=0,
            product_name="NVIDIA H100",
            minor=0,
            device_nodes=("/dev/nvidia0", "/dev/nvidiactl"),
        )
    ]
    if with_gpu1:
        gpus.append(
            Gpu(
                name=GPU1,
                pci=PciTopology("0000:af:00.0", "pci0000:ae", 1),
                vendor="nvidia",
                vendor_id=0x10DE,
                device_id=0x2330,
                pci_class=0x030200,
                index=1,
                minor=1,
                device_nodes=("/dev/nvidia1", "/dev/nvidiactl"),
            )
        )
    nics = (
        Nic(
            name=NIC0,
            pci=PciTopology("0000:3c:00.0", "pci0000:3a", 0),
            interface_name=nic0_interface,
            mac_address="b8:ce:f6:00:00:01",
            driver="mlx5_core",
            speed_mbps=100000,
            sriov_vf=False,
            pf_bus_id=None,
            sriov_total_vfs=0,
            rdma_devices=("mlx5_0",),
            device_nodes=("/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"),
        ),
        Nic(
            name=NIC1,
            pci=PciTopology("0000:b0:00.0", "pci0000:ae", 1),
            interface_name="eth2",
            mac_address="b8:ce:f6:00:00:02",
            driver="ice",
            speed_mbps=25000,
            sriov_vf=False,
            pf_bus_id=None,
            sriov_total_vfs=0,
        ),
    )
    nodes = (
        NumaNode(0, tuple(range(8)), 64 << 30),
        NumaNode(1, tuple(range(8, 16)), 64 << 30),
    )
    return Inventory(gpus=tuple(gpus), nics=nics, cpus=_cpus(), numa_nodes=nodes)


def result(
    request: str,
    device: str,
    *,
    driver: str = DRIVER,
    pool: str = NODE,
    share_id: str | None = None,
    consumed: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One allocation result."""
    out: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if share_id is not None:
        out["shareID"] = share_id
    if consumed is not None:
        out["consumedCapacity"] = dict(consumed)
    return out


def cpu_result(request: str, cpus: int | str, *, node: int = 0, share: str = "") -> dict[str, Any]:
    """A share of a cpu-numa<N> device with ``cpus`` consumed."""
    share_id = share or str(uuid.uuid5(uuid.NAMESPACE_OID, f"{request}/{node}/{cpus}"))
    return result(
        request, f"cpu-numa{node}", share_id=share_id, consumed={"cpus": str(cpus), "memory": "1Gi"}
    )


def opaque(
    params: Any, *, requests: Sequence[str] = (), source: str = "FromClaim", driver: str = DRIVER
) -> dict[str, Any]:
    """One allocation config entry."""
    out: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": params}}
    if requests:
        out["requests"] = list(requests)
    return out


def claim(
    uid: str,
    name: str = "",
    namespace: str = "default",
    *,
    results: Sequence[Mapping[str, Any]] = (),
    configs: Sequence[Mapping[str, Any]] = (),
    requests: Sequence[str] | None = None,
    allocated: bool = True,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A resource.k8s.io/v1 ResourceClaim JSON object."""
    names = (
        list(requests) if requests is not None else sorted({str(r["request"]).split("/")[0] for r in results})
    )
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name or f"claim-{uid}", "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": n, "exactly": {"deviceClassName": "x"}} for n in names]}},
        "status": {},
    }
    if annotations:
        obj["metadata"]["annotations"] = dict(annotations)
    if allocated:
        obj["status"]["allocation"] = {"devices": {"results": list(results), "config": list(configs)}}
    return obj


def ref_of(obj: Mapping[str, Any]) -> ClaimRef:
    """The kubelet's reference to a claim object."""
    meta = obj["metadata"]
    return ClaimRef(meta["namespace"], meta["name"], meta["uid"])


@dataclass
class FakeClaimGetter:
    """In-memory ResourceClaims; 404 for unknown ones; optional per-claim failures and delay.

    ``rendezvous``: every GET waits there for its peers, so GETs made one after another never
    get past it (its timeout is the hang guard); ``peak_in_flight``: the most GETs at once."""

    claims: dict[tuple[str, str], JsonObject] = field(default_factory=dict)
    unreachable: set[tuple[str, str]] = field(default_factory=set)
    delay: float = 0.0
    rendezvous: threading.Barrier | None = None
    calls: int = 0
    peak_in_flight: int = 0
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, obj: Mapping[str, Any]) -> ClaimRef:
        ref = ref_of(obj)
        self.claims[(ref.namespace, ref.name)] = obj
        return ref

    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        with self._lock:
            self.calls += 1
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            if self.rendezvous is not None:
                self.rendezvous.wait(timeout=10)
            if self.delay:
                time.sleep(self.delay)
        finally:
            with self._lock:
                self._in_flight -= 1
        if (namespace, name) in self.unreachable:
            raise KubeError(f"get resourceclaims/{namespace}/{name}: connection refused", status=None)
        try:
            return self.claims[(namespace, name)]
        except KeyError:
            raise KubeError(
                f"get resourceclaims/{namespace}/{name}: HTTP 404: not found", status=404
            ) from None


@dataclass
class ServedDriver:
    """A ClaimsDriver as the kubelet layer calls it; everything else goes to the driver itself."""

    inner: ClaimsDriver
    fetcher: claim_layer.ClaimFetcher
    hold: claim_layer.Hold = None

    def prepare_claims(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Read and check the claims, then call the driver under the lock (as the server does)."""
        return claim_layer.prepare(self.inner, self.fetcher, self.hold, refs)

    def unprepare_claims(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """The driver's unprepare under the lock (as the server does)."""
        return claim_layer.unprepare(self.inner, self.hold, refs)

    def close(self) -> None:
        self.fetcher.close()
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class World:
    """Directories, inventory and claim source of one test node."""

    root: Path
    getter: FakeClaimGetter = field(default_factory=FakeClaimGetter)
    inventory: Inventory = field(default_factory=make_inventory)

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugin"

    def driver(
        self,
        *,
        planner: bool = True,
        serialize: claim_layer.Hold = None,
        max_get_workers: int = 16,
        **kwargs: Any,
    ) -> ServedDriver:
        """A fresh ClaimsDriver over this world's directories (a "restart" when called again),
        reading claims from :attr:`getter`; ``serialize``: the cross-process lock of its calls."""
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        inner = ClaimsDriver(
            driver_name=DRIVER,
            node_name=NODE,
            inventory=lambda: self.inventory,
            cdi_dir=self.cdi_dir,
            plugin_dir=self.plugin_dir,
            journal=claims_journal(
                cdi_dir=self.cdi_dir, plugin_dir=self.plugin_dir, driver_name=DRIVER, pool=NODE
            ),
            planner=CpuPlanner(lambda: self.inventory) if planner else NO_PINNING,
            **kwargs,
        )
        return ServedDriver(
            inner, claim_layer.ClaimFetcher(self.getter, max_workers=max_get_workers), serialize
        )

    def cdi_files(self) -> list[str]:
        return sorted(p.name for p in self.cdi_dir.iterdir())
