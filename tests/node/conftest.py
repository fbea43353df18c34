"""One real node for the whole node-tier session: control plane, containerd + NRI, a kubelet, numadra.

Started once (``node_session``, session scope): containerd 2.4 (CRI, NRI, CDI from the driver's
CDI dir), the e2e control plane (harness/controlplane.py), a real kubelet 1.37 registered as the
Node, the objects of deploy/ (DaemonSet aside), a pod ``numadra-host`` the kubelet really runs,
and ``numadra run --pinning nri`` as a host process with a ServiceAccount token bound to that pod
(its UID is the driver's POD_UID). The driver pins on the real host's CPUs (``cpu.numadra.dev``).

Everything is recorded first (tests/node/host.py) and undone at the end in the order that leaves
the host clean: pods -> driver -> kubelet -> control plane -> containerd -> mounts -> paths ->
sysctls -> cgroups. ``test_host_clean.py`` runs last and asserts nothing is left.

Skipped as a whole, naming the reason: not root, fewer than 2 CPUs, no runc/overlayfs/busybox,
or binaries missing (tests/e2e/build-bins.sh, tests/node/build-bins.sh).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from driver.claims.render import claim_spec_file_name
from driver.pinning.types import ENV_CPUS, ENV_MEMS, parse_cpulist
from driver.state.journal import Journal, journal_path
from harness.controlplane import (
    ApiClient,
    ApiError,
    ControlPlane,
    Process,
    binary_dir,
    free_port,
    missing_binaries,
    wait_for,
    write_kubeconfig,
)
from tests.conftest import CALL_FAILED, SECTIONS
from tests.e2e.conftest import collection_path, condition, kustomize_base_objects, log_tails
from tests.node.host import HostRecord
from tests.node.images import BUSYBOX_IMAGE, PAUSE_CMD, PAUSE_IMAGE, busybox_binary, write_image_archive
from tests.node.stack import Containerd, Kubelet, missing_node_binaries, node_binary_dir, preflight

REPO = Path(__file__).resolve().parents[2]
DRIVER = "numadra.dev"
NAMESPACE = "numadra-system"
SERVICE_ACCOUNT = "numadra"
NODE = "numadra-node"
RESOURCE = "/apis/resource.k8s.io/v1"
HOST_POD = "numadra-host"
REAL_KUBELET_ROOT = Path("/var/lib/kubelet")
#: the kube-apiserver's ``kubernetes`` Service IP (first of --service-cluster-ip-range)
KUBERNETES_SERVICE_IP = "10.96.0.1"
#: the controllers a node with real pods needs (harness/controlplane.py ControlPlane)
CONTROLLERS = (
    "resourceclaim-controller",
    "serviceaccount-controller",
    "root-ca-cert-publisher",
    "daemonset-controller",
)
#: container states in which a pod will not run without a change (wait_running fails at once)
FATAL_WAITING_REASONS = frozenset({"CreateContainerError", "CreateContainerConfigError", "RunContainerError"})
#: the driver's flags in every scenario unless it restarts the driver with others
DEFAULT_DRIVER_FLAGS: tuple[str, ...] = ()

#: versions, startup timings and per-scenario figures, printed at the end of the run
SUMMARY: dict[str, Any] = {"versions": {}, "timings": {}, "figures": {}, "scenarios": []}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.nodeid.startswith("tests/node/"):
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        SUMMARY["scenarios"].append((report.nodeid, outcome, report.duration))


def _section() -> list[str]:
    """Versions, startup timings and the tier's figures (the run's summary)."""
    if not SUMMARY["versions"] and not SUMMARY["scenarios"]:
        return []
    lines = []
    if SUMMARY["versions"]:
        lines.append("components: " + "; ".join(f"{k} {v}" for k, v in SUMMARY["versions"].items()))
        lines.append("startup (s): " + ", ".join(f"{k}={v:.2f}" for k, v in SUMMARY["timings"].items()))
    lines += [f"figure: {key} = {value}" for key, value in SUMMARY["figures"].items()]
    lines += [f"{outcome:7s} {seconds:6.2f}s  {nodeid}" for nodeid, outcome, seconds in SUMMARY["scenarios"]]
    report = os.environ.get("NUMADRA_NODE_REPORT")
    if report:
        Path(report).write_text(json.dumps(SUMMARY, indent=1) + "\n")
        lines.append(f"written to {report}")
    return lines


SECTIONS["numadra node tier"] = _section


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The host-clean check tears the node down: it must run after every other node scenario."""
    last = [i for i in items if i.nodeid.startswith("tests/node/test_host_clean.py")]
    if not last:
        return
    rest = [i for i in items if i not in last]
    node_items = [n for n, i in enumerate(rest) if i.nodeid.startswith("tests/node/")]
    # right after the last other node scenario: the node is up no longer than the tier needs
    at = node_items[-1] + 1 if node_items else len(rest)
    items[:] = rest[:at] + last + rest[at:]


def figure(name: str, value: float | str) -> None:
    """Record a figure for the summary (the first value of a name wins; later ones get a suffix)."""
    key, n = name, 1
    while key in SUMMARY["figures"]:
        n += 1
        key = f"{name} #{n}"
    SUMMARY["figures"][key] = value


@dataclass
class ProcStatus:
    cpus: frozenset[int]
    mems: frozenset[int]


@dataclass
class NodeCluster:
    """The running node and the helpers the scenarios share."""

    plane: ControlPlane
    admin: ApiClient
    root: Path
    containerd: Containerd
    kubelet: Kubelet
    host: HostRecord
    host_pod_uid: str = ""
    driver: Process | None = None
    driver_flags: tuple[str, ...] = DEFAULT_DRIVER_FLAGS
    driver_runs: int = 0
    metrics_port: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    torn_down: bool = False

    # paths ----------------------------------------------------------------------------------------
    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet.plugins_dir / DRIVER

    @property
    def journal(self) -> Path:
        return journal_path(self.plugin_dir)

    # the driver -----------------------------------------------------------------------------------
    def driver_token(self, pod_uid: str) -> str:
        """A token of numadra's ServiceAccount bound to the pod ``pod_uid`` (a pod on our node)."""
        pods = self.admin.items(f"/api/v1/namespaces/{NAMESPACE}/pods")
        pod = next(p for p in pods if p["metadata"]["uid"] == pod_uid)
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 4 * 3600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                   "uid": pod_uid},
            },
        }  # fmt: skip
        answer = self.admin.create(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token", request
        )
        return str(answer["status"]["token"])

    def start_driver(
        self, flags: tuple[str, ...] | None = None, pod_uid: str | None = None, wait: bool = True
    ) -> Process:
        """``numadra run --pinning nri`` on the host, as its DaemonSet pod would run it."""
        if flags is not None:
            self.driver_flags = flags
        pod_uid = pod_uid or self.host_pod_uid
        self.driver_runs += 1
        n = self.driver_runs
        kubeconfig = write_kubeconfig(
            self.root / f"driver-{n}.kubeconfig",
            self.plane.server,
            self.plane.ca_file,
            self.driver_token(pod_uid),
            f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}",
        )
        self.metrics_port = free_port()
        argv = [
            sys.executable, "-m", "driver.cli", "run",
            "--host-root", "/",
            "--kubeconfig", str(kubeconfig),
            "--registrar-dir", str(self.kubelet.registry_dir),
            "--plugin-dir", str(self.plugin_dir),
            "--cdi-dir", str(self.cdi_dir),
            "--pod-uid", pod_uid,
            "--pinning", "nri",
            "--nri-socket", str(self.containerd.nri_socket),
            "--hotplug", "off",
            "--rescan-interval", "0",
            "--metrics-address", f"127.0.0.1:{self.metrics_port}",
            "--log-format", "json",
            *self.driver_flags,
        ]  # fmt: skip
        proc = Process(
            f"numadra-run-{n}", argv, self.root / f"numadra-run-{n}.out", self.root / f"numadra-run-{n}.log"
        )
        proc.start(env={"NODE_NAME": NODE, "PYTHONPATH": str(REPO)}, cwd=REPO)
        if wait:
            self.wait_driver_ready(proc, self.metrics_port)
        self.driver = proc
        return proc

    def wait_driver_ready(self, proc: Process, port: int, timeout: float = 60) -> None:
        """/readyz: registered with the kubelet (through its plugin watcher) and slices published;
        and connected to containerd's NRI (its log says so)."""

        def ready() -> bool:
            proc.check_running()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    ok = r.status == 200
            except OSError:
                return False
            return ok and bool(self.driver_events(proc, "registered with runtime"))

        wait_for(ready, timeout, f"{proc.name} to be ready (kubelet + NRI)", interval=0.2)

    def driver_events(self, proc: Process | None, event: str) -> list[dict[str, Any]]:
        """The driver's JSON log lines whose ``event`` is ``event``."""
        proc = proc or self.driver
        if proc is None:
            return []
        out = []
        for path in (proc.stderr_path, proc.stdout_path):
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("event") == event:
                    out.append(obj)
        return out

    def stop_driver(self, sig: int = signal.SIGTERM) -> None:
        if self.driver is not None:
            self.driver.stop(sig)
            self.driver = None

    def check_running(self) -> None:
        self.plane.check_running()
        for proc in (self.containerd.process, self.kubelet.process, self.driver):
            if proc is not None:
                proc.check_running()

    # API helpers ----------------------------------------------------------------------------------
    def new_namespace(self, prefix: str) -> str:
        """A fresh namespace, once its ``default`` ServiceAccount exists (ServiceAccount admission
        refuses pods before the serviceaccount controller made it), on a node no claim holds.

        Every scenario starts from a node whose CPUs no claim holds any more: a claim of an
        earlier scenario still allocated (the resourceclaim controller deallocates and deletes
        template claims after their pods are gone, asynchronously, and was seen to take minutes
        for a claim whose prepare had been refused) would make this scenario's pods unschedulable,
        and the scheduler retries such a pod only on events of its own claims or after 5 min, far
        past any wait here. So wait for them, and name them if they stay.
        """
        self.wait_no_allocated_claims()
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.admin.create("/api/v1/namespaces", {"metadata": {"name": name}})
        wait_for(
            lambda: self.admin.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
            30,
            f"the default ServiceAccount of {name}",
            interval=0.1,
        )
        return name

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.admin.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def create_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        return dict(self.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod, fieldValidation="Strict"))

    def create_template(self, namespace: str, name: str, cpus: int = 1) -> None:
        self.admin.create(
            f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
            cpu_template(name, cpus),
            fieldValidation="Strict",
        )

    def wait_running(self, namespace: str, name: str, timeout: float = 90) -> dict[str, Any]:
        """The pod once the kubelet reports it Running with every container started."""

        def running() -> dict[str, Any] | None:
            self.check_running()
            pod = self.pod(namespace, name)
            statuses = pod.get("status", {}).get("containerStatuses") or []
            for status in statuses:  # the kubelet retries these with backoff: fail at once
                reason = status.get("state", {}).get("waiting", {}).get("reason", "")
                if reason in FATAL_WAITING_REASONS:
                    raise AssertionError(
                        f"pod {namespace}/{name}: {reason}\n{self.describe(namespace, name)}"
                    )
            if (
                pod["status"].get("phase") == "Running"
                and statuses
                and all(s.get("started") for s in statuses)
            ):
                return pod
            return None

        try:
            return wait_for(running, timeout, f"pod {namespace}/{name} to run", interval=0.1)
        except AssertionError:
            raise AssertionError(
                f"pod {namespace}/{name} not running:\n{self.describe(namespace, name)}"
            ) from None

    def describe(self, namespace: str, name: str) -> str:
        """The pod's status and events: what a failure message should show."""
        try:
            pod = self.pod(namespace, name)
        except ApiError as err:
            return str(err)
        events = self.admin.items(
            f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.name={name}"
        )
        lines = [f"status: {json.dumps(pod.get('status', {}), indent=None)[:3000]}"]
        lines += [f"event {e.get('reason')}: {e.get('message')}" for e in events]
        return "\n".join(lines)

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.admin.items(
            f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.name={name}"
        )

    def allocated_claims(self) -> list[str]:
        """``namespace/name`` of every ResourceClaim in the cluster that still holds an allocation."""
        claims = self.admin.items(f"{RESOURCE}/resourceclaims")
        return [
            f"{c['metadata']['namespace']}/{c['metadata']['name']}"
            for c in claims
            if (c.get("status") or {}).get("allocation")
        ]

    def wait_no_allocated_claims(self, timeout: float = 150) -> None:
        left: list[str] = []

        def free() -> bool:
            left[:] = self.allocated_claims()
            return not left

        try:
            wait_for(free, timeout, "no claim to hold the node's devices", interval=0.2)
        except AssertionError:
            raise AssertionError(
                f"claims of earlier scenarios still allocated after {timeout:g} s: {left}"
            ) from None

    def delete_pod(self, namespace: str, name: str, timeout: float = 60) -> None:
        """Delete as a user would; wait until the kubelet has stopped it and the object is gone."""
        self.admin.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
        wait_for(
            lambda: not self.admin.exists(f"/api/v1/namespaces/{namespace}/pods/{name}"),
            timeout,
            f"pod {namespace}/{name} to be removed by the kubelet",
            interval=0.2,
        )

    def delete_all_pods(self, namespace: str, timeout: float = 60) -> None:
        """Delete every pod of a scenario's namespace (its cleanup) and wait until all are gone."""
        names = [p["metadata"]["name"] for p in self.admin.items(f"/api/v1/namespaces/{namespace}/pods")]
        for name in names:
            self.admin.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
        wait_for(
            lambda: not self.admin.items(f"/api/v1/namespaces/{namespace}/pods"),
            timeout,
            f"the pods of {namespace} to be removed by the kubelet",
            interval=0.2,
        )
        # The pods' template claims are deleted after the pods are gone, asynchronously. Until
        # then they stay allocated and hold the node's CPUs: on this 2-CPU node a next scenario
        # (in random order) once found its claim unschedulable. So wait for them, but only as a
        # courtesy to the next scenario: a claim whose prepare was refused (the empty-pool
        # scenario) was seen to outlive its pod by more than a minute, which is not this
        # scenario's failure.
        with contextlib.suppress(AssertionError):
            wait_for(
                lambda: not self.admin.items(f"{RESOURCE}/namespaces/{namespace}/resourceclaims"),
                20,
                f"the claims of {namespace} to be deleted",
                interval=0.2,
            )

    def claim_of(self, pod: dict[str, Any], pod_claim: str = "cpus") -> dict[str, Any]:
        """The ResourceClaim the resourceclaim controller made for one of the pod's template claims."""
        ns = pod["metadata"]["namespace"]
        statuses = {s["name"]: s for s in pod["status"].get("resourceClaimStatuses") or []}
        return dict(
            self.admin.get(
                f"{RESOURCE}/namespaces/{ns}/resourceclaims/{statuses[pod_claim]['resourceClaimName']}"
            )
        )

    # what numadra wrote ---------------------------------------------------------------------------
    def spec_file(self, claim_uid: str) -> Path:
        return self.cdi_dir / claim_spec_file_name(DRIVER, claim_uid)

    def claim_files(self, claim_uid: str) -> list[Path]:
        return sorted(p for p in self.cdi_dir.iterdir() if claim_uid in p.name)

    def claim_env(self, claim_uid: str) -> dict[str, str]:
        """The env the claim's CDI spec gives its containers (the pinning markers among it)."""
        spec = json.loads(self.spec_file(claim_uid).read_text())
        env: dict[str, str] = {}
        for device in spec["devices"]:
            for item in device["containerEdits"].get("env", []):
                key, _, value = item.partition("=")
                env[key] = value
        return env

    def claim_pinning(self, claim_uid: str) -> ProcStatus:
        env = self.claim_env(claim_uid)
        return ProcStatus(parse_cpulist(env[ENV_CPUS]), parse_cpulist(env[ENV_MEMS]))

    def journal_uids(self) -> set[str]:
        journal = Journal(self.journal)
        journal.load()
        return {entry.uid for entry in journal.entries()}

    # inside the containers ------------------------------------------------------------------------
    def container_id(self, pod: dict[str, Any], container: str = "c") -> str:
        for status in pod["status"].get("containerStatuses") or []:
            if status["name"] == container and status.get("containerID"):
                return str(status["containerID"]).split("://", 1)[1]
        raise AssertionError(f"no container {container} in {pod['status']}")

    def exec(self, container_id: str, *argv: str) -> str:
        """Run a command in the container through the CRI (crictl exec) and return its stdout."""
        return self.containerd.crictl("exec", container_id, *argv).stdout

    def proc_status(self, container_id: str) -> ProcStatus:
        """Cpus_allowed_list and Mems_allowed_list of a process in the container (/proc/self/status)."""
        fields = dict(
            line.split(":\t", 1) for line in self.exec(container_id, "cat", "/proc/self/status").splitlines()
            if ":\t" in line
        )  # fmt: skip
        return ProcStatus(
            parse_cpulist(fields["Cpus_allowed_list"].strip()),
            parse_cpulist(fields["Mems_allowed_list"].strip()),
        )

    def main_process_status(self, container_id: str) -> ProcStatus:
        """The same for the container's first process, read on the host through its PID."""
        info = json.loads(self.containerd.crictl("inspect", container_id).stdout)
        pid = info["info"]["pid"]
        fields = dict(
            line.split(":\t", 1)
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if ":\t" in line
        )
        return ProcStatus(
            parse_cpulist(fields["Cpus_allowed_list"].strip()),
            parse_cpulist(fields["Mems_allowed_list"].strip()),
        )

    # teardown -------------------------------------------------------------------------------------
    def teardown(self) -> list[str]:
        """Stop everything in the order that leaves the host clean, then undo what is left."""
        if self.torn_down:
            return []
        self.torn_down = True
        # 1. pods go the way a user deletes them (the kubelet stops them, the driver unprepares);
        #    the kubelet would otherwise recreate sandboxes crictl removes under a pod still bound
        try:
            for pod in self.admin.items("/api/v1/pods"):
                meta = pod["metadata"]
                self.admin.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
            wait_for(
                lambda: not self.admin.items("/api/v1/pods"), 60, "every pod to be removed", interval=0.2
            )
        except (AssertionError, ApiError, OSError) as exc:
            print(f"node teardown: deleting pods: {exc}")
        # 2. the kubelet, then whatever sandbox is left, then the rest (the order that leaves the host clean)
        self.kubelet.stop()
        _teardown_containerd_pods(self.containerd)
        self.stop_driver()
        self.plane.stop()
        self.containerd.stop()
        return self.host.restore()


def cpu_template(name: str, cpus: int = 1) -> dict[str, Any]:
    """A ResourceClaimTemplate asking ``cpus`` exclusive CPUs of one NUMA node (``cpu.numadra.dev``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "cpus",
                            "exactly": {
                                "deviceClassName": "cpu.numadra.dev",
                                "count": 1,
                                "capacity": {"requests": {"cpus": str(cpus)}},
                            },
                        }
                    ]
                }
            }
        },
    }


#: the containers' main process: runs until SIGTERM, so stops are quick
SLEEP_FOREVER = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


def busybox_pod(
    name: str,
    template: str | None = None,
    script: str = SLEEP_FOREVER,
    env: dict[str, str] | None = None,
    resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A hostNetwork busybox pod with one container ``c``; with ``template``, its claim ``cpus``."""
    container: dict[str, Any] = {
        "name": "c",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script],
        "resources": dict(resources or {}),
    }
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 2,
        "containers": [container],
    }
    if template is not None:
        spec["resourceClaims"] = [{"name": "cpus", "resourceClaimTemplateName": template}]
        container["resources"]["claims"] = [{"name": "cpus"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _apply_deploy(admin: ApiClient) -> None:
    admin.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for obj in kustomize_base_objects():
        if obj["kind"] == "DaemonSet":
            continue
        admin.create(collection_path(obj), obj, fieldValidation="Strict")


def _wait_node_ready(admin: ApiClient, kubelet: Kubelet, timeout: float = 90) -> None:
    """The kubelet registered the Node and reports Ready; then drop the not-ready taint that only a
    node-lifecycle controller (not run here) would remove."""

    def ready() -> bool:
        assert kubelet.process is not None
        kubelet.process.check_running()
        try:
            node = admin.get(f"/api/v1/nodes/{NODE}")
        except ApiError:
            return False
        cond = condition(node, "Ready")
        return cond is not None and cond["status"] == "True"

    wait_for(ready, timeout, f"Node {NODE} Ready", interval=0.2)
    admin.patch(f"/api/v1/nodes/{NODE}", {"spec": {"taints": None}})


def _skip_reason(scratch: Path) -> str | None:
    bin_dir, node_bin = binary_dir(), node_binary_dir()
    missing = [n for n in (*missing_binaries(bin_dir), "kubelet") if not os.access(bin_dir / n, os.X_OK)]
    if missing:
        return (
            f"binaries missing in {bin_dir}: {', '.join(sorted(set(missing)))} (run tests/e2e/build-bins.sh)"
        )
    missing = missing_node_binaries(node_bin)
    if missing:
        return f"binaries missing in {node_bin}: {', '.join(missing)} (run tests/node/build-bins.sh)"
    if busybox_binary() is None:
        return (
            "busybox-static not installed (apt-get install busybox-static): the tier's images are made of it"
        )
    return preflight(scratch)


@pytest.fixture(scope="session")
def node_session() -> Iterator[NodeCluster]:
    """The session's node; everything is stopped, unmounted and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="nnode", dir="/tmp"))
    reason = _skip_reason(root / "overlay-check")
    if reason is not None:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"node tier: {reason}")
    cgroup_root = f"numadra-node-{uuid.uuid4().hex[:8]}"
    host = HostRecord.take(cgroup_root, (root,))
    t0 = time.monotonic()
    (root / "cdi").mkdir()
    (root / "cp").mkdir()
    plane = ControlPlane(
        binary_dir(),
        root / "cp",
        NODE,
        service_account_admission=True,
        controllers=CONTROLLERS,
        extra_ips=(KUBERNETES_SERVICE_IP,),
    )
    containerd = Containerd(node_binary_dir(), root / "ctrd", root / "cdi", PAUSE_IMAGE)
    containerd.root.mkdir()
    # The kubelet's real root dir when this host has none: the DaemonSet's socket paths (which
    # the driver names to the kubelet as seen in its container) are then the kubelet's own.
    kubelet_root = None if os.path.lexists(REAL_KUBELET_ROOT) else REAL_KUBELET_ROOT
    kubelet = Kubelet(
        binary_dir(), root, NODE, plane.root / "node.kubeconfig", containerd, cgroup_root, kubelet_root
    )
    node: NodeCluster | None = None
    keep = os.environ.get("NUMADRA_NODE_KEEP") == "1"
    try:
        # images: made from busybox-static, imported into containerd's k8s.io namespace
        busybox = busybox_binary()
        assert busybox is not None
        containerd.start()
        timings = {"containerd_ready_s": time.monotonic() - t0}
        for ref, cmd, file in (
            (BUSYBOX_IMAGE, ["/bin/sh"], "busybox.tar"),
            (PAUSE_IMAGE, PAUSE_CMD, "pause.tar"),
        ):
            containerd.import_image(write_image_archive(root / file, ref, busybox, cmd))
        timings["images_s"] = time.monotonic() - t0
        plane.start()
        assert plane.admin is not None
        admin = plane.admin
        _apply_deploy(admin)
        timings["control_plane_s"] = time.monotonic() - t0
        kubelet.start()
        node = NodeCluster(plane, admin, root, containerd, kubelet, host)
        _wait_node_ready(admin, kubelet)
        timings["node_ready_s"] = time.monotonic() - t0
        # the pod the driver's token is bound to: the kubelet really runs it
        host_pod = busybox_pod(HOST_POD)
        host_pod["spec"].update(serviceAccountName=SERVICE_ACCOUNT, automountServiceAccountToken=False,
                                nodeName=NODE)  # fmt: skip
        host_pod["metadata"]["labels"] = {"app.kubernetes.io/name": "numadra"}
        admin.create(f"/api/v1/namespaces/{NAMESPACE}/pods", host_pod)
        node.host_pod_uid = node.wait_running(NAMESPACE, HOST_POD)["metadata"]["uid"]
        timings["host_pod_running_s"] = time.monotonic() - t0
        node.start_driver()
        timings["driver_ready_s"] = time.monotonic() - t0
        node.timings = timings
        version = admin.get("/version")
        SUMMARY["versions"] = {
            **plane.versions(),
            "apiserver /version": version["gitVersion"],
            "kubelet": kubelet.version(),
            "containerd": containerd.version(),
            "runc": _first_line(["runc", "--version"]),
            "busybox": _first_line([str(busybox)]),
        }
        SUMMARY["versions"].pop("drakubelet", None)
        SUMMARY["timings"] = timings
        print(f"\nnode up in {time.monotonic() - t0:.1f}s: {timings} root={root}")
    except BaseException:
        print(log_tails(root, patterns=NODE_LOGS))
        _teardown(node, plane, containerd, kubelet, host, keep)
        raise
    try:
        yield node
    finally:
        _teardown(node, plane, containerd, kubelet, host, keep)


def _first_line(argv: list[str]) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    lines = (res.stdout or res.stderr).strip().splitlines()
    return lines[0] if lines else "?"


def _teardown(
    node: NodeCluster | None,
    plane: ControlPlane,
    containerd: Containerd,
    kubelet: Kubelet,
    host: HostRecord,
    keep: bool,
) -> None:
    if keep:
        print(f"NUMADRA_NODE_KEEP=1: processes stopped, host NOT restored; files in {host.own_dirs}")
    if node is not None:
        if keep:
            node.host.own_dirs = ()
        node.teardown()
        return
    kubelet.stop()
    _teardown_containerd_pods(containerd)
    plane.stop()
    containerd.stop()
    if keep:
        host.own_dirs = ()
    host.restore()


def _teardown_containerd_pods(containerd: Containerd) -> None:
    if containerd.process is None:
        return
    try:
        containerd.remove_all_pods()
    except (AssertionError, OSError, subprocess.SubprocessError) as exc:
        print(f"node teardown: removing pod sandboxes: {exc}")


#: the node's logs: not a recursive search, the containerd and kubelet state trees hold pod logs
NODE_LOGS = ("*.log", "*/*.log", "numadra-run-*.out")


@pytest.fixture
def node(node_session: NodeCluster, request: pytest.FixtureRequest) -> Iterator[NodeCluster]:
    """The session node, alive, with the driver running with the default flags before each scenario.

    When the scenario fails, the tails of all component logs are printed with its report.
    """
    if node_session.torn_down:
        pytest.skip("the node was torn down by the host-clean check")
    if node_session.driver is None or node_session.driver_flags != DEFAULT_DRIVER_FLAGS:
        node_session.stop_driver()
        node_session.start_driver(DEFAULT_DRIVER_FLAGS)
    node_session.check_running()
    yield node_session
    if request.node.stash.get(CALL_FAILED, False):
        print(log_tails(node_session.root, patterns=NODE_LOGS))


__all__ = [
    "DRIVER",
    "NAMESPACE",
    "NODE",
    "RESOURCE",
    "SUMMARY",
    "NodeCluster",
    "ProcStatus",
    "busybox_pod",
    "cpu_template",
    "figure",
]
