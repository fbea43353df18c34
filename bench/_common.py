"""What the benches share: the claim every prepare measures, the VFs it holds, the driver served
from claims in memory, the RSS probe, and the node's NVIDIA side (:func:`nvidia_node`)."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from driver.claims import ClaimsDriver
    from driver.claims.hostedits import HostEdits
    from driver.inventory.model import Inventory
    from driver.kubelet.claims import ClaimFetcher
    from harness.hostspec import Topology

__all__ = [
    "NODE_KINDS",
    "NodeKind",
    "claimed_vfs",
    "cpu_claim",
    "gpu_claim",
    "host_edits",
    "in_memory_driver",
    "lay_nvidia_userspace",
    "nic_cpu_claim",
    "nvidia_node",
    "nvidia_topology",
    "rss_mib",
    "toolkit_spec_of_node",
]

#: the node a bench's claims are prepared on (``--node``):
#: ``nvidia``: NVIDIA GPUs, their driver's files and the toolkit's CDI spec, as a GPU node runs;
#: ``bare``: no GPU at all (the prepare path reads nothing of NVIDIA's);
#: ``no-userspace``: NVIDIA GPUs and their kernel driver, no user space (no libraries, no toolkit
#: spec): numadra warns about every claim holding one of its GPUs, a log line and an Event
NodeKind = Literal["nvidia", "bare", "no-userspace"]
NODE_KINDS: tuple[NodeKind, ...] = ("nvidia", "bare", "no-userspace")

#: the driver a real 550 install puts in its library dir (``nvidia-ctk cdi generate`` mounts each)
_LIBRARIES: tuple[tuple[str, str], ...] = (
    *(
        (f"lib{name}.so", "1")
        for name in (
            "cuda",
            "cudadebugger",
            "EGL_nvidia",
            "GLESv1_CM_nvidia",
            "GLESv2_nvidia",
            "GLX_nvidia",
            "nvcuvid",
            "nvidia-allocator",
            "nvidia-cfg",
            "nvidia-eglcore",
            "nvidia-encode",
            "nvidia-fbc",
            "nvidia-glcore",
            "nvidia-glsi",
            "nvidia-glvkspirv",
            "nvidia-gpucomp",
            "nvidia-ml",
            "nvidia-ngx",
            "nvidia-nscq",
            "nvidia-opencl",
            "nvidia-opticalflow",
            "nvidia-pkcs11-openssl3",
            "nvidia-ptxjitcompiler",
            "nvidia-rtcore",
            "nvidia-tls",
            "nvoptix",
        )
    ),
    ("libnvidia-nvvm.so", "4"),
)
_BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
_FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
#: the GPUs' UUIDs, by index, as the driver's information files say them
_UUIDS = tuple(f"GPU-{k:08x}-{k:04x}-4000-8000-0000000{k:05x}" for k in range(64))


def nvidia_topology(topology: Topology, gpus: int = 8) -> Topology:
    """``topology`` with NVIDIA GPUs as a real node's: each with a UUID, a minor and its DRM nodes.

    Its NVIDIA GPUs keep their bus IDs; a topology without any gets ``gpus`` of them on buses
    0xe0 and up (no generated NIC sits there), alternating over two NUMA nodes when it has two.
    """
    from harness.hostspec import GpuSpec

    nodes = max(1, topology.node_count)
    found = [g for g in topology.gpus if g.vendor_id == 0x10DE]
    others = [g for g in topology.gpus if g.vendor_id != 0x10DE]
    if not found:
        found = [GpuSpec(bus_id=f"0000:{0xE0 + k:02x}:00.0", numa_node=k % nodes) for k in range(gpus)]
    card = sum(1 for g in others if g.drm)  # the BMC's display chip holds card0 where there is one
    shaped = tuple(
        dataclasses.replace(
            g,
            nvidia_minor=k,
            nvidia_uuid=_UUIDS[k],
            product_name=g.product_name or "NVIDIA H100 80GB HBM3",
            drm=(f"card{card + k}", f"renderD{128 + k}"),
        )
        for k, g in enumerate(found)
    )
    return dataclasses.replace(topology, gpus=(*others, *shaped))


def _mount(path: str) -> dict[str, Any]:
    return {
        "hostPath": path,
        "containerPath": path,
        "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
    }


def _hook(*args: str) -> dict[str, Any]:
    return {
        "hookName": "createContainer",
        "path": "/usr/bin/nvidia-cdi-hook",
        "args": ["nvidia-cdi-hook", *args],
    }


def toolkit_spec_of_node(topology: Topology, driver: Any) -> dict[str, Any]:
    """The spec ``nvidia-ctk cdi generate`` writes for the NVIDIA GPUs of ``topology`` (shaped by
    :func:`nvidia_topology`) and ``driver`` (a :class:`harness.nvidia.NvidiaDriver`).

    As the toolkit's, not the harness's minimal stand-in: a device per index and per UUID and
    ``all``, each with its ``/dev/nvidiaN`` and DRM nodes and the hooks that link
    ``/dev/dri/by-path`` and open ``/dev/dri``; common edits with the control nodes, every library,
    binary and firmware file as a mount, and the ``create-symlinks``, ``enable-cuda-compat`` and
    ``update-ldcache`` hooks. For 8 GPUs about 30 KB of YAML, as a real ``nvidia.yaml``.
    """
    gpus = [g for g in topology.gpus if g.vendor_id == 0x10DE and g.nvidia_minor is not None]
    v, lib = driver.version, driver.libdir

    def edits(chosen: list[Any]) -> dict[str, Any]:
        nodes = [{"path": f"/dev/nvidia{g.nvidia_minor}"} for g in chosen]
        nodes += [{"path": f"/dev/dri/{name}"} for g in chosen for name in g.drm]
        links = [
            arg
            for g in chosen
            for name, kind in zip(g.drm, ("card", "render"), strict=False)
            for arg in ("--link", f"../{name}::/dev/dri/by-path/pci-{g.bus_id}-{kind}")
        ]
        hooks = [_hook("create-symlinks", *links), _hook("chmod", "--mode", "755", "--path", "/dev/dri")]
        return {"deviceNodes": nodes, "hooks": hooks}

    devices: list[dict[str, Any]] = []
    for g in gpus:
        devices.append({"name": str(g.nvidia_minor), "containerEdits": edits([g])})
        devices.append({"name": str(g.nvidia_uuid), "containerEdits": edits([g])})
    devices.append({"name": "all", "containerEdits": edits(gpus)})
    mounts = [_mount(f"{lib}/{base}.{v}") for base, _ in driver.libraries]
    mounts += [_mount(f"/usr/bin/{name}") for name in driver.binaries]
    mounts += [_mount(f"/lib/firmware/nvidia/{v}/{name}") for name in driver.firmware]
    so_links = [
        arg for base, soname in driver.libraries for arg in ("--link", f"{base}.{v}::{lib}/{base}.{soname}")
    ]
    common = {
        "env": [f"NVIDIA_CTK_LIBCUDA_DIR={lib}", "NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [
            {"path": p}
            for p in ("/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl")
        ],
        "mounts": mounts,
        "hooks": [
            _hook("create-symlinks", *so_links),
            _hook("enable-cuda-compat", f"--host-driver-version={v}"),
            _hook("update-ldcache", "--folder", lib),
        ],
    }
    return {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices, "containerEdits": common}


def lay_nvidia_userspace(tree: Path, topology: Topology, *, cdi_dir: Path | None = None) -> Path:
    """Add what an NVIDIA GPU node's host holds beside its GPUs' sysfs entries to ``tree`` (written
    from ``topology``, shaped by :func:`nvidia_topology`): the driver's files, the GPUs' and the
    control nodes as character devices, ``nvidia-cdi-hook``, and the toolkit's spec as the
    toolkit writes it, YAML in ``/etc/cdi/nvidia.yaml`` of the tree (``cdi_dir``: there instead,
    as ``nvidia-cdi-refresh`` puts it in ``/var/run/cdi``). Returns the spec's path. Needs root."""
    from harness.nvidia import NvidiaDriver, make_char_devices, write_nvidia_driver, write_toolkit_spec

    driver = NvidiaDriver(libraries=_LIBRARIES, binaries=_BINARIES, firmware=_FIRMWARE)
    write_nvidia_driver(tree, driver)
    gpus = [g for g in topology.gpus if g.vendor_id == 0x10DE and g.nvidia_minor is not None]
    _char_devices(tree, topology)
    make_char_devices(tree, ["/dev/nvidia-modeset"])
    hook = tree / "usr/bin/nvidia-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    assert gpus, "lay_nvidia_userspace: the topology has no NVIDIA GPU (see nvidia_topology)"
    spec = (cdi_dir or tree / "etc/cdi") / "nvidia.yaml"
    return write_toolkit_spec(spec, toolkit_spec_of_node(topology, driver))


def _char_devices(tree: Path, topology: Topology) -> None:
    """The NVIDIA GPUs' nodes and the control nodes of ``tree`` as character devices."""
    from harness.nvidia import make_char_devices

    gpus = [g for g in topology.gpus if g.vendor_id == 0x10DE and g.nvidia_minor is not None]
    nodes = [f"/dev/nvidia{g.nvidia_minor}" for g in gpus]
    nodes += ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    make_char_devices(tree, nodes)
    make_char_devices(tree, [f"/dev/dri/{name}" for g in gpus for name in g.drm], major=226, minor=128)


def nvidia_node(tree: Path, topology: Topology, kind: NodeKind) -> Topology:
    """Write the host tree of a ``kind`` node (:data:`NodeKind`) at ``tree`` from ``topology``;
    returns the topology written (the GPUs shaped, added or removed). Needs root for
    ``nvidia`` and ``no-userspace`` (their device nodes are character devices)."""
    from harness.hosttree import write_host_tree

    if kind == "bare":
        shaped = dataclasses.replace(topology, gpus=tuple(g for g in topology.gpus if g.vendor_id != 0x10DE))
        write_host_tree(tree, shaped)
        return shaped
    shaped = nvidia_topology(topology)
    write_host_tree(tree, shaped)
    if kind == "nvidia":
        lay_nvidia_userspace(tree, shaped)
    else:  # the kernel module and its nodes: the GPUs are there, their user space is not
        _char_devices(tree, shaped)
        (tree / "sys/module/nvidia").mkdir(parents=True, exist_ok=True)
        (tree / "sys/module/nvidia/version").write_text("550.54.15\n")
    return shaped


def claimed_vfs(inventory: Inventory, count: int) -> list[tuple[str, int]]:
    """The first ``count`` VFs (``nic-*``) of the host tree's inventory, each with its NUMA node
    (0 when unknown): the VFs of the :func:`nic_cpu_claim` claims, the same in every bench."""
    vfs = [(nic.name, nic.pci.numa_node or 0) for nic in inventory.nics]
    return [vf for vf in vfs if vf[0].startswith("nic-")][:count]


def in_memory_driver(
    inventory: Inventory,
    claims: dict[tuple[str, str], Any],
    *,
    driver: str,
    node: str,
    cdi_dir: Path,
    plugin_dir: Path,
    host_root: Path | None = None,
) -> tuple[ClaimsDriver, ClaimFetcher]:
    """The claims driver and the kubelet layer's fetcher, as the server wires them, reading
    ``claims`` (by namespace and name) from memory: the driver's work without HTTP or gRPC.
    With ``host_root``, the host's edits read from there as ``numadra run`` wires them (the NVIDIA
    user space, device groups); without, none. The caller closes both."""
    from driver.claims import ClaimsDriver, claims_journal
    from driver.claims.parts import NO_HOST_EDITS
    from driver.kubelet.claims import ClaimFetcher
    from driver.pinning.planner import CpuPlanner

    class InMemoryClaims:
        """The claim source: the claims in memory (the HTTP is not what is measured)."""

        def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> Any:
            return claims[(namespace, name)]

    claims_driver = ClaimsDriver(
        driver_name=driver,
        node_name=node,
        inventory=lambda: inventory,
        cdi_dir=cdi_dir,
        plugin_dir=plugin_dir,
        journal=claims_journal(cdi_dir=cdi_dir, plugin_dir=plugin_dir, driver_name=driver, pool=node),
        planner=CpuPlanner(lambda: inventory),
        host_edits=NO_HOST_EDITS if host_root is None else host_edits(host_root, cdi_dir, driver),
    )
    return claims_driver, ClaimFetcher(InMemoryClaims())


def host_edits(host_root: Path, cdi_dir: Path, driver: str) -> HostEdits:
    """The host's edits of a claim as ``numadra run`` wires them with its default flags (driver
    root ``/``, device groups on), for a host tree at ``host_root``."""
    from driver.claims.hostedits import HostEdits
    from driver.claims.render import claim_cdi_kind

    return HostEdits(
        host_root=str(host_root), driver_root="/", cdi_dir=str(cdi_dir), claim_kind=claim_cdi_kind(driver)
    )


def _claim(
    uid: str, name: str, requests: list[dict[str, Any]], results: list[dict[str, Any]], config: list[Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": uid},
        "spec": {"devices": {"requests": requests}},
        "status": {"allocation": {"devices": {"results": results, "config": config}}},
    }


def _cpu_share(
    uid: str, numa: int, capacity: dict[str, str], *, driver: str, node: str
) -> tuple[dict[str, Any], ...]:
    """The "cpu" request for ``capacity`` and its result: a share of ``cpu-numa<numa>``."""
    request = {
        "name": "cpu",
        "exactly": {"deviceClassName": "cpu.numadra.dev", "capacity": {"requests": capacity}},
    }
    result = {
        "request": "cpu",
        "driver": driver,
        "pool": node,
        "device": f"cpu-numa{numa}",
        "shareID": str(uuid.uuid5(uuid.NAMESPACE_OID, uid)),
        "consumedCapacity": dict(capacity),
    }
    return request, result


def nic_cpu_claim(uid: str, name: str, vf: str, numa: int, *, driver: str, node: str) -> dict[str, Any]:
    """An allocated claim: one NIC VF and a 2-CPU share of the VF's NUMA node (``cpu-numa<N>``).

    Valid for the real kube-apiserver too (requests with ``exactly``, a CpuConfig entry).
    """
    cpu_request, cpu_result = _cpu_share(uid, numa, {"cpus": "2", "memory": "1Gi"}, driver=driver, node=node)
    config = {
        "source": "FromClaim",
        "requests": ["cpu"],
        "opaque": {
            "driver": driver,
            "parameters": {"apiVersion": "numadra.dev/v1alpha1", "kind": "CpuConfig"},
        },
    }
    return _claim(
        uid,
        name,
        [{"name": "nic", "exactly": {"deviceClassName": "nic.numadra.dev"}}, cpu_request],
        [{"request": "nic", "driver": driver, "pool": node, "device": vf}, cpu_result],
        [config],
    )


def cpu_claim(uid: str, name: str, numa: int, *, driver: str, node: str) -> dict[str, Any]:
    """An allocated claim of one exclusive CPU of ``cpu-numa<numa>``: the background load of a node.

    Enough to make the journal hold what a busy node holds (an entry, a CDI spec, a metadata file).
    """
    cpu_request, cpu_result = _cpu_share(uid, numa, {"cpus": "1"}, driver=driver, node=node)
    return _claim(uid, name, [cpu_request], [cpu_result], [])


def gpu_claim(uid: str, name: str, device: str, *, driver: str, node: str) -> dict[str, Any]:
    """An allocated claim of one whole device ``device`` of ``driver`` (no config): what the
    upstream example driver's kubelet plugin prepares (its fake ``gpu-<i>`` devices)."""
    return _claim(
        uid,
        name,
        [{"name": "gpu", "exactly": {"deviceClassName": driver}}],
        [{"request": "gpu", "driver": driver, "pool": node, "device": device}],
        [],
    )


def rss_mib(pid: int) -> float:
    """VmRSS of a process in MiB (NaN when the kernel does not say)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
