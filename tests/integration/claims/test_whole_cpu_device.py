"""A cpu device allocated whole (no ``shareID``): a scheduler without DRAConsumableCapacity did it.

With the gate off (on the apiserver, which then drops ``allowMultipleAllocations`` and the claim's
capacity requests, or on the scheduler alone) a cpu device is one whole device to the allocator:
it hands it to one claim with neither a share nor an amount. numadra cannot tell how many CPUs
the claim wanted, so it refuses the claim, naming the gate, and the claim's other devices and
the other claims of the call are not touched. A memory device allocated whole keeps its meaning
(its NUMA node in the claim's ``cpuset.mems``), and admin access takes no CPUs: both prepare.
"""

from __future__ import annotations

from pathlib import Path

from driver.pinning.types import parse_cpulist
from tests.integration.claims._world import CPU0, GPU0, World, claim, cpu_result, result


def test_a_cpu_device_allocated_whole_is_refused_naming_the_gate(world: World) -> None:
    drv = world.driver()
    whole = world.getter.add(claim("u-whole", results=[result("gpu", GPU0), result("cpus", CPU0)]))
    shared = world.getter.add(claim("u-share", results=[cpu_result("cpus", 2)]))
    out = drv.prepare_claims([whole, shared])
    refused = out["u-whole"]
    assert not refused.ok
    assert "DRAConsumableCapacity" in refused.error, refused.error
    assert "'cpu-numa0'" in refused.error and "allocated whole" in refused.error, refused.error
    assert out["u-share"].ok, out["u-share"].error
    assert [e.uid for e in drv.prepared_claims()] == ["u-share"]  # nothing of the refused claim kept
    assert not list(world.cdi_dir.glob("*u-whole*"))


def test_admin_access_to_a_whole_cpu_device_still_prepares(world: World) -> None:
    admin = {**result("cpus", CPU0), "adminAccess": True}
    ref = world.getter.add(claim("u-admin", results=[admin]))
    res = world.driver().prepare_claims([ref])["u-admin"]
    assert res.ok, res.error


def test_a_memory_device_allocated_whole_prepares_with_its_node(tmp_path: Path) -> None:
    from driver.inventory.discovery import discover
    from harness.hosttree import TOPOLOGIES, write_host_tree

    host = write_host_tree(tmp_path / "host", TOPOLOGIES["grace_hopper"])
    gh = World(tmp_path / "node", inventory=discover(host, use_nvml=False))
    ref = gh.getter.add(claim("u-hbm", results=[result("hbm", "memory-numa1"), cpu_result("cpus", 2)]))
    res = gh.driver().prepare_claims([ref])["u-hbm"]
    assert res.ok, res.error
    spec = (gh.cdi_dir / "numadra.dev_claim_u-hbm.json").read_text()
    assert '"NUMADRA_MEMS=0-1"' in spec, spec
    assert any(len(parse_cpulist(e.split("=", 1)[1])) == 2 for e in _envs(spec, "NUMADRA_CPUS="))


def _envs(spec: str, prefix: str) -> list[str]:
    import json

    doc = json.loads(spec)
    return [e for d in doc["devices"] for e in d["containerEdits"].get("env", []) if e.startswith(prefix)]
