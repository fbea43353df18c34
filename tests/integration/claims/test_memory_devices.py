"""Claims on a Grace Hopper node: the HBM's memory device reaches cpuset.mems only when asked for.

Real ClaimsDriver, files and journal on the generated GH200 host tree (node 0: Grace CPUs, node 1:
the GPU's HBM without CPUs). What the CDI spec's markers say is what the hook and the workload
read; what the journal's binding says is what the NRI plugin enforces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from driver.inventory.discovery import discover
from driver.pinning.binding import claim_binding
from driver.pinning.types import parse_cpulist
from driver.state.index import prepared_view
from driver.state.journal import Journal, journal_path
from harness.hosttree import TOPOLOGIES, write_host_tree
from tests.integration.claims._world import DRIVER, World, claim, cpu_result, result

GPU = "gpu-0009-01-00-0"
HBM = "memory-numa1"
SHARE_A = "0b0e8a8e-6b1f-4c3a-9e8f-0000000000a1"
SHARE_B = "0b0e8a8e-6b1f-4c3a-9e8f-0000000000b2"


@pytest.fixture
def gh(tmp_path: Path) -> World:
    """A node with the generated Grace Hopper host."""
    host = write_host_tree(tmp_path / "host", TOPOLOGIES["grace_hopper"])
    return World(tmp_path / "node", inventory=discover(host, use_nvml=False))


def _hbm(request: str, share: str, amount: str = "10Gi") -> dict[str, Any]:
    return result(request, HBM, share_id=share, consumed={"memory": amount})


def _envs(world: World, uid: str) -> dict[str, dict[str, str]]:
    """CDI device name suffix (the inventory device) -> its env."""
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_{uid}.json").read_text())
    out = {}
    for dev in spec["devices"]:
        device = next(name for name in (GPU, HBM, "cpu-numa0") if name in dev["name"])
        out[device] = dict(e.split("=", 1) for e in dev["containerEdits"].get("env", []))
    return out


def _binding_mems(world: World, uid: str) -> frozenset[int]:
    journal = Journal(journal_path(world.plugin_dir))
    journal.load()
    (entry,) = [e for e in journal.entries() if e.uid == uid]
    return claim_binding(prepared_view(entry), world.inventory).mems


def test_a_gpu_claim_never_gets_the_hbm_node(gh: World) -> None:
    """GPU alone: memory follows the GPU's PCI node 0, not its HBM node 1."""
    ref = gh.getter.add(claim("u-gpu", results=[result("gpu", GPU)]))
    res = gh.driver().prepare_claims([ref])["u-gpu"]
    assert res.ok, res.error
    assert _envs(gh, "u-gpu")[GPU]["NUMADRA_MEMS"] == "0"
    assert _binding_mems(gh, "u-gpu") == {0}


def test_a_claim_that_asks_for_the_hbm_gets_it_with_its_gpu(gh: World) -> None:
    """GPU + its HBM memory device: both nodes, in the spec's markers and in the NRI binding."""
    ref = gh.getter.add(claim("u-hbm", results=[result("gpu", GPU), _hbm("hbm", SHARE_A)]))
    res = gh.driver().prepare_claims([ref])["u-hbm"]
    assert res.ok, res.error
    envs = _envs(gh, "u-hbm")
    assert envs[GPU]["NUMADRA_MEMS"] == envs[HBM]["NUMADRA_MEMS"] == "0-1"
    assert _binding_mems(gh, "u-hbm") == {0, 1}
    assert [d.device_name for d in res.devices] == [GPU, HBM]


def test_pinned_cpus_get_the_hbm_only_when_the_claim_has_it(gh: World) -> None:
    """4 CPUs of node 0: mems 0; the same with the HBM's memory device: mems 0-1."""
    driver = gh.driver()
    plain = gh.getter.add(claim("u-cpu", results=[cpu_result("cpus", 4)]))
    with_hbm = gh.getter.add(claim("u-cpu-hbm", results=[cpu_result("cpus", 4), _hbm("hbm", SHARE_B)]))
    out = driver.prepare_claims([plain, with_hbm])
    assert out["u-cpu"].ok and out["u-cpu-hbm"].ok, (out["u-cpu"].error, out["u-cpu-hbm"].error)
    assert _envs(gh, "u-cpu")["cpu-numa0"]["NUMADRA_MEMS"] == "0"
    cpu_env = _envs(gh, "u-cpu-hbm")["cpu-numa0"]
    assert cpu_env["NUMADRA_MEMS"] == "0-1"
    assert len(parse_cpulist(cpu_env["NUMADRA_CPUS"])) == 4


def test_the_memory_device_is_shared_by_claims(gh: World) -> None:
    """Two claims hold shares of the HBM device at once (it is multi-allocatable, like a cpu device)."""
    driver = gh.driver()
    a = gh.getter.add(claim("u-a", results=[_hbm("hbm", SHARE_A)]))
    b = gh.getter.add(claim("u-b", results=[_hbm("hbm", SHARE_B)]))
    out = driver.prepare_claims([a, b])
    assert out["u-a"].ok and out["u-b"].ok, (out["u-a"].error, out["u-b"].error)
    assert _envs(gh, "u-b")[HBM]["NUMADRA_MEMS"] == "1"
