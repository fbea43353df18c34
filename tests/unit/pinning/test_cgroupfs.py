"""cgroup layout detection, /proc parsing and the v2 write path on a plain directory tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.errors import PinningError
from driver.pinning.backend import NoopBackend, PinningBackend, PinningKind, PinTarget
from driver.pinning.cgroupfs import (
    CgroupfsBackend,
    CgroupLayout,
    CpusetHierarchy,
    detect_cpuset_hierarchy,
    detect_layout,
    parse_proc_cgroup,
)
from driver.pinning.hook import HookBackend
from driver.pinning.types import CpuAssignment, CpuMode

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1 = "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
NONE = "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"


def _v2_mountinfo(root: Path) -> str:
    return f"30 23 0:27 / {root} rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize(
    ("text", "layout"),
    [
        pytest.param(HYBRID, CgroupLayout.HYBRID, id="hybrid"),
        pytest.param(V1, CgroupLayout.V1, id="v1"),
        pytest.param(_v2_mountinfo(Path("/sys/fs/cgroup")), CgroupLayout.V2, id="v2"),
        pytest.param(NONE, CgroupLayout.NONE, id="none"),
    ],
)
def test_detect_layout(text: str, layout: CgroupLayout) -> None:
    """The layout is told apart from the cgroup mounts in mountinfo."""
    assert detect_layout(text) is layout


def test_hybrid_uses_v1_cpuset(tmp_path: Path) -> None:
    """On a hybrid host the v1 cpuset mount owns cpuset (the v2 mount lacks the controller)."""
    mi = tmp_path / "mountinfo"
    mi.write_text(HYBRID)
    assert detect_cpuset_hierarchy(mi) == CpusetHierarchy(1, Path("/sys/fs/cgroup/cpuset"))


def test_v2_needs_cpuset_in_controllers(tmp_path: Path) -> None:
    """A cgroup2 mount is used only when cgroup.controllers offers cpuset; else a clear error."""
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    mi = tmp_path / "mountinfo"
    mi.write_text(_v2_mountinfo(root))
    with pytest.raises(PinningError, match="no cpuset controller"):
        detect_cpuset_hierarchy(mi)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert detect_cpuset_hierarchy(mi) == CpusetHierarchy(2, root)


@pytest.mark.parametrize(
    ("text", "version", "path"),
    [
        pytest.param("4:memory:/x\n3:cpuset:/kubepods/pod1/abc\n0::/\n", 1, "/kubepods/pod1/abc", id="v1"),
        pytest.param("3:cpuset,cpu:/a\n", 1, "/a", id="v1-comounted"),
        pytest.param(
            "0::/kubepods.slice/cri-containerd-1.scope\n",
            2,
            "/kubepods.slice/cri-containerd-1.scope",
            id="v2",
        ),
    ],
)
def test_parse_proc_cgroup(text: str, version: int, path: str) -> None:
    """The cpuset cgroup path is read from the v1 cpuset line or the v2 ``0::`` line."""
    assert parse_proc_cgroup(text, version) == path


def test_parse_proc_cgroup_missing() -> None:
    """No matching line is an error that shows the text."""
    with pytest.raises(PinningError, match="no cgroup v1 cpuset line"):
        parse_proc_cgroup("4:memory:/x\n", 1)


def _v2_tree(tmp_path: Path) -> tuple[CgroupfsBackend, Path]:
    root = tmp_path / "cg"
    leaf = root / "kubepods" / "pod1" / "ctr"
    leaf.mkdir(parents=True)
    for d in (root, root / "kubepods", root / "kubepods" / "pod1"):
        (d / "cgroup.subtree_control").write_text("cpu memory\n")
    (root / "kubepods" / "cgroup.subtree_control").write_text("cpuset cpu\n")
    for name in ("cpuset.cpus", "cpuset.mems"):
        (leaf / name).write_text("")
    return CgroupfsBackend(CpusetHierarchy(2, root)), root


def test_v2_enables_cpuset_on_missing_ancestors_then_writes(tmp_path: Path) -> None:
    """v2: '+cpuset' goes to every ancestor lacking it; then mems and cpus are written."""
    backend, root = _v2_tree(tmp_path)
    a = CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({2, 3, 5}), frozenset({1}))
    backend.apply(PinTarget(cgroup="/kubepods/pod1/ctr"), a)
    assert (root / "cgroup.subtree_control").read_text() == "+cpuset"
    assert (root / "kubepods" / "cgroup.subtree_control").read_text() == "cpuset cpu\n"  # already on
    assert (root / "kubepods" / "pod1" / "cgroup.subtree_control").read_text() == "+cpuset"
    assert (root / "kubepods" / "pod1" / "ctr" / "cpuset.cpus").read_text() == "2-3,5"
    assert (root / "kubepods" / "pod1" / "ctr" / "cpuset.mems").read_text() == "1"


def test_v2_release_writes_inherit(tmp_path: Path) -> None:
    """v2 release empties both files, which means 'inherit from the parent'."""
    backend, root = _v2_tree(tmp_path)
    leaf = root / "kubepods" / "pod1" / "ctr"
    (leaf / "cpuset.cpus").write_text("3")
    backend.release(PinTarget(cgroup="/kubepods/pod1/ctr"))
    assert (leaf / "cpuset.cpus").read_text() == ""


def test_v2_pid_resolved_through_proc(tmp_path: Path) -> None:
    """A pid target is resolved via <proc>/<pid>/cgroup (the v2 0:: line)."""
    _, root = _v2_tree(tmp_path)
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("0::/kubepods/pod1/ctr\n")
    backend = CgroupfsBackend(CpusetHierarchy(2, root), proc_root=proc)
    assert backend.resolve(PinTarget(pid=42)) == root / "kubepods" / "pod1" / "ctr"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        pytest.param(PinTarget(), "needs a cgroup path or a pid", id="no-handle"),
        pytest.param(PinTarget(cgroup="/"), "refusing to write the root cgroup", id="root"),
        pytest.param(PinTarget(cgroup="/nope"), "does not exist", id="missing"),
    ],
)
def test_resolve_errors(tmp_path: Path, target: PinTarget, message: str) -> None:
    """Targets without a handle, the root cgroup and missing cgroups are refused with the path."""
    backend, _ = _v2_tree(tmp_path)
    with pytest.raises(PinningError, match=message):
        backend.resolve(target)


def test_backends_satisfy_protocol() -> None:
    """Every backend implements PinningBackend and reports its --pinning kind."""
    backends: list[PinningBackend] = [
        NoopBackend(),
        CgroupfsBackend(CpusetHierarchy(1, Path("/x"))),
        HookBackend(),
    ]
    assert [b.kind for b in backends] == [PinningKind.OFF, PinningKind.CGROUPFS, PinningKind.HOOK]
    assert all(isinstance(b, PinningBackend) for b in backends)
