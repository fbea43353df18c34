"""Auxiliary CPUs of a claim's GPUs and NICs: what the planner is asked and what the spec carries."""

from __future__ import annotations

from dataclasses import replace

from driver.claims.config import EffectiveConfig
from driver.claims.render import claim_spec
from driver.claims.selection import AllocatedDevice, ClaimView, aux_demand, cpu_requests, with_aux_cpus
from driver.inventory.model import DeviceKind, Gpu, PciTopology
from driver.pinning.aux import AuxCpus
from driver.pinning.hook import cdi_hook
from driver.pinning.planner import CpuPlanner
from driver.pinning.types import ClaimPinning, CpuMode, CpuRequest
from tests.integration.claims._world import CPU1, DRIVER, GPU0, GPU1, NIC0, NIC1, NODE, make_inventory

INV = make_inventory()
AUX = AuxCpus(gpu=2, nic=1)


def _dev(request: str, name: str, kind: DeviceKind, *, cpus: int = 0, admin: bool = False) -> AllocatedDevice:
    device = INV.find(name)
    assert device is not None
    consumed = {"cpus": str(cpus)} if kind is DeviceKind.CPU else {}
    share = "3f1c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b" if kind is DeviceKind.CPU else None
    return AllocatedDevice(request, name, NODE, share, consumed, kind, device, EffectiveConfig(), admin)


def _view(*devices: AllocatedDevice) -> ClaimView:
    return ClaimView("ns", "claim", "abc-1", "", devices)


def _asked(view: ClaimView, aux: AuxCpus = AUX) -> list[CpuRequest]:
    return with_aux_cpus(cpu_requests(view), aux_demand(view, aux, INV))


def test_a_gpu_only_claim_asks_two_cpus_on_the_gpus_node() -> None:
    """GPU1 sits on node 1: one shared request of 2 CPUs there."""
    assert _asked(_view(_dev("gpu", GPU1, DeviceKind.GPU))) == [CpuRequest("gpu", (1,), 2, CpuMode.SHARED)]


def test_every_device_request_of_the_claim_gets_the_one_set() -> None:
    """GPU0 (2) and NIC0 (1) in two requests, NIC1 on node 1 beside: 4 CPUs on nodes 0 and 1, asked
    once (the first request counts them) and given to every request, so no container holding any
    of the claim's devices is left without them."""
    view = _view(
        _dev("gpu", GPU0, DeviceKind.GPU),
        _dev("nics", NIC0, DeviceKind.NIC),
        _dev("nics", NIC1, DeviceKind.NIC),
    )
    asked = _asked(view)
    assert asked == [
        CpuRequest("gpu", (0, 1), 4, CpuMode.SHARED),
        CpuRequest("nics", (0, 1), 0, CpuMode.SHARED),
    ]
    pinning = CpuPlanner(lambda: INV).plan("abc-1", asked, frozenset())
    first, second = pinning.assignments
    assert len(first.cpus) == 4 and first.cpus == second.cpus


def test_they_add_to_the_claims_own_cpu_request() -> None:
    """A claim asking 3 CPUs of node 1 and GPU1: 5 CPUs for its CPU request, no request for the GPU."""
    view = _view(_dev("gpu", GPU1, DeviceKind.GPU), _dev("cpus", CPU1, DeviceKind.CPU, cpus=3))
    assert _asked(view) == [CpuRequest("cpus", (1,), 5, CpuMode.EXCLUSIVE)]


def test_admin_access_and_zero_counts_bring_nothing() -> None:
    """A monitoring (admin access) GPU takes nothing; a kind with 0 brings nothing."""
    assert _asked(_view(_dev("gpu", GPU0, DeviceKind.GPU, admin=True))) == []
    assert _asked(_view(_dev("nic", NIC0, DeviceKind.NIC)), AuxCpus(gpu=2)) == []


def test_a_gpu_without_a_node_takes_them_from_any_node_with_cpus() -> None:
    """The kernel reports no node (-1): every node with CPUs may serve."""
    gpu = INV.find(GPU0)
    assert isinstance(gpu, Gpu)
    lost = replace(gpu, pci=PciTopology(gpu.pci.bus_id, gpu.pci.pcie_root, None, local_memory=False))
    dev = replace(_dev("gpu", GPU0, DeviceKind.GPU), device=lost)
    demand = aux_demand(_view(dev), AUX, INV)
    assert demand is not None and demand.numa_nodes == (0, 1)


def test_the_gpus_cdi_device_carries_the_markers_and_the_hook() -> None:
    """The GPU of a claim with auxiliary CPUs: the pinning markers (not the memory-only ones) and,
    with --pinning hook, the hook that pins them."""
    view = _view(_dev("gpu", GPU1, DeviceKind.GPU))
    pinning = CpuPlanner(lambda: INV).plan("abc-1", _asked(view), frozenset())
    assert isinstance(pinning, ClaimPinning)
    (assignment,) = pinning.assignments
    spec, _ = claim_spec(view, driver_name=DRIVER, pinning=pinning, cpu_hook=cdi_hook)
    (device,) = spec.devices
    env = dict(e.split("=", 1) for e in device.edits.env)
    assert env["NUMADRA_CPUS"] == assignment.log_fields()["cpus"]
    assert (env["NUMADRA_MEMS"], env["NUMADRA_REQUEST"], env["NUMADRA_CPU_MODE"]) == ("1", "gpu", "shared")
    assert not any(k.startswith("NUMADRA_HOLDS_") for k in env)
    assert device.edits.hooks == (cdi_hook(assignment),)
