"""Stand-ins for an NVIDIA node's user space: a driver root in a host tree, and a toolkit-style CDI spec.

:func:`write_nvidia_driver` adds to a host tree (:func:`harness.hosttree.write_host_tree`)
what the NVIDIA driver installs: the kernel module's version files (``sys/module/nvidia/version``,
``proc/driver/nvidia/version``), the user-space libraries with their version suffix and the SONAME
and development links the installer makes, ``nvidia-smi`` and friends, the GSP firmware, and
optionally the ``nvidia-persistenced`` socket. Every file's content names it, so a test can tell
which file a container got. The layout is a merged-usr host (``lib -> usr/lib``), as current
distributions ship, unless told otherwise.

:func:`toolkit_spec` returns a CDI spec shaped like the one ``nvidia-ctk cdi generate`` writes
(kind ``nvidia.com/gpu``, one device per GPU index and per UUID, plus ``all``; the common edits
carry the control device nodes, the driver's files as read-only mounts, ``NVIDIA_VISIBLE_DEVICES=void``
and the ``nvidia-cdi-hook`` hooks). It is a fake of the toolkit's output (no toolkit exists here),
built from the same :class:`NvidiaDriver` so that its paths exist in the tree.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "NvidiaDriver",
    "ToolkitGpu",
    "driver_file_content",
    "make_char_devices",
    "toolkit_spec",
    "write_nvidia_driver",
    "write_toolkit_spec",
]

#: library base name -> the SONAME suffix its link carries (``libnvidia-nvvm.so.4``)
DEFAULT_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("libcuda.so", "1"),
    ("libnvidia-ml.so", "1"),
    ("libnvidia-ptxjitcompiler.so", "1"),
    ("libnvidia-nvvm.so", "4"),
    ("libcudadebugger.so", "1"),
    ("libnvidia-opencl.so", "1"),
)


@dataclass(frozen=True)
class NvidiaDriver:
    """One installed driver: its version and which of its files exist where."""

    version: str = "550.54.15"
    #: where the libraries are, under the driver root
    libdir: str = "/usr/lib/x86_64-linux-gnu"
    libraries: tuple[tuple[str, str], ...] = DEFAULT_LIBRARIES
    #: development links ``<base>`` -> ``<base>.<soname>`` (the installer makes libcuda.so)
    dev_links: tuple[str, ...] = ("libcuda.so",)
    binaries: tuple[str, ...] = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced")
    firmware: tuple[str, ...] = ("gsp_ga10x.bin", "gsp_tu10x.bin")
    sys_version: bool = True  # /sys/module/nvidia/version
    proc_version: bool = True  # /proc/driver/nvidia/version
    open_module: bool = False  # the open kernel module's wording in /proc/driver/nvidia/version
    merged_usr: bool = True  # lib -> usr/lib, lib64 -> usr/lib64, bin -> usr/bin
    persistenced_socket: bool = False
    #: other files of the library directory (not the driver's), name -> content
    others: tuple[tuple[str, str], ...] = (("libc.so.6", "glibc"),)
    extra: tuple[tuple[str, str], ...] = field(default=())  # (path under the driver root, content)


def driver_file_content(name: str, version: str) -> str:
    """What a stand-in driver file holds: its own name and the driver version."""
    return f"stand-in {name} {version}\n"


def _write(path: Path, content: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    path.chmod(mode)


def _symlink(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def write_nvidia_driver(host_root: Path, driver: NvidiaDriver, driver_root: str = "/") -> Path:
    """Add ``driver`` to the host tree at ``host_root``, its files under ``driver_root``; returns that dir."""
    v = driver.version
    if driver.sys_version:
        _write(host_root / "sys/module/nvidia/version", v + "\n")
    if driver.proc_version:
        module = "Open Kernel Module for x86_64" if driver.open_module else "Kernel Module"
        _write(
            host_root / "proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX x86_64 {module}  {v}  Tue Mar  5 22:23:56 UTC 2024\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
        )
    root = host_root / driver_root.strip("/") if driver_root.strip("/") else host_root
    root.mkdir(parents=True, exist_ok=True)
    if driver.merged_usr:
        for name in ("lib", "lib64", "bin", "sbin"):
            (root / "usr" / name).mkdir(parents=True, exist_ok=True)
            if not (root / name).is_symlink():
                _symlink(root / name, f"usr/{name}")
    libdir = root / driver.libdir.strip("/")
    for base, soname in driver.libraries:
        _write(libdir / f"{base}.{v}", driver_file_content(f"{base}.{v}", v))
        _symlink(libdir / f"{base}.{soname}", f"{base}.{v}")
    sonames = dict(driver.libraries)
    for base in driver.dev_links:
        if base in sonames:
            _symlink(libdir / base, f"{base}.{sonames[base]}")
    for name, content in driver.others:
        _write(libdir / name, content + "\n")
    for name in driver.binaries:
        _write(root / "usr/bin" / name, driver_file_content(name, v), 0o755)
    for name in driver.firmware:
        _write(root / "usr/lib/firmware/nvidia" / v / name, driver_file_content(name, v))
        if not driver.merged_usr:
            _write(root / "lib/firmware/nvidia" / v / name, driver_file_content(name, v))
    if driver.persistenced_socket:
        path = root / "run/nvidia-persistenced/socket"
        path.parent.mkdir(parents=True, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(os.fspath(path))
        finally:
            sock.close()
    for rel, content in driver.extra:
        _write(root / rel.strip("/"), content)
    return root


@dataclass(frozen=True)
class ToolkitGpu:
    """One GPU as the toolkit's spec names it: NVML index, UUID and device minor."""

    index: int
    uuid: str
    minor: int


def _mount(host: str, container: str) -> dict[str, Any]:
    return {
        "hostPath": host,
        "containerPath": container,
        "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
    }


def toolkit_spec(
    gpus: Sequence[ToolkitGpu],
    driver: NvidiaDriver,
    *,
    driver_root: str = "/",
    hook_path: str | None = "/usr/bin/nvidia-cdi-hook",
    dev_root: str = "",
) -> dict[str, Any]:
    """A spec as ``nvidia-ctk cdi generate`` shapes it (see the module docstring).

    ``dev_root`` prefixes the device nodes' ``hostPath`` (the path in the container stays
    ``/dev/...``): a test that may not create ``/dev/nvidiaN`` on the host points it elsewhere.
    """
    prefix = driver_root.rstrip("/")
    v = driver.version

    def node(path: str) -> dict[str, Any]:
        return {"path": path, "hostPath": f"{dev_root}{path}"} if dev_root else {"path": path}

    devices: list[dict[str, Any]] = []
    for gpu in gpus:
        edits = {"deviceNodes": [node(f"/dev/nvidia{gpu.minor}")]}
        devices.append({"name": str(gpu.index), "containerEdits": edits})
        devices.append({"name": gpu.uuid, "containerEdits": edits})
    devices.append(
        {"name": "all", "containerEdits": {"deviceNodes": [node(f"/dev/nvidia{g.minor}") for g in gpus]}}
    )
    mounts = [
        _mount(f"{prefix}{driver.libdir}/{base}.{v}", f"{driver.libdir}/{base}.{v}")
        for base, _ in driver.libraries
    ]
    mounts += [_mount(f"{prefix}/usr/bin/{name}", f"/usr/bin/{name}") for name in driver.binaries]
    common: dict[str, Any] = {
        "env": [f"NVIDIA_CTK_LIBCUDA_DIR={driver.libdir}", "NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [node("/dev/nvidiactl"), node("/dev/nvidia-uvm"), node("/dev/nvidia-uvm-tools")],
        "mounts": mounts,
    }
    if hook_path is not None:
        common["hooks"] = [
            {
                "hookName": "createContainer",
                "path": hook_path,
                "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", driver.libdir],
                "env": ["NVIDIA_CTK_DEBUG=false"],
            }
        ]
    return {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices, "containerEdits": common}


def write_toolkit_spec(path: Path, spec: dict[str, Any]) -> Path:
    """Write ``spec`` as YAML (the toolkit's default format) to ``path``; returns ``path``.

    The toolkit's Go encoder never writes anchors or aliases (numadra refuses them), but PyYAML
    writes one for every object ``spec`` holds twice: the copy through JSON holds none twice.
    """
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(json.loads(json.dumps(spec)), sort_keys=False), encoding="utf-8")
    return path


def make_char_devices(host_root: Path, paths: Sequence[str], *, major: int = 1, minor: int = 3) -> None:
    """Turn ``paths`` (host paths) of a tree into character devices (``/dev/null``'s numbers by default).

    Host trees write device nodes as plain files; a check that wants a character device needs a
    real one. Needs CAP_MKNOD (root).
    """
    for path in paths:
        node = host_root / path.strip("/")
        node.parent.mkdir(parents=True, exist_ok=True)
        if node.is_symlink() or node.exists():
            node.unlink()
        os.mknod(node, 0o666 | 0o020000, os.makedev(major, minor))  # S_IFCHR
        node.chmod(0o666)  # whatever the umask
