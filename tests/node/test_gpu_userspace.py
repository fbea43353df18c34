"""A CUDA pod gets the NVIDIA user space; a non-root container opens its render node (real kubelet + runc).

No GPU exists here, so numadra runs for this scenario with ``--host-root`` on a generated host tree
(two NVIDIA GPUs with UUIDs, an AMD GPU), and the host gets stand-ins for what the runtime reads
on the real host: character devices with ``/dev/null``'s numbers at the GPUs' node paths
(``/dev/nvidia250``, ``/dev/nvidia251``, ``/dev/dri/renderD200``, removed afterwards), and an NVIDIA
driver root in the tier's temp dir (stand-in libraries, tools and firmware; the tree links its path
there, as a DaemonSet sees the host's driver root under ``/host``). The toolkit's spec is a
stand-in of ``nvidia-ctk cdi generate``'s output in the tier's CDI dir, with one marker file mounted
per GPU device so the container shows which device the runtime applied.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from driver.state.journal import Journal
from harness.hostspec import GpuSpec, Topology
from harness.hosttree import write_host_tree
from harness.nvidia import (
    NvidiaDriver,
    ToolkitGpu,
    driver_file_content,
    make_char_devices,
    toolkit_spec,
    write_nvidia_driver,
    write_toolkit_spec,
)
from harness.poll import wait_for
from tests.node.conftest import DEFAULT_DRIVER_FLAGS, NodeCluster, busybox_pod

pytestmark = pytest.mark.node

RESOURCE = "/apis/resource.k8s.io/v1"
UUIDS = ("GPU-5a5a5a5a-0000-4000-8000-000000000250", "GPU-5b5b5b5b-0000-4000-8000-000000000251")
MINORS = (250, 251)
RENDER = "renderD200"
RENDER_GID = 2742  # a group no user of the container belongs to
DRIVER = NvidiaDriver(version="550.54.15")
LIB = "/usr/lib/x86_64-linux-gnu"
MARKER = "/run/numadra-test/toolkit-device"
TOPOLOGY = Topology(
    name="gpu-node",
    cores_per_socket=2,
    gpus=(
        *(
            GpuSpec(
                bus_id=f"0000:{0x17 + k:02x}:00.0", nvidia_minor=m, nvidia_uuid=u, product_name="NVIDIA L4"
            )
            for k, (m, u) in enumerate(zip(MINORS, UUIDS, strict=True))
        ),
        GpuSpec(
            bus_id="0000:c1:00.0",
            vendor_id=0x1002,
            device_id=0x74A1,
            pci_class=0x038000,
            driver="amdgpu",
            drm=(RENDER,),
        ),
    ),
    # only the nodes this scenario stands in for on the host
    remove=("dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools", "dev/kfd"),
)
HOST_NODES = (*(f"/dev/nvidia{m}" for m in MINORS), f"/dev/dri/{RENDER}")


@dataclass
class GpuHost:
    tree: Path
    driver_root: Path
    toolkit: Path  # the stand-in toolkit spec in the tier's CDI dir


def _render_mode(root: Path) -> None:
    node = root / "dev/dri" / RENDER
    os.chown(node, 0, RENDER_GID)
    node.chmod(0o660)


@contextlib.contextmanager
def gpu_host(node: NodeCluster) -> Iterator[GpuHost]:
    """The tree, the driver root, the host's stand-in nodes; numadra on the tree meanwhile."""
    base = node.root / f"gpu-{uuid.uuid4().hex[:6]}"
    tree = write_host_tree(base / "tree", TOPOLOGY)
    driver_root = base / "driver"
    # the driver's files live in the tree, where numadra sees them under --host-root; the host
    # path the runtime mounts from leads there too
    in_tree = write_nvidia_driver(tree, DRIVER, driver_root=str(driver_root))
    driver_root.symlink_to(in_tree)
    make_char_devices(tree, HOST_NODES)
    _render_mode(tree)
    made_dri = not Path("/dev/dri").exists()
    for path in HOST_NODES:
        assert not os.path.lexists(path), f"{path} exists on this host: not a stand-in to replace"
    try:
        make_char_devices(Path("/"), HOST_NODES)
        _render_mode(Path("/"))
        node.stop_driver()
        node.start_driver(("--host-root", str(tree), "--nvidia-driver-root", str(driver_root)))
        yield GpuHost(tree, driver_root, node.cdi_dir / "nvidia-standin.yaml")
    finally:
        node.stop_driver()
        for path in HOST_NODES:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # noqa: PTH108
        if made_dri:
            with contextlib.suppress(OSError):
                os.rmdir("/dev/dri")  # noqa: PTH106
        with contextlib.suppress(FileNotFoundError):
            (node.cdi_dir / "nvidia-standin.yaml").unlink()
        node.start_driver(DEFAULT_DRIVER_FLAGS)


def standin_toolkit_spec(host: GpuHost, *, lie: bool = False) -> None:
    """The toolkit's spec for both GPUs; each GPU's device also mounts a marker naming its UUID.

    ``lie``: one of its library mounts names a file the host does not have.
    """
    spec = toolkit_spec(
        [ToolkitGpu(k, u, m) for k, (m, u) in enumerate(zip(MINORS, UUIDS, strict=True))],
        DRIVER,
        driver_root=str(host.driver_root),
        hook_path=None,  # the toolkit's hook binary does not exist here
    )
    spec["containerEdits"]["deviceNodes"] = []  # nvidiactl and uvm do not exist here either
    for device in spec["devices"]:
        if device["name"].startswith("GPU-"):
            marker = host.driver_root / "markers" / device["name"]
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(device["name"] + "\n")
            device["containerEdits"]["mounts"] = [
                {"hostPath": str(marker), "containerPath": MARKER, "options": ["ro", "bind"]}
            ]
    if lie:
        spec["containerEdits"]["mounts"][0]["hostPath"] = f"{host.driver_root}{LIB}/libcuda.so.999.9.9"
    write_toolkit_spec(host.toolkit, spec)


def _template(node: NodeCluster, namespace: str, name: str, device_class: str) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}
        },
    }
    node.admin.create(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", template, fieldValidation="Strict"
    )


def _gpu_pod(name: str, template: str, *, run_as: int | None = None) -> dict[str, Any]:
    pod = busybox_pod(name)
    spec = pod["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if run_as is not None:
        spec["securityContext"] = {"runAsUser": run_as, "runAsNonRoot": True}
    return pod


def _gpu_of(node: NodeCluster, pod: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The allocated device name and the claim object."""
    claim = node.claim_of(pod, "gpu")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return str(result["device"]), claim


def _uuid_of(device: str) -> str:
    index = {f"gpu-0000-{0x17 + k:02x}-00-0": k for k in range(len(UUIDS))}[device]
    return UUIDS[index]


def _env(node: NodeCluster, cid: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in node.exec(cid, "env").splitlines() if "=" in line)


def _sh(node: NodeCluster, cid: str, script: str) -> str:
    return node.exec(cid, "sh", "-c", script).strip()


def test_cuda_pod_gets_the_toolkit_device_of_its_gpu_then_the_driver_root(node: NodeCluster) -> None:
    """With the toolkit's spec: its device for exactly the pod's GPU and its driver files; with a spec
    that lies about a library: numadra's own mounts of the driver root, and a Warning Event."""
    ns = node.new_namespace("cuda")
    with gpu_host(node) as host:
        try:
            standin_toolkit_spec(host)
            _template(node, ns, "one-nvidia", "nvidia-gpu.numadra.dev")
            node.create_pod(ns, _gpu_pod("toolkit", "one-nvidia"))
            pod = node.wait_running(ns, "toolkit")
            device, claim = _gpu_of(node, pod)
            uuid = _uuid_of(device)
            other = UUIDS[1 - UUIDS.index(uuid)]
            cid = node.container_id(pod)
            assert _sh(node, cid, f"cat {MARKER}") == uuid  # the toolkit's device of this GPU only
            lib = f"{LIB}/libcuda.so.{DRIVER.version}"
            assert (
                _sh(node, cid, f"cat {lib}")
                == driver_file_content(f"libcuda.so.{DRIVER.version}", DRIVER.version).strip()
            )
            nodes = _sh(node, cid, "ls /dev").split()
            assert f"nvidia{MINORS[UUIDS.index(uuid)]}" in nodes
            assert f"nvidia{MINORS[UUIDS.index(other)]}" not in nodes
            # numadra's env wins over the toolkit's NVIDIA_VISIBLE_DEVICES=void
            assert _env(node, cid)["NVIDIA_VISIBLE_DEVICES"] == uuid
            entry_ids = _journal_ids(node, claim["metadata"]["uid"])
            assert entry_ids[0] == f"nvidia.com/gpu={uuid}"
            assert not [e for e in node.events(ns, "toolkit") if e["reason"].startswith("NvidiaUserspace")]

            standin_toolkit_spec(host, lie=True)
            node.create_pod(ns, _gpu_pod("fallback", "one-nvidia"))
            pod = node.wait_running(ns, "fallback")
            device, claim = _gpu_of(node, pod)
            cid = node.container_id(pod)
            # numadra's own mounts: the library under its SONAME, the tool, the firmware
            expected = driver_file_content(f"libcuda.so.{DRIVER.version}", DRIVER.version).strip()
            assert _sh(node, cid, f"cat {LIB}/libcuda.so.1") == expected
            assert (
                _sh(node, cid, "cat /usr/bin/nvidia-smi")
                == driver_file_content("nvidia-smi", DRIVER.version).strip()
            )
            assert _sh(node, cid, f"ls /lib/firmware/nvidia/{DRIVER.version}").split() == list(
                DRIVER.firmware
            )
            assert _sh(node, cid, f"test -e {MARKER} && echo toolkit || echo none") == "none"
            assert _sh(node, cid, f"touch {LIB}/libcuda.so.1 2>&1 || echo read-only").endswith("read-only")
            assert _journal_ids(node, claim["metadata"]["uid"])[0].startswith("numadra.dev/claim=")
            reasons = _wait_event(node, ns, "fallback", "NvidiaUserspaceFromDriverRoot")
            assert "libcuda.so.999.9.9 does not exist" in reasons["message"]
        finally:
            node.delete_all_pods(ns)


def test_non_root_container_opens_a_render_node_of_a_root_only_group(node: NodeCluster) -> None:
    """runAsUser 1000 opens its GPU's 0660 root:<gid> render node; the group is in its GIDs.

    The open alone proves little on containerd: its CDI library makes the container's UID the
    owner of the node it creates (with the host's mode), so the open succeeded here with numadra's
    host edits switched off too (node ``crw-rw---- 1000 0``). What this adds is that the group
    reaches the process (``id -G``), for runtimes that inject devices before they set the user.
    """
    ns = node.new_namespace("render")
    with gpu_host(node):
        try:
            _template(node, ns, "one-amd", "amd-gpu.numadra.dev")
            node.create_pod(ns, _gpu_pod("user", "one-amd", run_as=1000))
            pod = node.wait_running(ns, "user")
            _, claim = _gpu_of(node, pod)
            spec = json.loads(node.spec_file(claim["metadata"]["uid"]).read_text())
            (device,) = spec["devices"]
            assert device["containerEdits"]["additionalGids"] == [RENDER_GID]
            cid = node.container_id(pod)
            assert _sh(node, cid, "id -u") == "1000"
            assert str(RENDER_GID) in _sh(node, cid, "id -G").split()
            assert _sh(node, cid, f"exec 3<>/dev/dri/{RENDER} && echo opened") == "opened"
        finally:
            node.delete_all_pods(ns)


def _journal_ids(node: NodeCluster, claim_uid: str) -> list[str]:
    journal = Journal(node.journal)
    journal.load(persist=False)
    entry = next(e for e in journal.entries() if e.uid == claim_uid)
    return [i for d in entry.devices for i in d.cdi_device_ids]


def _wait_event(node: NodeCluster, namespace: str, pod: str, reason: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        return next((e for e in node.events(namespace, pod) if e.get("reason") == reason), None)

    event: dict[str, Any] = wait_for(found, 30, f"a {reason} event on pod {namespace}/{pod}", interval=0.2)
    assert event["type"] == "Warning"
    return event
