"""Kernel effect of the cgroupfs and hook backends on a real cgroup with a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from driver.errors import PinningError
from driver.inventory.model import Cpu, Inventory, NumaNode
from driver.pinning.backend import PinTarget
from driver.pinning.cgroupfs import CgroupfsBackend
from driver.pinning.planner import CpuPlanner
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode, CpuRequest, format_cpulist, marker_env
from driver.state.entry import JournalEntry
from driver.state.journal import Journal
from tests.integration.pinning.conftest import CgroupProcess

pytestmark = pytest.mark.cgroup

REPO = Path(__file__).resolve().parents[3]


def _two_cpus(cg: CgroupProcess) -> tuple[int, int]:
    cpus = sorted(cg.parent_cpus)
    if len(cpus) < 2:
        pytest.skip("needs at least 2 CPUs in the cpuset root to observe a change")
    return cpus[0], cpus[-1]


def _assignment(cpus: set[int], mems: set[int]) -> CpuAssignment:
    return CpuAssignment(request="main", mode=CpuMode.EXCLUSIVE, cpus=frozenset(cpus), mems=frozenset(mems))


def _mems_pair(cg: CgroupProcess) -> tuple[int, int]:
    """Two memory nodes to move between; on a one-node host both are that node."""
    mems = sorted(cg.parent_mems)
    return mems[0], mems[-1]


def test_cgroupfs_backend_pins_and_releases(cg: CgroupProcess) -> None:
    """cgroupfs apply moves the process to the chosen CPU/node; release widens it again."""
    first, last = _two_cpus(cg)
    node_a, node_b = _mems_pair(cg)
    assert cg.status("Cpus_allowed_list") == format_cpulist(cg.parent_cpus)
    backend = CgroupfsBackend(cg.hierarchy)

    backend.apply(PinTarget(cgroup=cg.cgroup), _assignment({last}, {node_b}))
    assert cg.status("Cpus_allowed_list") == str(last)
    assert cg.status("Mems_allowed_list") == str(node_b)
    assert os.sched_getaffinity(cg.pid) == {last}

    backend.apply(PinTarget(pid=cg.pid), _assignment({first}, {node_a}))  # cgroup found via /proc
    assert cg.status("Cpus_allowed_list") == str(first)
    assert cg.status("Mems_allowed_list") == str(node_a)

    backend.release(PinTarget(cgroup=cg.cgroup))
    assert cg.status("Cpus_allowed_list") == format_cpulist(cg.parent_cpus)
    assert cg.status("Mems_allowed_list") == format_cpulist(cg.parent_mems)


def test_cgroupfs_backend_reports_kernel_refusal_with_path(cg: CgroupProcess) -> None:
    """A node the host lacks is refused by the kernel; the error names the cpuset.mems path."""
    missing_node = max(cg.parent_mems) + 1
    backend = CgroupfsBackend(cg.hierarchy)
    with pytest.raises(PinningError, match=rf"write '{missing_node}' to {cg.directory}/cpuset.mems"):
        backend.apply(PinTarget(cgroup=cg.cgroup), _assignment(set(cg.parent_cpus), {missing_node}))
    assert cg.status("Mems_allowed_list") == format_cpulist(cg.parent_mems)


def _hook(cg: CgroupProcess, bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    state = {"ociVersion": "1.2.0", "id": "ctr-1", "status": "creating", "pid": cg.pid, "bundle": str(bundle)}
    return subprocess.run(
        [sys.executable, "-m", "driver.cli", "hook", "create-runtime", *args],
        input=json.dumps(state),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def _bundle(tmp_path: Path, env: list[str], pod_uid: str = "") -> Path:
    """A bundle whose config.json has ``env``; ``pod_uid``: the pod annotations containerd sets."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    config: dict[str, object] = {
        "ociVersion": "1.2.0",
        "process": {"args": ["sleep", "300"], "env": ["PATH=/usr/bin", *env]},
    }
    if pod_uid:
        config["annotations"] = {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-uid": pod_uid,
            "io.kubernetes.cri.sandbox-namespace": "default",
        }
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


POD_UID = "pod-uid-1"


def _journal(tmp_path: Path, assignment: CpuAssignment, claim_uid: str = "claim-uid-1") -> Path:
    """A claims journal holding one claim with ``assignment``, reserved for pod POD_UID."""
    path = tmp_path / "state" / "journal.log"
    path.parent.mkdir()
    journal = Journal(path)
    journal.load()
    pinning = ClaimPinning(claim_uid, (assignment,))
    journal.put(JournalEntry("default", "cpus", claim_uid, (), pinning=pinning, reserved_pods=(POD_UID,)))
    journal.save()
    journal.close()
    return path


def test_hook_pins_from_bundle_env_checked_against_the_journal(cg: CgroupProcess, tmp_path: Path) -> None:
    """Env mode: the pod holds the claim, so the hook pins to the journal's CPUs/nodes, not the env's."""
    first, last = _two_cpus(cg)
    _, node_b = _mems_pair(cg)
    journal = _journal(tmp_path, _assignment({last}, {node_b}))
    env = ["NUMADRA_CPUS=" + str(first), "NUMADRA_MEMS=" + str(node_b), "NUMADRA_CLAIM_UID=claim-uid-1"]
    bundle = _bundle(tmp_path, [*env, "NUMADRA_REQUEST=main"], pod_uid=POD_UID)
    result = _hook(cg, bundle, "--journal", str(journal))
    assert result.returncode == 0, result.stderr
    assert cg.status("Cpus_allowed_list") == str(last)
    assert cg.status("Mems_allowed_list") == str(node_b)
    assert (cg.directory / "cpuset.cpus").read_text().strip() == str(last)


@pytest.mark.parametrize(
    ("pod_uid", "with_journal", "message"),
    [
        pytest.param(POD_UID, False, "--journal", id="no-journal"),
        pytest.param("pod-uid-evil", True, "not for this pod", id="other-pod"),
        pytest.param("", True, "cannot tell its pod", id="no-pod-annotation"),
    ],
)
def test_hook_refuses_env_marker_it_cannot_bind(
    cg: CgroupProcess, tmp_path: Path, pod_uid: str, with_journal: bool, message: str
) -> None:
    """A forged marker env (copied by a pod that does not hold the claim) fails the container."""
    _, last = _two_cpus(cg)
    journal = _journal(tmp_path, _assignment({last}, set(cg.parent_mems)))
    env = [f"NUMADRA_CPUS={last}", "NUMADRA_CLAIM_UID=claim-uid-1", "NUMADRA_REQUEST=main"]
    args = ["--journal", str(journal)] if with_journal else []
    result = _hook(cg, _bundle(tmp_path, env, pod_uid=pod_uid), *args)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert cg.status("Cpus_allowed_list") == format_cpulist(cg.parent_cpus)


def test_hook_args_override_env(cg: CgroupProcess, tmp_path: Path) -> None:
    """--cpus/--mems from the CDI hook entry win over the bundle env."""
    first, last = _two_cpus(cg)
    node_a, _ = _mems_pair(cg)
    bundle = _bundle(tmp_path, [f"NUMADRA_CPUS={last}"])
    result = _hook(cg, bundle, "--cpus", str(first), "--mems", str(node_a))
    assert result.returncode == 0, result.stderr
    assert cg.status("Cpus_allowed_list") == str(first)
    assert cg.status("Mems_allowed_list") == str(node_a)


def test_hook_without_marker_changes_nothing(cg: CgroupProcess, tmp_path: Path) -> None:
    """A container without the marker env is left alone and the hook succeeds."""
    result = _hook(cg, _bundle(tmp_path, []))
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stderr
    assert cg.status("Cpus_allowed_list") == format_cpulist(cg.parent_cpus)


def test_hook_failure_is_one_line_nonzero(cg: CgroupProcess, tmp_path: Path) -> None:
    """An impossible CPU fails cgroup write and affinity fallback: exit 1 with one stderr line."""
    missing_cpu = max(cg.parent_cpus) + 64
    result = _hook(cg, _bundle(tmp_path, []), "--cpus", str(missing_cpu))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cpuset.cpus" in lines[0] and "sched_setaffinity" in lines[0]
    assert cg.status("Cpus_allowed_list") == format_cpulist(cg.parent_cpus)


@pytest.fixture
def cg(cgroup_process: CgroupProcess) -> CgroupProcess:
    """Short alias of the real cgroup + process fixture."""
    return cgroup_process


def test_claim_chain_planner_marker_env_hook(cg: CgroupProcess, tmp_path: Path) -> None:
    """A planned claim's CDI env (marker_env) given to the hook pins the process to the plan."""
    cpus = tuple(sorted(cg.parent_cpus))
    if len(cpus) < 2:
        pytest.skip("needs at least 2 CPUs in the cpuset root to observe a change")
    node = min(cg.parent_mems)
    host = Inventory(
        cpus=tuple(
            Cpu(id=c, core_id=c, package_id=0, die_id=0, numa_node=node, l3_id=0, thread_siblings=(c,))
            for c in cpus
        ),
        numa_nodes=(NumaNode(id=node, cpus=cpus, memory_bytes=1 << 30),),
    )
    planner = CpuPlanner(lambda: host, reserved_cpus=(cpus[0],))  # the system keeps the first CPU
    (assignment,) = planner.plan("claim-uid-1", [CpuRequest("main", (node,), 1)], taken=()).assignments
    env = marker_env(assignment, "claim-uid-1")
    bundle = _bundle(tmp_path, [f"{k}={v}" for k, v in env.items()], pod_uid=POD_UID)
    result = _hook(cg, bundle, "--journal", str(_journal(tmp_path, assignment)))
    assert result.returncode == 0, result.stderr
    assert cg.status("Cpus_allowed_list") == env["NUMADRA_CPUS"] == format_cpulist(assignment.cpus)
    assert cg.status("Mems_allowed_list") == env["NUMADRA_MEMS"] == str(node)
    assert cpus[0] not in os.sched_getaffinity(cg.pid)
