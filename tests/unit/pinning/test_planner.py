"""The claim planner: exclusive slices, the pod shared pool and its empty-pool restriction."""

from __future__ import annotations

import threading

import pytest

from driver.errors import ClaimError, CpuExhaustedError, PinningError
from driver.inventory.model import Gpu, Inventory, Nic, PciTopology
from driver.pinning.planner import CpuPlanner, mems_for_devices
from driver.pinning.types import CpuMode, CpuRequest, marker_env
from harness.synthetic import synthetic_inventory

EXCL = CpuMode.EXCLUSIVE
SHARED = CpuMode.SHARED


def _planner(reserved: tuple[int, ...] = ()) -> CpuPlanner:
    inv = synthetic_inventory(nodes=2, cores_per_node=4)  # 16 CPUs, node 0: 0-3,8-11
    return CpuPlanner(lambda: inv, reserved)


def test_exclusive_requests_get_disjoint_cpus() -> None:
    """Two exclusive requests of one claim get their own, disjoint CPUs on their node."""
    p = _planner().plan("uid-1", [CpuRequest("main", (0,), 2), CpuRequest("aux", (0,), 2)], taken=())
    main, aux = p.assignments
    assert len(main.cpus) == 2 and len(aux.cpus) == 2
    assert not main.cpus & aux.cpus
    assert main.mems == aux.mems == frozenset({0})


def test_shared_requests_share_one_pool() -> None:
    """Shared requests sum their counts into one pool, and each gets the same CPU set."""
    reqs = [
        CpuRequest("app", (1,), 4),
        CpuRequest("sc1", (1,), 1, SHARED),
        CpuRequest("sc2", (1,), 1, SHARED),
    ]
    app, sc1, sc2 = _planner().plan("uid-2", reqs, taken=()).assignments
    assert sc1.cpus == sc2.cpus
    assert len(sc1.cpus) == 2
    assert not sc1.cpus & app.cpus
    assert sc1.mode is SHARED and app.mode is EXCL
    assert sc1.mems == frozenset({1})


def test_empty_shared_pool_rejected() -> None:
    """A shared request with no CPUs for the pool is rejected with the restriction's name."""
    reqs = [CpuRequest("app", (0,), 8), CpuRequest("sidecars", (0,), 0, SHARED)]
    with pytest.raises(ClaimError, match="empty shared pool restriction") as err:
        _planner().plan("uid-3", reqs, taken=())
    assert err.value.claim_uid == "uid-3"


@pytest.mark.parametrize(
    ("reqs", "message"),
    [
        pytest.param([CpuRequest("a", (0,), 1), CpuRequest("a", (0,), 1)], "duplicate", id="duplicate"),
        pytest.param([CpuRequest("a", (), 1)], "no NUMA node", id="no-node"),
        pytest.param([CpuRequest("a", (0,), 0)], "got 0 CPUs", id="empty-exclusive"),
        pytest.param([CpuRequest("a", (0,), -2)], "asks for -2", id="negative"),
    ],
)
def test_invalid_requests(reqs: list[CpuRequest], message: str) -> None:
    """Request sets that cannot be pinned safely are rejected before allocation."""
    with pytest.raises(ClaimError, match=message):
        _planner().plan("uid-x", reqs, taken=())


def test_unknown_node_rejected() -> None:
    """A request on a NUMA node this host lacks is a PinningError that names the node."""
    with pytest.raises(PinningError, match=r"NUMA node\(s\) 7 do not exist"):
        _planner().plan("uid-y", [CpuRequest("a", (7,), 1)], taken=())


def test_new_inventory_is_seen_at_the_next_plan() -> None:
    """The known NUMA nodes follow the inventory: a node that appears is usable at once."""
    current = [synthetic_inventory(nodes=1, cores_per_node=4)]
    planner = CpuPlanner(lambda: current[0])
    with pytest.raises(PinningError, match=r"NUMA node\(s\) 1 do not exist"):
        planner.plan("uid-n", [CpuRequest("a", (1,), 1)], taken=())
    current[0] = synthetic_inventory(nodes=2, cores_per_node=4)
    got = planner.plan("uid-n", [CpuRequest("a", (1,), 1)], taken=())
    assert got.assignments[0].cpus <= {c.id for c in current[0].cpus if c.numa_node == 1}
    current[0] = synthetic_inventory(nodes=1, cores_per_node=4)
    with pytest.raises(PinningError, match=r"NUMA node\(s\) 1 do not exist"):
        planner.plan("uid-n", [CpuRequest("a", (1,), 1)], taken=())


def test_taken_and_reserved_respected_and_exhaustion_named() -> None:
    """CPUs of other claims and reserved CPUs are skipped; exhaustion names claim and request."""
    planner = _planner(reserved=(0, 8))
    first = planner.plan("uid-a", [CpuRequest("main", (0,), 4)], taken=())
    assert not first.cpus & {0, 8}
    second = planner.plan("uid-b", [CpuRequest("main", (0,), 2)], taken=first.cpus)
    assert not second.cpus & (first.cpus | {0, 8})
    with pytest.raises(CpuExhaustedError, match="claim uid-c request main: NUMA node 0: wanted 1"):
        planner.plan("uid-c", [CpuRequest("main", (0,), 1)], taken=first.cpus | second.cpus)


def test_concurrent_plans_with_shared_ledger_never_overlap() -> None:
    """Callers that serialize through the ledger never get the same CPU from parallel threads."""
    planner = _planner()
    ledger: set[int] = set()
    guard = threading.Lock()
    results: list[frozenset[int]] = []

    def worker(i: int) -> None:
        with guard:
            pinning = planner.plan(f"uid-{i}", [CpuRequest("r", (i % 2,), 2)], taken=frozenset(ledger))
            ledger.update(pinning.cpus)
            results.append(pinning.cpus)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert sum(len(r) for r in results) == len(set().union(*results)) == 16


def test_marker_env_matches_assignment() -> None:
    """marker_env spells cpus/mems in kernel list format, with mode, claim and request."""
    a = _planner().plan("uid-e", [CpuRequest("main", (1,), 4)], taken=()).assignments[0]
    env = marker_env(a, "uid-e")
    assert env["NUMADRA_CPUS"] == "4-5,12-13"
    assert env["NUMADRA_MEMS"] == "1"
    assert env["NUMADRA_CPU_MODE"] == "exclusive"
    assert env["NUMADRA_CLAIM_UID"] == "uid-e"
    assert env["NUMADRA_REQUEST"] == "main"


def test_mems_for_devices() -> None:
    """Memory nodes follow GPUs, NICs and cpu devices; unknown nodes and names add nothing."""
    base = synthetic_inventory(nodes=2, cores_per_node=1)
    gpu = Gpu(
        name="gpu-0000-3b-00-0",
        pci=PciTopology("0000:3b:00.0", "pci0000:3a", 1),
        vendor="nvidia",
        vendor_id=0x10DE,
        device_id=1,
        pci_class=0x030200,
        index=0,
    )
    nic = Nic(
        name="nic-0000-5e-00-0",
        pci=PciTopology("0000:5e:00.0", "pci0000:5d", None),
        interface_name="eth1",
        mac_address="00:11:22:33:44:55",
        driver="mlx5_core",
        speed_mbps=None,
        sriov_vf=False,
        pf_bus_id=None,
        sriov_total_vfs=0,
    )
    inv = Inventory(gpus=(gpu,), nics=(nic,), cpus=base.cpus, numa_nodes=base.numa_nodes)
    assert mems_for_devices(inv, ["gpu-0000-3b-00-0"]) == frozenset({1})
    assert mems_for_devices(inv, ["nic-0000-5e-00-0", "nope"]) == frozenset()
    assert mems_for_devices(inv, ["cpu-numa0", "gpu-0000-3b-00-0"]) == frozenset({0, 1})


def test_node_shared_pool_keeps_reserved_and_excludes_claimed() -> None:
    """The node shared pool is every online CPU minus claimed ones; reserved CPUs stay in it."""
    planner = _planner(reserved=(0,))
    assert planner.node_shared_pool({1, 2, 3}) == frozenset({0, *range(4, 16)})


def _pool_planner(reserved: tuple[int, ...], users: int | None, *, watch: bool = True) -> CpuPlanner:
    inv = synthetic_inventory(nodes=1, cores_per_node=2)  # 4 CPUs: 0-3
    planner = CpuPlanner(lambda: inv, reserved, shared_pool=True)
    if watch:
        planner.watch_pool(lambda: users)
    return planner


@pytest.mark.parametrize(
    ("users", "watch", "running"),
    [
        pytest.param(1, True, "1 container(s)", id="one-running"),
        pytest.param(None, True, "containers", id="not-synchronized-yet"),
        pytest.param(0, False, "containers", id="no-nri-plugin-yet"),
    ],
)
def test_claim_that_would_empty_the_shared_pool_is_refused(
    users: int | None, watch: bool, running: str
) -> None:
    """Without reserved CPUs, taking the pool's last CPUs while containers use it is a claim error."""
    planner = _pool_planner((), users, watch=watch)
    planner.plan("uid-1", [CpuRequest("main", (0,), 2)], taken=())
    with pytest.raises(ClaimError) as err:
        planner.plan("uid-2", [CpuRequest("main", (0,), 2)], taken={0, 2})
    assert err.value.claim_uid == "uid-2"
    assert f"last CPUs of the node shared pool (1,3) while {running} without a claim" in err.value.reason
    assert "--reserved-cpus" in err.value.reason


def test_pool_may_be_emptied_when_nothing_runs_on_it() -> None:
    """No container on the pool: the last CPUs may be claimed (later claimless ones are refused)."""
    planner = _pool_planner((), 0)
    assert planner.plan("uid-1", [CpuRequest("main", (0,), 4)], taken=()).cpus == frozenset(range(4))


def test_reserved_cpus_keep_the_shared_pool_from_emptying() -> None:
    """With a reserved CPU every other CPU can be claimed: the reserved one stays the pool."""
    planner = _pool_planner((0,), 5)
    pinning = planner.plan("uid-1", [CpuRequest("main", (0,), 3)], taken=())
    assert pinning.cpus == frozenset({1, 2, 3})
    assert planner.node_shared_pool(pinning.cpus) == frozenset({0})


def test_without_the_shared_pool_claims_may_take_every_cpu() -> None:
    """The rule only exists with the node shared pool enforced (--nri-shared-pool)."""
    inv = synthetic_inventory(nodes=1, cores_per_node=2)
    planner = CpuPlanner(lambda: inv)
    assert planner.plan("uid-1", [CpuRequest("main", (0,), 4)], taken=()).cpus == frozenset(range(4))


def test_alignment_cpus_and_memory_on_the_gpus_node() -> None:
    """gpu + 8 cpus on the GPU's node (what matchAttribute numaNode yields): CPUs and mems there."""
    base = synthetic_inventory(nodes=2, cores_per_node=8)
    gpu = Gpu(
        name="gpu-0000-b1-00-0",
        pci=PciTopology("0000:b1:00.0", "pci0000:b0", 1),
        vendor="nvidia",
        vendor_id=0x10DE,
        device_id=1,
        pci_class=0x030200,
        index=0,
    )
    inv = Inventory(gpus=(gpu,), cpus=base.cpus, numa_nodes=base.numa_nodes)
    gpu_nodes = mems_for_devices(inv, [gpu.name])
    (a,) = (
        CpuPlanner(lambda: inv)
        .plan("uid-al", [CpuRequest("cpus", tuple(gpu_nodes), 8)], taken=())
        .assignments
    )
    assert len(a.cpus) == 8
    assert {c.numa_node for c in inv.cpus if c.id in a.cpus} == {1}
    assert a.mems == gpu_nodes == frozenset({1})
