"""explain on fixture topologies (tests/support): expected verdicts and explanations per device."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from driver import DEFAULT_DRIVER_NAME as DRIVER
from driver.explain.analyze import DeviceClass, Usage, explain_claim, usage_from_journal
from driver.explain.devices import DeviceView, devices_from_host, devices_from_slices
from driver.explain.model import ClaimExplanation, ReasonKind, RequestExplanation, RequestStatus, Verdict
from driver.explain.render import to_text
from driver.inventory.discovery import discover
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import PreparedDevice
from driver.slices.builder import build_slices
from driver.state.entry import JournalEntry
from harness.hosttree import write_host_tree
from harness.topologies import TOPOLOGIES

NUMA = 'device.attributes["resource.kubernetes.io"].numaNode'
PF_RDMA = 'device.attributes["numadra.dev"].sriovVF == false && device.attributes["numadra.dev"].rdma'
# The dgx fixture topology shrunk to write fast: 2 NUMA nodes with 4 GPUs + 4 RDMA NICs (2 VFs
# each) and 8 CPUs (4 cores x 2 threads) per node; 34 devices.
MINI_DGX = replace(
    TOPOLOGIES["dgx"],
    name="mini-dgx",
    cores_per_socket=4,
    nics=tuple(replace(n, vfs=n.vfs[:2]) for n in TOPOLOGIES["dgx"].nics),
)
GPU0, GPU1 = "gpu-0000-18-00-0", "gpu-0000-98-00-0"
NIC0 = "nic-0000-17-00-0"


@pytest.fixture(scope="module")
def dgx_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_host_tree(tmp_path_factory.mktemp("dgx"), MINI_DGX)


@pytest.fixture(scope="module")
def dgx(dgx_root: Path) -> list[DeviceView]:
    return devices_from_host(str(dgx_root), "node-a", DRIVER)


def claim(
    *requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None, **meta: Any
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    metadata = {"namespace": "ml", "name": "train", "uid": "uid-1", **meta}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": devices},
    }


def exactly(name: str, dtype: str, *selectors: str, count: int = 1, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": f"{dtype}.{DRIVER}", "count": count, **extra}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def request(e: ClaimExplanation, name: str) -> RequestExplanation:
    for r in e.requests:
        if r.name == name:
            return r
        for s in r.subrequests:
            if s.name == name:
                return s
    raise AssertionError(f"no request {name}")


def reasons(req: RequestExplanation, device: str) -> list[tuple[ReasonKind, str]]:
    check = req.check(device)
    assert check is not None
    return [(r.kind, r.message) for r in check.reasons]


def numa_aligned_claim(cpus: str = "4") -> dict[str, Any]:
    return claim(
        exactly("gpu", "gpu"),
        exactly("nic", "nic", PF_RDMA),
        exactly("cpu", "cpu", capacity={"requests": {"cpus": cpus}}),
        constraints=[
            {"requests": ["gpu", "nic", "cpu"], "matchAttribute": "resource.kubernetes.io/numaNode"}
        ],
    )


def test_wrong_type_is_named_with_the_value(dgx: list[DeviceView]) -> None:
    """For a GPU request every NIC and CPU device is excluded as wrong type, saying what it is."""
    gpu = request(explain_claim(claim(exactly("gpu", "gpu")), dgx, driver_name=DRIVER), "gpu")
    assert gpu.status is RequestStatus.SATISFIABLE
    assert len(gpu.eligible) == 8
    assert reasons(gpu, NIC0) == [
        (
            ReasonKind.WRONG_TYPE,
            f'class gpu.{DRIVER}: device.attributes["{DRIVER}"].type is "nic", wants "gpu"',
        )
    ]
    assert reasons(gpu, "cpu-numa0")[0][0] is ReasonKind.WRONG_TYPE


def test_numa_selector_excludes_the_other_node(dgx: list[DeviceView]) -> None:
    """A numaNode selector keeps the node-1 GPUs and says node-0 GPUs have numaNode 0."""
    gpu = request(
        explain_claim(claim(exactly("gpu", "gpu", f"{NUMA} == 1", count=4)), dgx, driver_name=DRIVER), "gpu"
    )
    assert gpu.status is RequestStatus.SATISFIABLE
    assert sorted(gpu.eligible) == [
        "gpu-0000-98-00-0",
        "gpu-0000-a9-00-0",
        "gpu-0000-ba-00-0",
        "gpu-0000-cb-00-0",
    ]
    assert reasons(gpu, GPU0) == [(ReasonKind.SELECTOR, f"request selector: {NUMA} is 0, wants 1")]


def test_count_above_eligible_is_unsatisfiable(dgx: list[DeviceView]) -> None:
    """Five GPUs on one NUMA node do not exist: unsatisfiable, with 4 eligible."""
    gpu = request(
        explain_claim(claim(exactly("gpu", "gpu", f"{NUMA} == 0", count=5)), dgx, driver_name=DRIVER), "gpu"
    )
    assert gpu.status is RequestStatus.UNSATISFIABLE
    assert len(gpu.eligible) == 4


def test_numa_aligned_claim_on_an_idle_node(dgx: list[DeviceView]) -> None:
    """GPU + RDMA NIC + 4 CPUs with matchAttribute numaNode: both nodes qualify; VFs fail the selector."""
    e = explain_claim(numa_aligned_claim(), dgx, driver_name=DRIVER)
    assert [r.status for r in e.requests] == [RequestStatus.SATISFIABLE] * 3
    nic = request(e, "nic")
    assert len(nic.eligible) == 8
    vf = next(c for c in nic.checks if c.device.startswith("nic-") and c.device not in nic.eligible)
    assert vf.reasons[0].kind is ReasonKind.SELECTOR
    assert "sriovVF is true, wants false" in vf.reasons[0].message
    assert sorted(request(e, "cpu").eligible) == ["cpu-numa0", "cpu-numa1"]
    assert e.notes == ()


def _holding(
    cpus: range, node: int, *, uid: str = "uid-other", devices: tuple[str, ...] = ()
) -> JournalEntry:
    return JournalEntry(
        namespace="ml",
        name="other",
        uid=uid,
        devices=tuple(PreparedDevice(("r",), "node-a", d, (f"{DRIVER}/claim={uid}-{d}",)) for d in devices),
        pinning=ClaimPinning(
            uid, (CpuAssignment("cpu", CpuMode.EXCLUSIVE, frozenset(cpus), frozenset({node})),)
        ),
    )


def test_a_pool_shared_by_several_requests_counts_once(dgx: list[DeviceView]) -> None:
    """A GPU and a NIC request sharing their claim's 2 auxiliary CPUs (one pod shared pool): 2 taken."""
    pool = frozenset({0, 1})
    entry = JournalEntry(
        namespace="ml",
        name="gpu-and-nic",
        uid="uid-aux",
        devices=(),
        pinning=ClaimPinning(
            "uid-aux",
            tuple(CpuAssignment(r, CpuMode.SHARED, pool, frozenset({0})) for r in ("gpu", "nic")),
        ),
    )
    assert usage_from_journal([entry], dgx).taken_cpus == {0: 2}


def test_cpus_taken_on_node0_push_the_whole_claim_to_node1(dgx: list[DeviceView], dgx_root: Path) -> None:
    """6 of 8 CPUs held on node 0: cpu-numa0 cannot give 4, so node-0 GPUs/NICs fail the NUMA constraint."""
    cpu_numa = {c.id: c.numa_node for c in discover(str(dgx_root), use_nvml=False).cpus}
    node0 = sorted(c for c, n in cpu_numa.items() if n == 0)[:6]
    usage = usage_from_journal([_holding(node0, 0)], dgx, cpu_numa=cpu_numa)
    assert usage.taken_cpus == {0: 6}
    e = explain_claim(numa_aligned_claim(), dgx, driver_name=DRIVER, usage=usage)
    cpu = request(e, "cpu")
    assert reasons(cpu, "cpu-numa0") == [
        (
            ReasonKind.CAPACITY,
            "capacity cpus exhausted: asks 4, 2 of 8 free (6 held by prepared claims on NUMA node 0)",
        )
    ]
    assert cpu.eligible == ("cpu-numa1",)
    gpu = request(e, "gpu")
    assert reasons(gpu, GPU0) == [
        (
            ReasonKind.NUMA_MISMATCH,
            "matchAttribute resource.kubernetes.io/numaNode: numaNode is 0, but request 'cpu' has 0 eligible "
            "with numaNode 0 (needs 1)",
        )
    ]
    assert gpu.check(GPU1) is not None and gpu.check(GPU1).verdict is Verdict.ELIGIBLE  # type: ignore[union-attr]
    assert [r.status for r in e.requests] == [RequestStatus.SATISFIABLE] * 3


def test_constraint_that_no_node_can_meet(dgx: list[DeviceView]) -> None:
    """Five GPUs on one NUMA node with a NIC: every GPU fails the constraint and a note says so."""
    c = claim(
        exactly("gpu", "gpu", count=5),
        exactly("nic", "nic", PF_RDMA),
        constraints=[{"matchAttribute": "resource.kubernetes.io/numaNode"}],
    )
    e = explain_claim(c, dgx, driver_name=DRIVER)
    gpu = request(e, "gpu")
    assert gpu.status is RequestStatus.UNSATISFIABLE
    assert gpu.eligible == ()
    assert "request 'gpu' has 4 eligible with numaNode 0 (needs 5)" in reasons(request(e, "nic"), NIC0)[0][1]
    assert e.notes == ("matchAttribute resource.kubernetes.io/numaNode: no single numaNode serves gpu, nic",)


def test_capacity_larger_than_the_device(dgx: list[DeviceView]) -> None:
    """Asking 500 CPUs of an 8-CPU NUMA node names both numbers."""
    cpu = request(explain_claim(numa_aligned_claim(cpus="500"), dgx, driver_name=DRIVER), "cpu")
    assert cpu.status is RequestStatus.UNSATISFIABLE
    assert reasons(cpu, "cpu-numa1") == [(ReasonKind.CAPACITY, "capacity cpus: asks 500, device has 8")]


def test_exclusive_device_prepared_for_another_claim(dgx: list[DeviceView]) -> None:
    """A GPU held by another prepared claim is "in use", naming that claim; CPU devices are shared."""
    usage = usage_from_journal([_holding(range(0, 4), 0, devices=(GPU0, "cpu-numa0"))], dgx)
    assert usage.held_devices == {GPU0: "ml/other"}
    gpu = request(explain_claim(claim(exactly("gpu", "gpu")), dgx, driver_name=DRIVER, usage=usage), "gpu")
    assert reasons(gpu, GPU0) == [(ReasonKind.IN_USE, "in use: prepared on this node for claim ml/other")]
    assert len(gpu.eligible) == 7


def test_device_prepared_with_admin_access_is_not_in_use(dgx: list[DeviceView]) -> None:
    """A monitoring claim (adminAccess) holding a GPU does not make it "in use" for others."""
    entry = replace(_holding(range(0, 0), 0, devices=(GPU0,)), pinning=None, admin_devices=(GPU0,))
    usage = usage_from_journal([entry], dgx)
    assert usage.held_devices == {}
    gpu = request(explain_claim(claim(exactly("gpu", "gpu")), dgx, driver_name=DRIVER, usage=usage), "gpu")
    assert GPU0 in gpu.eligible


def test_unhealthy_and_tainted_devices(dgx_root: Path) -> None:
    """Health taints read as unhealthy, others as tainted; a matching toleration makes a device eligible."""
    inventory = discover(str(dgx_root), use_nvml=False)
    taints = {
        GPU0: [{"key": f"{DRIVER}/unhealthy", "value": "xid-79", "effect": "NoExecute"}],
        "gpu-0000-29-00-0": [{"key": "example.com/maintenance", "effect": "NoSchedule"}],
        "gpu-0000-3a-00-0": [{"key": "example.com/info", "effect": "None"}],
    }
    devices = devices_from_slices(build_slices(inventory, node_name="node-a", taints=taints))
    gpu = request(explain_claim(claim(exactly("gpu", "gpu")), devices, driver_name=DRIVER), "gpu")
    assert reasons(gpu, GPU0) == [
        (ReasonKind.UNHEALTHY, f"unhealthy: taint {DRIVER}/unhealthy=xid-79:NoExecute is not tolerated")
    ]
    assert reasons(gpu, "gpu-0000-29-00-0") == [
        (ReasonKind.TAINTED, "taint example.com/maintenance:NoSchedule is not tolerated by the request")
    ]
    assert "gpu-0000-3a-00-0" in gpu.eligible  # effect None is informational
    tolerant = exactly("gpu", "gpu", tolerations=[{"key": "example.com/maintenance", "operator": "Exists"}])
    gpu = request(explain_claim(claim(tolerant), devices, driver_name=DRIVER), "gpu")
    assert "gpu-0000-29-00-0" in gpu.eligible
    assert GPU0 not in gpu.eligible


def test_selector_it_cannot_evaluate_is_unknown(dgx: list[DeviceView]) -> None:
    """A semver selector makes GPUs "unknown" and the request unknown, with the reason; never a guess."""
    gpu = request(
        explain_claim(claim(exactly("gpu", "gpu", 'semver("1.2.3").major() == 1')), dgx, driver_name=DRIVER),
        "gpu",
    )
    assert gpu.status is RequestStatus.UNKNOWN
    check = gpu.check(GPU0)
    assert check is not None and check.verdict is Verdict.UNKNOWN
    assert check.reasons[0].kind is ReasonKind.CANNOT_EVALUATE
    assert "function semver()" in check.reasons[0].message


def test_selector_error_is_reported_as_such(dgx: list[DeviceView]) -> None:
    """A selector on a missing attribute is a CEL error that fails allocation, not a plain mismatch."""
    gpu = request(
        explain_claim(claim(exactly("gpu", "gpu", 'device.attributes["numadra.dev"].model == "H100"')), dgx,
                      driver_name=DRIVER),
        "gpu",
    )  # fmt: skip
    assert gpu.status is RequestStatus.UNSATISFIABLE
    assert reasons(gpu, GPU0)[0][0] is ReasonKind.CEL_ERROR
    assert "no such key: model" in reasons(gpu, GPU0)[0][1]


def test_other_drivers_class_is_not_evaluated(dgx: list[DeviceView]) -> None:
    """A request for another driver's class is not judged against our devices, and says why."""
    c = claim({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}})
    gpu = request(explain_claim(c, dgx, driver_name=DRIVER), "gpu")
    assert gpu.status is RequestStatus.NOT_EVALUATED
    assert gpu.checks == ()
    assert "not one of this driver's classes" in gpu.notes[0]


def test_extra_device_class_is_used(dgx: list[DeviceView]) -> None:
    """A DeviceClass passed in (e.g. from the cluster) is evaluated like ours."""
    h100 = DeviceClass(
        "h100", ('device.attributes["numadra.dev"].?productName.orValue("") == "NVIDIA H100 80GB HBM3"',)
    )
    gpu = request(
        explain_claim(claim({"name": "gpu", "exactly": {"deviceClassName": "h100"}}), dgx, driver_name=DRIVER,
                      classes={"h100": h100}),
        "gpu",
    )  # fmt: skip
    assert len(gpu.eligible) == 8


def test_first_available_falls_back_and_constraints_use_the_chosen_one(dgx: list[DeviceView]) -> None:
    """firstAvailable: 5 GPUs on node 0 cannot be had, 1 GPU can; the NIC constraint follows the fallback."""
    c = claim(
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "five", "deviceClassName": f"gpu.{DRIVER}", "count": 5,
                 "selectors": [{"cel": {"expression": f"{NUMA} == 0"}}]},
                {"name": "one", "deviceClassName": f"gpu.{DRIVER}"},
            ],
        },
        exactly("nic", "nic", PF_RDMA, f"{NUMA} == 1"),
        constraints=[{"matchAttribute": "resource.kubernetes.io/numaNode"}],
    )  # fmt: skip
    e = explain_claim(c, dgx, driver_name=DRIVER)
    assert request(e, "gpu").status is RequestStatus.SATISFIABLE
    assert request(e, "gpu/five").status is RequestStatus.UNSATISFIABLE
    one = request(e, "gpu/one")
    assert sorted(one.eligible) == [
        "gpu-0000-98-00-0",
        "gpu-0000-a9-00-0",
        "gpu-0000-ba-00-0",
        "gpu-0000-cb-00-0",
    ]
    assert reasons(one, GPU0)[0][0] is ReasonKind.NUMA_MISMATCH


def test_missing_numa_attribute_under_match_attribute(tmp_path: Path) -> None:
    """On a VM without NUMA info, GPU and NIC lack numaNode, so matchAttribute numaNode excludes them."""
    root = write_host_tree(tmp_path / "vm", TOPOLOGIES["cloud_vm"])
    devices = devices_from_host(str(root), "vm-1", DRIVER)
    c = claim(exactly("gpu", "gpu"), exactly("nic", "nic"),
              constraints=[{"matchAttribute": "resource.kubernetes.io/numaNode"}])  # fmt: skip
    gpu = request(explain_claim(c, devices, driver_name=DRIVER), "gpu")
    assert gpu.status is RequestStatus.UNSATISFIABLE
    assert reasons(gpu, "gpu-0000-00-04-0") == [
        (ReasonKind.NUMA_MISMATCH, "matchAttribute resource.kubernetes.io/numaNode: device has no numaNode")
    ]


def test_prepared_claim_shows_devices_cdi_ids_cpuset_memset(dgx: list[DeviceView]) -> None:
    """A claim in the journal shows its devices, CDI IDs, cpuset and memset; allocated devices are marked."""
    entry = JournalEntry(
        namespace="ml",
        name="train",
        uid="uid-1",
        devices=(
            PreparedDevice(("gpu",), "node-a", GPU0, (f"{DRIVER}/claim=uid-1-{GPU0}",)),
            PreparedDevice(("cpu",), "node-a", "cpu-numa0", (f"{DRIVER}/claim=uid-1-cpu",)),
        ),
        pinning=ClaimPinning(
            "uid-1", (CpuAssignment("cpu", CpuMode.EXCLUSIVE, frozenset(range(2, 10)), frozenset({0})),)
        ),
    )
    c = numa_aligned_claim()
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": GPU0},
                    {"request": "cpu", "driver": DRIVER, "pool": "node-a", "device": "cpu-numa0"},
                    {"request": "x", "driver": "other.example.com", "pool": "p", "device": "d"},
                ]
            }
        }
    }
    usage = usage_from_journal([entry], dgx, exclude_uid="uid-1")
    assert usage == Usage({}, {})
    e = explain_claim(c, dgx, driver_name=DRIVER, usage=usage, journal_entry=entry)
    assert [(a.request, a.device) for a in e.allocated] == [("gpu", GPU0), ("cpu", "cpu-numa0")]
    assert e.prepared is not None
    assert e.prepared.pinning[0].cpuset == "2-9"
    assert e.prepared.pinning[0].memset == "0"
    text = to_text(e)
    assert f"{DRIVER}/claim=uid-1-{GPU0}" in text
    assert "request cpu: cpuset 2-9 memset 0 (exclusive)" in text
    assert f"+ {GPU0} (allocated)" in text


def test_text_report_summarises_wrong_types(dgx: list[DeviceView]) -> None:
    """The default report lists candidates and folds other device types into one line."""
    text = to_text(explain_claim(claim(exactly("gpu", "gpu", f"{NUMA} == 1")), dgx, driver_name=DRIVER))
    assert "request 'gpu': satisfiable (class gpu.numadra.dev, needs 1, 4 eligible)" in text
    assert f"- {GPU0}: request selector: {NUMA} is 0, wants 1" in text
    assert "- 26 device(s) of another type (cpu, nic): wrong type" in text
    assert "not prepared on this node" in text
