"""The guest side of the VM tier: run numadra on the VM's real kernel and write what it saw.

The guest's PID 1 (``/sbin/numadra-vm-init``, written by ``tests/vm/build-image.sh``) mounts the
host's checkout and site-packages read-only and an output directory read-write (9p), then runs
``python3 -m tests.vm.guest <out>``. This module asserts nothing: it records facts as JSON in
``<out>/result.json``, and the host's tests (``tests/vm/test_numa_vm.py``) compare them with the
topology the VM was booted with. A step that fails records its traceback instead of its facts, so
one broken step never hides the others.

What it records:

* ``discover``: ``numadra discover -o json`` (the real CLI, a subprocess) on the real sysfs; the
  ``-o table`` text and the ``--numa-node-list`` variant from the same CLI run in this process;
* ``sysfs``: the kernel's own view (node cpulists, distances, MemTotal, hugepages, the NIC's
  ``numa_node``), for the report and to tell a numadra bug from a VM set-up mistake;
* ``pins``: for each node, a claim planned by numadra's :class:`CpuPlanner` from the discovered
  inventory, put into a claims journal, and applied by ``numadra hook create-runtime`` (cgroupfs
  backend, the guest's real cgroup v2) to a real cgroup holding a waiting process. Only then does
  that process exec a Python that maps and touches a 64 MiB anonymous buffer; its
  ``/proc/<pid>/numa_maps`` pages per node, ``Cpus_allowed_list`` and ``Mems_allowed_list`` are
  recorded, with the node's ``meminfo`` before and after (the probe: :mod:`tests.vm.probe`);
* ``plain_gpu``: a pod whose two containers ask for ``nvidia.com/gpu: 1`` each and no CPUs, on a
  host tree of this kernel with two stand-in GPUs (node 0, node 1), each container's cpuset from
  numadra's NRI plugin applied to a real cgroup, where the same probe runs
  (:mod:`tests.vm.plain_gpu`).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.vm import probe
from tests.vm.plain_gpu import plain_gpu_facts

CGROUP_ROOT = Path("/sys/fs/cgroup")
POD_UID = "vm-pod-uid"


def _run(argv: list[str], stdin: str = "", timeout: float = 120) -> dict[str, Any]:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    return {"argv": argv, "rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _optional(path: Path) -> str | None:
    return path.read_text().strip() if path.exists() else None


def sysfs_facts() -> dict[str, Any]:
    """The kernel's own topology: what numadra is expected to report, read without numadra."""
    nodes: dict[str, Any] = {}
    for entry in sorted(probe.NODE_SYSFS.glob("node[0-9]*")):
        node = int(entry.name[4:])
        hp = entry / "hugepages"
        nodes[str(node)] = {
            "cpulist": (entry / "cpulist").read_text().strip(),
            "distance": (entry / "distance").read_text().split(),
            "meminfo_kb": probe.meminfo_kb(node),
            "hugepages": {d.name: int((d / "nr_hugepages").read_text()) for d in sorted(hp.iterdir())},
        }
    nics: dict[str, Any] = {}
    for iface in sorted(Path("/sys/class/net").iterdir()):
        device = iface / "device"
        if not device.exists():
            continue
        nics[iface.name] = {
            "pci": device.resolve().name,
            "path": str(device.resolve()),
            "numa_node": _optional(device / "numa_node"),
            "driver": (device / "driver").resolve().name,
        }
    return {
        "kernel": os.uname().release,
        "nodes": nodes,
        "nics": nics,
        "cmdline": Path("/proc/cmdline").read_text().strip(),
        "cgroup_mounts": [
            line for line in Path("/proc/self/mountinfo").read_text().splitlines() if "cgroup" in line
        ],
    }


def _cli_in_process(argv: list[str]) -> str:
    """numadra's CLI in this process (same parser, same code, one Python start-up less: each
    costs tens of seconds under TCG)."""
    from driver.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"numadra {' '.join(argv)}: exit {rc}")
    return buffer.getvalue()


def discover_facts() -> dict[str, Any]:
    """``numadra discover -o json`` as a user runs it (a subprocess); ``-o table`` and the
    ``--numa-node-list`` variant through the same CLI in this process."""
    argv = ["discover", "--node-name", "numadra-vm"]
    as_json = _run([sys.executable, "-m", "driver.cli", *argv, "-o", "json"])
    return {
        "rc": as_json["rc"],
        "stderr": as_json["stderr"],
        "list": json.loads(as_json["stdout"]) if as_json["rc"] == 0 else None,
        "numa_node_list": json.loads(_cli_in_process([*argv, "-o", "json", "--numa-node-list"])),
        "table": _cli_in_process([*argv, "-o", "table"]),
    }


def _journal_and_env(work: Path, node: int) -> tuple[Path, dict[str, str], dict[str, Any]]:
    """Plan a claim of 2 CPUs on ``node`` from the discovered inventory and journal it for POD_UID."""
    from driver.inventory.discovery import discover
    from driver.pinning.planner import CpuPlanner
    from driver.pinning.types import ClaimPinning, CpuRequest, format_cpulist, marker_env
    from driver.state.entry import JournalEntry
    from driver.state.journal import Journal

    inventory = discover("/", use_nvml=False)
    claim_uid = f"vm-claim-node{node}"
    planned = CpuPlanner(lambda: inventory).plan(claim_uid, [CpuRequest("main", (node,), 2)], taken=())
    (assignment,) = planned.assignments
    path = work / f"node{node}" / "journal.log"
    path.parent.mkdir(parents=True)
    journal = Journal(path)
    journal.load()
    journal.put(
        JournalEntry(
            "default",
            claim_uid,
            claim_uid,
            (),
            pinning=ClaimPinning(claim_uid, (assignment,)),
            reserved_pods=(POD_UID,),
        )
    )
    journal.save()
    journal.close()
    plan = {"cpus": format_cpulist(assignment.cpus), "mems": format_cpulist(assignment.mems)}
    return path, marker_env(assignment, claim_uid), plan


def _bundle(work: Path, node: int, env: dict[str, str]) -> Path:
    """An OCI bundle as containerd writes it: the marker env and the pod's annotations."""
    bundle = work / f"node{node}" / "bundle"
    bundle.mkdir()
    config = {
        "ociVersion": "1.2.0",
        "process": {"args": ["python3"], "env": ["PATH=/usr/bin", *(f"{k}={v}" for k, v in env.items())]},
        "annotations": {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-uid": POD_UID,
            "io.kubernetes.cri.sandbox-namespace": "default",
        },
    }
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def pin_facts(work: Path, node: int) -> dict[str, Any]:
    """Pin a waiting process to a claim on ``node`` through ``numadra hook``, then let it allocate."""
    journal, env, plan = _journal_and_env(work, node)
    bundle = _bundle(work, node, env)
    cgroup = CGROUP_ROOT / f"numadra-vm-node{node}"
    cgroup.mkdir()
    # the "container": a shell in its cgroup that waits for the hook, then execs the workload,
    # so every page the workload touches is allocated after the pin (as runc's init does)
    child = probe.spawn()
    try:
        (cgroup / "cgroup.procs").write_text(str(child.pid))
        unpinned = probe.allowed(child.pid)
        state = {"ociVersion": "1.2.0", "id": f"vm-ctr-{node}", "status": "creating", "pid": child.pid}
        state["bundle"] = str(bundle)
        hook = _run(
            [sys.executable, "-m", "driver.cli", "hook", "create-runtime", "--journal", str(journal)],
            json.dumps(state),
        )
        nodes = probe.nodes()
        before = {n: probe.meminfo_kb(n)["MemUsed"] for n in nodes}
        probe.release(child)
        measured = probe.measure(child)
        after = {n: probe.meminfo_kb(n)["MemUsed"] for n in nodes}
        return {
            "plan": plan,
            "env": env,
            "hook": hook,
            "cgroup": {f: (cgroup / f).read_text().strip() for f in ("cpuset.cpus", "cpuset.mems")},
            "before_hook": unpinned,
            **measured,
            "mem_used_delta_kb": {str(n): after[n] - before[n] for n in nodes},
        }
    finally:
        child.kill()
        child.wait(timeout=30)
        probe.remove_cgroup(cgroup)


def _step(result: dict[str, Any], name: str, fn: Callable[[], Any]) -> Any:
    """Run one step; its facts, or its traceback under ``errors``; its time under ``seconds``."""
    started = time.monotonic()
    value = None
    try:
        value = fn()
    except Exception:  # recorded for the host's report; the other steps still run
        result.setdefault("errors", {})[name] = traceback.format_exc()
    result.setdefault("seconds", {})[name] = round(time.monotonic() - started, 3)
    return value


def main(out: Path) -> int:
    """Run every step, write ``result.json`` in ``out`` (the host's share)."""
    work = Path("/tmp/numadra-vm")
    work.mkdir()
    result: dict[str, Any] = {"uptime_s": float(Path("/proc/uptime").read_text().split()[0])}
    result["sysfs"] = _step(result, "sysfs", sysfs_facts)
    result["discover"] = _step(result, "discover", discover_facts)
    # a claim needs CPUs: only nodes with CPUs get one (a memory-only node is the memory device)
    cpu_nodes = [n for n in probe.nodes() if (probe.NODE_SYSFS / f"node{n}" / "cpulist").read_text().strip()]
    result["pins"] = {
        str(n): _step(result, f"pin node{n}", functools.partial(pin_facts, work, n)) for n in cpu_nodes
    }
    # a plain GPU pod, placed by the NRI plugin on a host tree of this kernel with stand-in GPUs
    result["plain_gpu"] = _step(result, "plain gpu pod", functools.partial(plain_gpu_facts, work))
    (out / "result.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
