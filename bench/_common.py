"""What the benches share: the claim every prepare measures, the VFs it holds, the driver served
from claims in memory and the RSS probe."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from driver.claims import ClaimsDriver
    from driver.inventory.model import Inventory
    from driver.kubelet.claims import ClaimFetcher

__all__ = ["claimed_vfs", "cpu_claim", "gpu_claim", "in_memory_driver", "nic_cpu_claim", "rss_mib"]


def claimed_vfs(inventory: Inventory, count: int) -> list[tuple[str, int]]:
    """The first ``count`` VFs (``nic-*``) of the host tree's inventory, each with its NUMA node
    (0 when unknown): the VFs of the :func:`nic_cpu_claim` claims, the same in every bench."""
    vfs = [(nic.name, nic.pci.numa_node or 0) for nic in inventory.nics]
    return [vf for vf in vfs if vf[0].startswith("nic-")][:count]


def in_memory_driver(
    inventory: Inventory,
    claims: dict[tuple[str, str], Any],
    *,
    driver: str,
    node: str,
    cdi_dir: Path,
    plugin_dir: Path,
) -> tuple[ClaimsDriver, ClaimFetcher]:
    """The claims driver and the kubelet layer's fetcher, as the server wires them, reading
    ``claims`` (by namespace and name) from memory: the driver's work without HTTP or gRPC.
    The caller closes both."""
    from driver.claims import ClaimsDriver, claims_journal
    from driver.kubelet.claims import ClaimFetcher
    from driver.pinning.planner import CpuPlanner

    class InMemoryClaims:
        """The claim source: the claims in memory (the HTTP is not what is measured)."""

        def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> Any:
            return claims[(namespace, name)]

    claims_driver = ClaimsDriver(
        driver_name=driver,
        node_name=node,
        inventory=lambda: inventory,
        cdi_dir=cdi_dir,
        plugin_dir=plugin_dir,
        journal=claims_journal(cdi_dir=cdi_dir, plugin_dir=plugin_dir, driver_name=driver, pool=node),
        planner=CpuPlanner(lambda: inventory),
    )
    return claims_driver, ClaimFetcher(InMemoryClaims())


def _claim(
    uid: str, name: str, requests: list[dict[str, Any]], results: list[dict[str, Any]], config: list[Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": uid},
        "spec": {"devices": {"requests": requests}},
        "status": {"allocation": {"devices": {"results": results, "config": config}}},
    }


def _cpu_share(
    uid: str, numa: int, capacity: dict[str, str], *, driver: str, node: str
) -> tuple[dict[str, Any], ...]:
    """The "cpu" request for ``capacity`` and its result: a share of ``cpu-numa<numa>``."""
    request = {
        "name": "cpu",
        "exactly": {"deviceClassName": "cpu.numadra.dev", "capacity": {"requests": capacity}},
    }
    result = {
        "request": "cpu",
        "driver": driver,
        "pool": node,
        "device": f"cpu-numa{numa}",
        "shareID": str(uuid.uuid5(uuid.NAMESPACE_OID, uid)),
        "consumedCapacity": dict(capacity),
    }
    return request, result


def nic_cpu_claim(uid: str, name: str, vf: str, numa: int, *, driver: str, node: str) -> dict[str, Any]:
    """An allocated claim: one NIC VF and a 2-CPU share of the VF's NUMA node (``cpu-numa<N>``).

    Valid for the real kube-apiserver too (requests with ``exactly``, a CpuConfig entry).
    """
    cpu_request, cpu_result = _cpu_share(uid, numa, {"cpus": "2", "memory": "1Gi"}, driver=driver, node=node)
    config = {
        "source": "FromClaim",
        "requests": ["cpu"],
        "opaque": {
            "driver": driver,
            "parameters": {"apiVersion": "numadra.dev/v1alpha1", "kind": "CpuConfig"},
        },
    }
    return _claim(
        uid,
        name,
        [{"name": "nic", "exactly": {"deviceClassName": "nic.numadra.dev"}}, cpu_request],
        [{"request": "nic", "driver": driver, "pool": node, "device": vf}, cpu_result],
        [config],
    )


def cpu_claim(uid: str, name: str, numa: int, *, driver: str, node: str) -> dict[str, Any]:
    """An allocated claim of one exclusive CPU of ``cpu-numa<numa>``: the background load of a node.

    Enough to make the journal hold what a busy node holds (an entry, a CDI spec, a metadata file).
    """
    cpu_request, cpu_result = _cpu_share(uid, numa, {"cpus": "1"}, driver=driver, node=node)
    return _claim(uid, name, [cpu_request], [cpu_result], [])


def gpu_claim(uid: str, name: str, device: str, *, driver: str, node: str) -> dict[str, Any]:
    """An allocated claim of one whole device ``device`` of ``driver`` (no config): what the
    upstream example driver's kubelet plugin prepares (its fake ``gpu-<i>`` devices)."""
    return _claim(
        uid,
        name,
        [{"name": "gpu", "exactly": {"deviceClassName": driver}}],
        [{"request": "gpu", "driver": driver, "pool": node, "device": device}],
        [],
    )


def rss_mib(pid: int) -> float:
    """VmRSS of a process in MiB (NaN when the kernel does not say)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
