"""The real deployment: the kubelet runs numadra as deploy/'s DaemonSet pod, and a claim pod runs
pinned through it (issue 14, point 4).

The DaemonSet is deploy/'s as shipped, with an overlay that only sets the image and points the
host paths of its volumes at this node's directories (CDI dir, containerd's NRI socket dir; the
kubelet's own dirs are the real /var/lib/kubelet ones). The image is scripts/build-image.sh's
(``podman save`` -> ``ctr images import``); without it the scenario skips, naming the script.
This proves the manifests' mounts, securityContext and NRI socket work, and keeps proving it as
they are narrowed.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from harness.controlplane import wait_for
from tests.e2e.conftest import condition, kustomize_base_objects
from tests.node.conftest import (
    KUBERNETES_SERVICE_IP,
    NAMESPACE,
    REAL_KUBELET_ROOT,
    REPO,
    NodeCluster,
    busybox_pod,
    figure,
)
from tests.node.stack import PodNetwork

pytestmark = pytest.mark.node

DAEMONSETS = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets"
COMPONENT = "app.kubernetes.io/component=kubeletplugin"


def image_ref() -> str:
    """The tag scripts/build-image.sh gives the image (``IMAGE`` overrides it there and here)."""
    version = next(
        line.split('"')[1]
        for line in (REPO / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    return os.environ.get("IMAGE", f"localhost/numadra:{version}")


def _skip_reason(node: NodeCluster, image: str) -> str | None:
    if os.environ.get("NUMADRA_SKIP_IMAGE") == "1":
        return "NUMADRA_SKIP_IMAGE=1: no numadra image to deploy"
    if node.kubelet.root_dir != REAL_KUBELET_ROOT:
        return (
            f"{REAL_KUBELET_ROOT} existed before the run, so the kubelet runs in {node.kubelet.root_dir}; "
            "the DaemonSet's sockets name /var/lib/kubelet paths"
        )
    if shutil.which("podman") is None:
        return "podman not found: the image comes from podman's store (scripts/build-image.sh)"
    if subprocess.run(["podman", "image", "exists", image], check=False).returncode != 0:
        return f"image {image} not built (bash scripts/build-image.sh)"
    if shutil.which("ip") is None or not any(
        Path(d, "bridge").exists() for d in ("/usr/lib/cni", "/opt/cni/bin")
    ):
        return "no ip(8) or CNI bridge plugin (apt-get install iproute2 containernetworking-plugins)"
    return None


def daemonset_overlay(node: NodeCluster, image: str) -> dict[str, Any]:
    """deploy/'s DaemonSet with only the image and the volumes' host paths changed."""
    (shipped,) = [o for o in kustomize_base_objects() if o["kind"] == "DaemonSet"]
    ds = copy.deepcopy(shipped)
    kubelet = "/var/lib/kubelet"
    host_paths = {"/var/run/cdi": node.cdi_dir, "/var/run/nri": node.containerd.nri_socket.parent}
    spec = ds["spec"]["template"]["spec"]
    for volume in spec["volumes"]:
        host_path = volume.get("hostPath")
        if not host_path:
            continue
        path = host_path["path"]
        if path in host_paths:
            host_path["path"] = str(host_paths[path])
        elif path == kubelet or path.startswith(kubelet + "/"):
            host_path["path"] = str(node.kubelet.root_dir) + path.removeprefix(kubelet)
    for container in spec["containers"]:
        container["image"] = image
    return ds


def _driver_pods(node: NodeCluster) -> list[dict[str, Any]]:
    return node.admin.items(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=COMPONENT)


def _container_logs(node: NodeCluster) -> str:
    out = []
    label = f"io.kubernetes.pod.namespace={NAMESPACE}"
    for cid in node.containerd.crictl("ps", "-a", "-q", "--label", label, check=False).stdout.split():
        logs = node.containerd.crictl("logs", "--tail", "40", cid, check=False)
        out.append(f"--- {cid}\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}")
    return "\n".join(out)


def test_daemonset_pod_registers_and_pins_a_claim_pod(node: NodeCluster) -> None:
    image = image_ref()
    reason = _skip_reason(node, image)
    if reason is not None:
        pytest.skip(reason)
    t0 = time.monotonic()
    archive = node.root / "numadra-image.tar"
    subprocess.run(["podman", "save", "--format", "docker-archive", "-o", str(archive), image], check=True)
    node.containerd.import_image(archive)
    archive.unlink()
    figure("DaemonSet: image save + import (s)", round(time.monotonic() - t0, 2))

    node.stop_driver()  # one driver at a time: the DaemonSet's replaces the host process
    network = PodNetwork(KUBERNETES_SERVICE_IP, urllib.parse.urlsplit(node.plane.server).port or 0)
    network.up()
    ns = ""
    try:
        t0 = time.monotonic()
        node.admin.create(DAEMONSETS, daemonset_overlay(node, image), fieldValidation="Strict")

        def ready() -> dict[str, Any] | None:
            node.check_running()
            for pod in _driver_pods(node):
                cond = condition(pod, "Ready")
                if cond is not None and cond["status"] == "True":
                    return pod
            return None

        try:
            pod = wait_for(ready, 120, "numadra's DaemonSet pod to be Ready", interval=0.5)
        except AssertionError:
            pods = _driver_pods(node)
            detail = "\n".join(node.describe(NAMESPACE, p["metadata"]["name"]) for p in pods)
            raise AssertionError(f"DaemonSet pod not Ready:\n{detail}\n{_container_logs(node)}") from None
        figure("DaemonSet: created to pod Ready (s)", round(time.monotonic() - t0, 2))
        uid = pod["metadata"]["uid"]
        assert pod["spec"]["nodeName"] != "" and not pod["spec"].get("hostNetwork")
        # registered through the kubelet's plugin watcher from inside its container: the sockets
        # named after its POD_UID are in the kubelet's dirs (readiness = registered + slices)
        assert any(uid in p.name for p in node.kubelet.registry_dir.iterdir())
        assert (node.plugin_dir / f"dra-{uid}.sock").is_socket()

        ns = node.new_namespace("ds")
        node.create_template(ns, "one-cpu", cpus=1)
        node.create_pod(ns, busybox_pod("p", "one-cpu"))
        claimed = node.wait_running(ns, "p")
        pinning = node.claim_pinning(node.claim_of(claimed)["metadata"]["uid"])
        assert node.proc_status(node.container_id(claimed)) == pinning
    finally:
        if ns:
            node.delete_all_pods(ns)
        node.admin.delete(f"{DAEMONSETS}/numadra-kubeletplugin")
        # no garbage collector runs here: the DaemonSet's pod goes by hand
        for pod in _driver_pods(node):
            node.admin.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}")
        wait_for(lambda: not _driver_pods(node), 60, "the DaemonSet pod to be removed", interval=0.5)
        network.down()
