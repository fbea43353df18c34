"""What the benches share: the claim every prepare measures and the RSS probe."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

__all__ = ["cpu_claim", "nic_cpu_claim", "rss_mib"]


def nic_cpu_claim(uid: str, name: str, vf: str, numa: int, *, driver: str, node: str) -> dict[str, Any]:
    """An allocated claim: one NIC VF and a 2-CPU share of the VF's NUMA node (``cpu-numa<N>``).

    Valid for the real kube-apiserver too (requests with ``exactly``, a CpuConfig entry).
    """
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": uid},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "nic", "exactly": {"deviceClassName": "nic.numadra.dev"}},
                    {
                        "name": "cpu",
                        "exactly": {
                            "deviceClassName": "cpu.numadra.dev",
                            "capacity": {"requests": {"cpus": "2", "memory": "1Gi"}},
                        },
                    },
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "nic", "driver": driver, "pool": node, "device": vf},
                        {
                            "request": "cpu",
                            "driver": driver,
                            "pool": node,
                            "device": f"cpu-numa{numa}",
                            "shareID": str(uuid.uuid5(uuid.NAMESPACE_OID, uid)),
                            "consumedCapacity": {"cpus": "2", "memory": "1Gi"},
                        },
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": ["cpu"],
                            "opaque": {
                                "driver": driver,
                                "parameters": {"apiVersion": "numadra.dev/v1alpha1", "kind": "CpuConfig"},
                            },
                        }
                    ],
                }
            }
        },
    }


def cpu_claim(uid: str, name: str, numa: int, *, driver: str, node: str) -> dict[str, Any]:
    """An allocated claim of one exclusive CPU of ``cpu-numa<numa>``: the background load of a node.

    Enough to make the journal hold what a busy node holds (an entry, a CDI spec, a metadata file).
    """
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": uid},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "cpu",
                        "exactly": {
                            "deviceClassName": "cpu.numadra.dev",
                            "capacity": {"requests": {"cpus": "1"}},
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "cpu",
                            "driver": driver,
                            "pool": node,
                            "device": f"cpu-numa{numa}",
                            "shareID": str(uuid.uuid5(uuid.NAMESPACE_OID, uid)),
                            "consumedCapacity": {"cpus": "1"},
                        }
                    ]
                }
            }
        },
    }


def rss_mib(pid: int) -> float:
    """VmRSS of a process in MiB (NaN when the kernel does not say)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
