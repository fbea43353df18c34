"""The driver root's user space: version, libraries with their links, tools, firmware, sockets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver.errors import UntrustedFileError
from driver.inventory.hostfiles import read_host_file, resolve_in_root
from driver.inventory.nvidia_userspace import (
    FILE_OPTIONS,
    IPC_OPTIONS,
    discover_driver_userspace,
    driver_version,
)
from harness.nvidia import NvidiaDriver, write_nvidia_driver

V = "550.54.15"
LIB = "/usr/lib/x86_64-linux-gnu"


def _by_container(tree: Path, driver_root: str = "/") -> dict[str, tuple[str, str]]:
    found = discover_driver_userspace(str(tree), driver_root)
    assert found.usable, found.problem
    return {m.container_path: (m.host_path, m.kind) for m in found.mounts}


def test_libraries_links_tools_and_firmware_at_their_host_paths(tmp_path: Path) -> None:
    """Every versioned library, its SONAME and dev links, the tools and the GSP firmware are found."""
    write_nvidia_driver(tmp_path, NvidiaDriver(version=V))
    mounts = _by_container(tmp_path)
    assert mounts[f"{LIB}/libcuda.so.{V}"] == (f"{LIB}/libcuda.so.{V}", "library")
    assert mounts[f"{LIB}/libnvidia-ml.so.{V}"] == (f"{LIB}/libnvidia-ml.so.{V}", "library")
    # a CUDA program opens libcuda.so.1: the library itself is mounted under that name
    assert mounts[f"{LIB}/libcuda.so.1"] == (f"{LIB}/libcuda.so.{V}", "library link")
    assert mounts[f"{LIB}/libnvidia-nvvm.so.4"] == (f"{LIB}/libnvidia-nvvm.so.{V}", "library link")
    assert mounts[f"{LIB}/libcuda.so"] == (f"{LIB}/libcuda.so.{V}", "library link")
    assert mounts["/usr/bin/nvidia-smi"] == ("/usr/bin/nvidia-smi", "binary")
    assert mounts[f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin"] == (
        f"/usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin",
        "firmware",
    )
    assert f"{LIB}/libc.so.6" not in mounts  # not the driver's
    found = discover_driver_userspace(str(tmp_path))
    assert found.version == V
    assert found.library_dirs == (LIB,)
    assert found.missing == ()
    assert all(m.options == FILE_OPTIONS for m in found.mounts)


def test_driver_root_prefixes_host_paths_only(tmp_path: Path) -> None:
    """A driver container's root (/run/nvidia/driver): host paths carry it, container paths do not."""
    write_nvidia_driver(tmp_path, NvidiaDriver(version=V), driver_root="/run/nvidia/driver")
    mounts = _by_container(tmp_path, "/run/nvidia/driver")
    assert mounts[f"{LIB}/libcuda.so.1"] == (f"/run/nvidia/driver{LIB}/libcuda.so.{V}", "library link")
    assert mounts["/usr/bin/nvidia-smi"] == ("/run/nvidia/driver/usr/bin/nvidia-smi", "binary")


def test_absolute_links_resolve_inside_the_driver_root(tmp_path: Path) -> None:
    """An absolute symlink of the driver's files points into the driver root, never out of it."""
    root = write_nvidia_driver(tmp_path, NvidiaDriver(version=V), driver_root="/drv")
    link = root / LIB.strip("/") / "libnvidia-ml.so.1"
    link.unlink()
    link.symlink_to(f"{LIB}/libnvidia-ml.so.{V}")  # absolute: the driver root's own /usr/lib/...
    assert _by_container(tmp_path, "/drv")[f"{LIB}/libnvidia-ml.so.1"] == (
        f"/drv{LIB}/libnvidia-ml.so.{V}",
        "library link",
    )


def test_open_module_version_from_proc(tmp_path: Path) -> None:
    """Without /sys/module/nvidia/version the proc file's (open) kernel module line gives the version."""
    write_nvidia_driver(tmp_path, NvidiaDriver(version="580.65.06", sys_version=False, open_module=True))
    assert driver_version(str(tmp_path))[0] == "580.65.06"
    assert discover_driver_userspace(str(tmp_path)).usable


def test_no_module_version_is_not_usable_and_says_where_it_looked(tmp_path: Path) -> None:
    """No version, no driver: the reason names both files."""
    write_nvidia_driver(tmp_path, NvidiaDriver(sys_version=False, proc_version=False))
    found = discover_driver_userspace(str(tmp_path))
    assert not found.usable
    assert "sys/module/nvidia/version" in found.problem
    assert "proc/driver/nvidia/version" in found.problem


def test_libraries_of_another_version_do_not_count(tmp_path: Path) -> None:
    """Libraries left from an older driver do not match the loaded module: nothing to mount."""
    write_nvidia_driver(tmp_path, NvidiaDriver(version="535.1.1"))
    (tmp_path / "sys/module/nvidia/version").write_text(f"{V}\n")
    found = discover_driver_userspace(str(tmp_path))
    assert not found.usable
    assert found.missing == (f"libcuda.so.{V}", f"libnvidia-ml.so.{V}")
    assert f"libcuda.so.{V}" in found.problem


def test_missing_nvml_is_named_but_cuda_still_usable(tmp_path: Path) -> None:
    """A driver root without libnvidia-ml: usable for CUDA, and the missing file is named."""
    write_nvidia_driver(tmp_path, NvidiaDriver(version=V, libraries=(("libcuda.so", "1"),)))
    found = discover_driver_userspace(str(tmp_path))
    assert found.usable
    assert found.missing == (f"libnvidia-ml.so.{V}",)


def test_persistenced_socket_is_mounted_with_ipc_options(tmp_path: Path) -> None:
    """The persistence daemon's socket is a read-write bind (sockets are written to)."""
    write_nvidia_driver(tmp_path, NvidiaDriver(version=V, persistenced_socket=True))
    found = discover_driver_userspace(str(tmp_path))
    ipc = [m for m in found.mounts if m.kind == "ipc"]
    assert [(m.container_path, m.options) for m in ipc] == [("/run/nvidia-persistenced/socket", IPC_OPTIONS)]


def test_non_merged_usr_host(tmp_path: Path) -> None:
    """A host without lib -> usr/lib: the firmware under /lib/firmware is still found."""
    write_nvidia_driver(tmp_path, NvidiaDriver(version=V, merged_usr=False))
    mounts = _by_container(tmp_path)
    assert mounts[f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin"] == (
        f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin",
        "firmware",
    )


def test_read_host_file_refuses_links_fifos_and_big_files(tmp_path: Path) -> None:
    """The safe read: no symbolic link, no FIFO (never blocks), nothing over the cap."""
    real = tmp_path / "real"
    real.write_text("x" * 10)
    assert read_host_file(str(real), limit=10) == b"x" * 10
    with pytest.raises(UntrustedFileError, match="more than the"):
        read_host_file(str(real), limit=9)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OSError, match=r"Too many levels|symbolic"):
        read_host_file(str(tmp_path / "link"), limit=100)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        read_host_file(str(tmp_path / "fifo"), limit=100)


def test_resolve_in_root_never_leaves_the_root(tmp_path: Path) -> None:
    """``..`` and absolute targets stay inside the root; a loop ends with ELOOP."""
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "usr/lib/up").symlink_to("../../../../../../etc")
    (tmp_path / "etc").mkdir()
    (tmp_path / "usr/lib/abs").symlink_to("/etc")
    assert resolve_in_root(str(tmp_path), "/lib") == "/usr/lib"
    assert resolve_in_root(str(tmp_path), "/lib/up") == "/etc"
    assert resolve_in_root(str(tmp_path), "/lib/abs") == "/etc"
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OSError, match="too many"):
        resolve_in_root(str(tmp_path), "/a")
    with pytest.raises(FileNotFoundError):
        resolve_in_root(str(tmp_path), "/usr/nothing")


def test_resolve_with_a_directory_cache_gives_the_same_answers(tmp_path: Path) -> None:
    """The per-check cache of parent directories changes the cost, never the result."""
    root = write_nvidia_driver(tmp_path, NvidiaDriver(version=V))
    dirs: dict[str, str] = {}
    for path in (
        "/lib/x86_64-linux-gnu/libcuda.so.1",
        f"{LIB}/libcuda.so",
        "/bin/nvidia-smi",
        "/lib/../lib64",
    ):
        assert resolve_in_root(str(root), path, dirs) == resolve_in_root(str(root), path)
    assert dirs["/lib/x86_64-linux-gnu"] == LIB
    with pytest.raises(FileNotFoundError):
        resolve_in_root(str(root), "/lib/x86_64-linux-gnu/libgone.so", dirs)
