"""Fixtures of the pinning tests.

``cgroup_process``: a real cpuset cgroup with a real ``sleep`` process inside, removed again after
each test. ``node``: a whole pinning node (:func:`make_node`: the NRI plugin on a real unix socket,
the fake runtime and apiserver of ``harness/``), closed after each test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from driver.errors import PinningError
from driver.pinning.cgroupfs import CpusetHierarchy, detect_cpuset_hierarchy
from driver.pinning.types import parse_cpulist

from ._node import PinningNode, make_node


@dataclass(frozen=True)
class CgroupProcess:
    """A test cgroup (relative path and directory) and the pid of the process inside it."""

    hierarchy: CpusetHierarchy
    cgroup: str
    directory: Path
    pid: int
    parent_cpus: frozenset[int]
    parent_mems: frozenset[int]

    def status(self, field: str) -> str:
        """One field of /proc/<pid>/status, e.g. Cpus_allowed_list."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == field:
                return value.strip()
        raise KeyError(field)


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _hierarchy_or_skip() -> CpusetHierarchy:
    if os.geteuid() != 0:
        pytest.skip("cgroup tests need root (they create cgroups under the cpuset hierarchy)")
    try:
        return detect_cpuset_hierarchy()
    except PinningError as exc:
        pytest.skip(f"no cpuset controller on this host: {exc}")


@pytest.fixture
def cgroup_process() -> Iterator[CgroupProcess]:
    """Create <cpuset root>/numadra-test-<id>, start ``sleep`` in it; kill and rmdir afterwards."""
    hierarchy = _hierarchy_or_skip()
    root = hierarchy.root
    name = f"numadra-test-{uuid.uuid4().hex[:10]}"
    directory = root / name
    if hierarchy.version == 2:
        control = root / "cgroup.subtree_control"
        if "cpuset" not in control.read_text().split():
            _write(control, "+cpuset")
        parent_cpus = (root / "cpuset.cpus.effective").read_text().strip()
        parent_mems = (root / "cpuset.mems.effective").read_text().strip()
    else:
        parent_cpus = (root / "cpuset.cpus").read_text().strip()
        parent_mems = (root / "cpuset.mems").read_text().strip()
    directory.mkdir()
    proc: subprocess.Popen[bytes] | None = None
    try:
        if hierarchy.version == 1:
            # a new v1 cpuset starts empty and accepts no task until both are set
            _write(directory / "cpuset.mems", parent_mems)
            _write(directory / "cpuset.cpus", parent_cpus)
        proc = subprocess.Popen(["sleep", "300"])
        _write(directory / "cgroup.procs", str(proc.pid))
        yield CgroupProcess(
            hierarchy=hierarchy,
            cgroup=f"/{name}",
            directory=directory,
            pid=proc.pid,
            parent_cpus=parse_cpulist(parent_cpus),
            parent_mems=parse_cpulist(parent_mems),
        )
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        for _ in range(50):  # the kernel frees the cgroup shortly after its last task exits
            try:
                directory.rmdir()
                break
            except OSError:
                time.sleep(0.05)
        with contextlib.suppress(FileNotFoundError):
            directory.rmdir()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[PinningNode]:
    sock = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    n = make_node(tmp_path, sock)
    yield n
    n.close()
    n.runtime.close()
    n.api.close()
    shutil.rmtree(sock, ignore_errors=True)
