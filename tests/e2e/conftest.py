"""One real cluster for the whole e2e session: control plane, Ready Node, deploy/, numadra run, drakubelet.

Started once (``e2e_cluster``, session scope) because every scenario only needs seconds on it and
the processes need a few seconds to come up. The driver runs with a ServiceAccount token bound to
its (never running) Pod on the node, so the apiserver authenticates it with the
``authentication.kubernetes.io/node-name`` extra and the deploy/ RBAC and ValidatingAdmissionPolicy
apply exactly as in a cluster. drakubelet is kubelet's own DRA manager and plugin watcher, acting
as the node's kubelet (``system:node:<node>`` via the Node authorizer).

Skipped as a whole, with the reason, when the binaries of tests/e2e/build-bins.sh are missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from driver.claims.render import claim_spec_file_name
from driver.pinning.types import ENV_CPUS, parse_cpulist
from driver.state.journal import Journal, journal_path
from harness.controlplane import (
    ApiClient,
    ApiError,
    ControlPlane,
    Process,
    binary_dir,
    jsonl,
    missing_binaries,
    wait_for,
    write_kubeconfig,
)
from harness.hosttree import TOPOLOGIES, Topology, write_host_tree
from tests.conftest import CALL_FAILED, SECTIONS

REPO = Path(__file__).resolve().parents[2]
DEPLOY_BASE = REPO / "deploy" / "kustomize" / "base"
DRIVER = "numadra.dev"
NAMESPACE = "numadra-system"
SERVICE_ACCOUNT = "numadra"
NODE = "node-e2e"
TOPOLOGY = "dgx"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
RESOURCE = "/apis/resource.k8s.io/v1"
#: objects the e2e tier applies from the kustomize base (the DaemonSet never runs here)
SKIPPED_KINDS = frozenset({"DaemonSet"})


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The component versions (or why the tier is skipped) at the top of every test log."""
    bin_dir = binary_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        return [f"e2e: binaries missing in {bin_dir}: {', '.join(missing)} (run tests/e2e/build-bins.sh)"]
    versions = ControlPlane(bin_dir, Path("/nonexistent"), NODE).versions()
    return [f"e2e binaries ({bin_dir}): " + "; ".join(f"{k} {v}" for k, v in versions.items())]


#: what the terminal summary reports: component versions, startup timings, scenario durations
_SUMMARY: dict[str, Any] = {"versions": {}, "timings": {}, "scenarios": []}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect each e2e/podman scenario's outcome and call duration for the summary."""
    if report.when == "call" and report.nodeid.startswith("tests/e2e/"):
        _SUMMARY["scenarios"].append((report.nodeid, report.outcome, report.duration))


def _section() -> list[str]:
    """Versions and timings of the real components, one line per scenario (the run's summary)."""
    if not _SUMMARY["versions"] and not _SUMMARY["scenarios"]:
        return []
    lines = []
    if _SUMMARY["versions"]:
        versions = "; ".join(f"{k} {v}" for k, v in _SUMMARY["versions"].items())
        lines.append(f"components: {versions}")
        timings = ", ".join(f"{k}={v:.1f}" for k, v in _SUMMARY["timings"].items())
        lines.append(f"startup (s): {timings}")
    lines += [f"{outcome:7s} {seconds:6.2f}s  {nodeid}" for nodeid, outcome, seconds in _SUMMARY["scenarios"]]
    report = os.environ.get("NUMADRA_E2E_REPORT")
    if report:
        Path(report).write_text(json.dumps(_SUMMARY, indent=1) + "\n")
        lines.append(f"written to {report}")
    return lines


SECTIONS["numadra e2e tier"] = _section


def kustomize_base_objects() -> list[dict[str, Any]]:
    """The base's resources in their listed order, with its common labels; no kustomize needed.

    The base uses only ``resources`` and ``labels`` (plus ``images``, which only touches the
    DaemonSet); tests/e2e/test_deploy_render.py checks this equals ``kustomize build`` where
    kustomize is available.
    """
    kustomization = yaml.safe_load((DEPLOY_BASE / "kustomization.yaml").read_text())
    labels: dict[str, str] = {}
    for entry in kustomization.get("labels", []):
        labels.update(entry.get("pairs", {}))
    objects = []
    for resource in kustomization["resources"]:
        for obj in yaml.safe_load_all((DEPLOY_BASE / resource).read_text()):
            if obj:
                obj["metadata"].setdefault("labels", {}).update(labels)
                objects.append(obj)
    return objects


def collection_path(obj: dict[str, Any]) -> str:
    """The REST collection of an object (core or named group, namespaced or not)."""
    group_version = obj["apiVersion"]
    prefix = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    plural = {
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
        "DeviceClass": "deviceclasses",
        "Namespace": "namespaces",
        "NetworkPolicy": "networkpolicies",
    }[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


@dataclass
class Cluster:
    """The running session cluster and helpers the scenarios share."""

    plane: ControlPlane
    admin: ApiClient
    root: Path
    driver_token: str
    driver_pod_uid: str
    drakubelet: Process | None = None
    driver: Process | None = None
    driver_runs: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    #: more ``numadra run`` flags, after the standard ones (e.g. ``--numa-node-list``)
    driver_args: tuple[str, ...] = ()
    #: more drakubelet flags (e.g. its ``--feature-gates``, for a gate the kubelet side reads)
    drakubelet_args: tuple[str, ...] = ()

    # paths ----------------------------------------------------------------------------------------
    @property
    def host(self) -> Path:
        return self.root / "host"

    @property
    def registrar_dir(self) -> Path:
        return self.root / "reg"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugin"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def journal(self) -> Path:
        return journal_path(self.plugin_dir)

    @property
    def events_path(self) -> Path:
        return self.root / "drakubelet.out"

    # processes ------------------------------------------------------------------------------------
    def start_driver(self) -> Process:
        """Start ``numadra run`` as the driver pod's container would (a new log file per run)."""
        kubeconfig = write_kubeconfig(
            self.root / "driver.kubeconfig",
            self.plane.server,
            self.plane.ca_file,
            self.driver_token,
            f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}",
        )
        self.driver_runs += 1
        argv = [
            sys.executable, "-m", "driver.cli", "run",
            "--host-root", str(self.host),
            "--kubeconfig", str(kubeconfig),
            "--registrar-dir", str(self.registrar_dir),
            "--plugin-dir", str(self.plugin_dir),
            "--cdi-dir", str(self.cdi_dir),
            "--pod-uid", self.driver_pod_uid,
            "--pinning", "off",
            "--hotplug", "off",
            "--rescan-interval", "0",
            "--log-format", "json",
            *self.driver_args,
        ]  # fmt: skip
        proc = Process(
            f"numadra-run-{self.driver_runs}",
            argv,
            self.root / f"numadra-run-{self.driver_runs}.out",
            self.root / f"numadra-run-{self.driver_runs}.log",
        )
        proc.start(env={"NODE_NAME": NODE, "PYTHONPATH": str(REPO)}, cwd=REPO)
        self.driver = proc
        return proc

    def kill_driver(self) -> None:
        """SIGKILL ``numadra run`` (no cleanup of sockets or files, as a crash or OOM kill)."""
        assert self.driver is not None
        self.driver.stop(signal.SIGKILL)
        self.driver = None

    def start_drakubelet(self) -> Process:
        proc = Process(
            "drakubelet",
            [
                str(self.plane.bin_dir / "drakubelet"),
                f"--kubeconfig={self.plane.root / 'node.kubeconfig'}",
                f"--node-name={NODE}",
                f"--registry-dir={self.registrar_dir}",
                f"--state-dir={self.root / 'kubelet-dra'}",
                "--backoff-max=5s",
                *self.drakubelet_args,
            ],
            self.events_path,
            self.root / "drakubelet.log",
        )
        self.drakubelet = proc.start()
        return proc

    def check_running(self) -> None:
        self.plane.check_running()
        for proc in (self.driver, self.drakubelet):
            if proc is not None:
                proc.check_running()

    # drakubelet events ----------------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        return jsonl(self.events_path)

    def wait_event(self, timeout: float, what: str, **match: Any) -> dict[str, Any]:
        """The first drakubelet event whose fields equal ``match``."""

        def found() -> dict[str, Any] | None:
            self.check_running()
            for event in self.events():
                if all(event.get(k) == v for k, v in match.items()):
                    return event
            return None

        return wait_for(found, timeout, what, interval=0.1)

    def registrations(self) -> int:
        return sum(1 for e in self.events() if e.get("event") == "registered" and e.get("driver") == DRIVER)

    # API helpers ----------------------------------------------------------------------------------
    def slices(self) -> list[dict[str, Any]]:
        """Our node's ResourceSlices."""
        return self.admin.items(
            f"{RESOURCE}/resourceslices", fieldSelector=f"spec.nodeName={NODE},spec.driver={DRIVER}"
        )

    def published_devices(self) -> set[str]:
        return {d["name"] for s in self.slices() for d in s["spec"].get("devices", [])}

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.admin.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.admin.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}"))

    def new_namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.admin.create("/api/v1/namespaces", {"metadata": {"name": name}})
        return name

    def create_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        return dict(self.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod, fieldValidation="Strict"))

    def wait_bound(self, namespace: str, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """The pod once the real scheduler bound it to our node (PodScheduled True)."""

        def bound() -> dict[str, Any] | None:
            self.check_running()
            pod = self.pod(namespace, name)
            scheduled = condition(pod, "PodScheduled")
            if scheduled is not None and scheduled["status"] == "True":
                assert pod["spec"].get("nodeName") == NODE
                return pod
            return None

        return wait_for(bound, timeout, f"pod {namespace}/{name} to be scheduled", interval=0.2)

    def prepared(self, pod: dict[str, Any], timeout: float = 60.0) -> dict[str, list[str]]:
        """drakubelet's CDI IDs per container of a pod, once it prepared the pod."""
        pod_uid = pod["metadata"]["uid"]
        containers = len(pod["spec"]["containers"]) + len(pod["spec"].get("initContainers", []))

        def done() -> dict[str, list[str]] | None:
            self.check_running()
            found = {
                e["container"]: list(e["cdiDevices"])
                for e in self.events()
                if e.get("event") == "prepared" and e.get("uid") == pod_uid
            }
            return found if len(found) >= containers else None

        return wait_for(done, timeout, f"drakubelet to prepare pod {pod_uid}", interval=0.1)

    def delete_pod(self, namespace: str, name: str, timeout: float = 60.0) -> None:
        """Delete gracefully as a user would; wait until drakubelet unprepared it and the pod is gone."""
        uid = self.pod(namespace, name)["metadata"]["uid"]
        self.admin.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
        self.wait_event(timeout, f"unprepare of pod {namespace}/{name}", event="unprepared", uid=uid)
        wait_for(
            lambda: not self.admin.exists(f"/api/v1/namespaces/{namespace}/pods/{name}"),
            timeout,
            f"pod {namespace}/{name} to be removed",
            interval=0.2,
        )

    def claim_files(self, claim_uid: str) -> list[Path]:
        """Every CDI spec file of a claim (one: its spec, named after its UID)."""
        return sorted(p for p in self.cdi_dir.iterdir() if claim_uid in p.name)

    def spec_file(self, claim_uid: str) -> Path:
        return self.cdi_dir / claim_spec_file_name(DRIVER, claim_uid)

    def claim_cpus(self, claim_uid: str) -> frozenset[int]:
        """The CPUs the claim's CDI spec hands its containers (``NUMADRA_CPUS``)."""
        spec = json.loads(self.spec_file(claim_uid).read_text())
        for device in spec["devices"]:
            for item in device["containerEdits"].get("env", []):
                key, _, value = item.partition("=")
                if key == ENV_CPUS:
                    return parse_cpulist(value)
        raise AssertionError(f"no {ENV_CPUS} in the CDI spec of claim {claim_uid}")

    def journal_uids(self) -> set[str]:
        """The claims the driver's journal holds now (read with the driver's own reader)."""
        journal = Journal(self.journal)
        journal.load()
        return {entry.uid for entry in journal.entries()}


def claim_pod(
    name: str, requests: Sequence[str], *, claim: str = "", template: str = "", container: str = "app"
) -> dict[str, Any]:
    """A pod of one container that uses ``requests`` of one claim: the existing ``claim``, or one
    made for the pod from ``template``. Its image never runs: the e2e tier has no runtime."""
    if bool(claim) == bool(template):
        raise ValueError("name either a claim or a template")
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "devices", **source}],
            "containers": [
                {
                    "name": container,
                    "image": "localhost/never-runs:1",
                    "resources": {"claims": [{"name": "devices", "request": r} for r in requests]},
                }
            ],
        },
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The status condition of type ``kind`` (None when absent)."""
    for cond in obj.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _api_version(admin: ApiClient) -> dict[str, str]:
    version = admin.get("/version")
    return {"apiserver /version": f"{version['gitVersion']} ({version['goVersion']})"}


def _apply_deploy(admin: ApiClient) -> None:
    admin.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for obj in kustomize_base_objects():
        if obj["kind"] in SKIPPED_KINDS:
            continue
        admin.create(collection_path(obj), obj, fieldValidation="Strict")


def _ready_node(admin: ApiClient, declared_features: Sequence[str] = ()) -> None:
    """Create the Node as upstream's DRA integration tests do: Ready, capacity, no taints; with
    ``declared_features`` in ``status.declaredFeatures``, as a kubelet with those gates on says."""
    admin.create(
        "/api/v1/nodes",
        {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"}}},
    )
    node = admin.get(f"/api/v1/nodes/{NODE}")
    capacity = {"cpu": "224", "memory": "2000Gi", "pods": "110"}
    node["status"] = {
        "capacity": capacity,
        "allocatable": capacity,
        "phase": "Running",
        **({"declaredFeatures": list(declared_features)} if declared_features else {}),
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "e2e",
                "lastHeartbeatTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ],
    }
    node = admin.put(f"/api/v1/nodes/{NODE}/status", node)
    # the TaintNodesByCondition admission plugin added node.kubernetes.io/not-ready on create
    node["spec"]["taints"] = []
    admin.put(f"/api/v1/nodes/{NODE}", node)


def _driver_token(admin: ApiClient) -> tuple[str, str]:
    """A token of the driver's ServiceAccount bound to its Pod on the node, and that Pod's UID.

    The Pod is never run; binding the token to a Pod bound to the node is what makes the apiserver
    put the node name into the token (and into the user's extra on every request).
    """
    pod = admin.create(
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "metadata": {"name": "numadra-e2e", "labels": {"app.kubernetes.io/name": "numadra"}},
            "spec": {
                "nodeName": NODE,
                "serviceAccountName": SERVICE_ACCOUNT,
                "automountServiceAccountToken": False,
                "containers": [{"name": "numadra", "image": "localhost/numadra:0.1.0", "args": ["run"]}],
            },
        },
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 4 * 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                               "uid": pod["metadata"]["uid"]},
        },
    }  # fmt: skip
    answer = admin.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token", request)
    return str(answer["status"]["token"]), str(pod["metadata"]["uid"])


def _binaries_or_skip() -> Path:
    bin_dir = binary_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        pytest.skip(
            f"e2e binaries missing in {bin_dir}: {', '.join(missing)}; build them with "
            "tests/e2e/build-bins.sh (needs Go 1.26 and the Go module proxy)"
        )
    for tool in ("openssl",):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found: the e2e tier makes its certificates with it")
    return bin_dir


@contextlib.contextmanager
def start_cluster(
    *,
    topology: Topology | None = None,
    feature_gates: Mapping[str, bool] | None = None,
    extra_args: Mapping[str, Sequence[str]] | None = None,
    driver_args: Sequence[str] = (),
    drakubelet_args: Sequence[str] = (),
    slices_expected: bool = True,
    declared_features: Sequence[str] = (),
) -> Iterator[Cluster]:
    """A whole cluster (control plane, deploy/, Ready Node, drakubelet, ``numadra run``) until exit.

    The session's cluster is the one with no arguments. A scenario that needs the control plane
    configured otherwise (``feature_gates`` for the apiserver, scheduler and controller-manager,
    ``extra_args`` per component, see :class:`ControlPlane`) or the driver run with other flags
    (``driver_args``; ``slices_expected`` False where that apiserver is meant to refuse them), or
    drakubelet with more flags (``drakubelet_args``), or the Node declaring features
    (``declared_features``: the apiserver takes a slice with ``nodeAllocatableResources`` only
    for a Node that declares ``DRANodeAllocatableResources``),
    starts its own with this, module-scoped so its start is paid once; it costs
    a control plane's start (see the tier summary's timings). Skips when the binaries are missing.
    """
    bin_dir = _binaries_or_skip()
    # short path: AF_UNIX socket paths are limited to 107 bytes
    root = Path(tempfile.mkdtemp(prefix="ne2e", dir="/tmp"))
    plane = ControlPlane(
        bin_dir, root / "cp", NODE, feature_gates=dict(feature_gates or {}), extra_args=dict(extra_args or {})
    )
    (root / "cp").mkdir()
    cluster: Cluster | None = None
    keep = os.environ.get("NUMADRA_E2E_KEEP") == "1"
    try:
        t0 = time.monotonic()
        plane.start()
        assert plane.admin is not None
        admin = plane.admin
        _apply_deploy(admin)
        _ready_node(admin, declared_features)
        token, pod_uid = _driver_token(admin)
        cluster = Cluster(
            plane,
            admin,
            root,
            token,
            pod_uid,
            driver_args=tuple(driver_args),
            drakubelet_args=tuple(drakubelet_args),
        )
        write_host_tree(cluster.host, topology or TOPOLOGIES[TOPOLOGY])
        for directory in (cluster.registrar_dir, cluster.cdi_dir):
            directory.mkdir()
        cluster.start_drakubelet()
        cluster.wait_event(30, "drakubelet ready", event="ready")
        cluster.start_driver()
        cluster.wait_event(30, "the driver's registration with drakubelet", event="registered", driver=DRIVER)
        if slices_expected:
            wait_for(lambda: cluster is not None and cluster.slices(), 30, "our ResourceSlices")
        cluster.timings = {**plane.timings, "cluster_ready_s": time.monotonic() - t0}
        print(f"\ne2e cluster up in {cluster.timings['cluster_ready_s']:.1f}s: {plane.timings} root={root}")
    except BaseException:
        print(log_tails(root))
        _shutdown(plane, cluster, root, keep)
        raise
    try:
        yield cluster
    finally:
        _shutdown(plane, cluster, root, keep)


@pytest.fixture(scope="session")
def e2e_cluster() -> Iterator[Cluster]:
    """The session's cluster; everything is stopped and removed afterwards."""
    with start_cluster() as cluster:
        _SUMMARY["versions"] = {**cluster.plane.versions(), **_api_version(cluster.admin)}
        _SUMMARY["timings"] = cluster.timings
        yield cluster


def _shutdown(plane: ControlPlane, cluster: Cluster | None, root: Path, keep: bool) -> None:
    """Stop the driver and drakubelet, then the control plane (dependents first); remove the dir."""
    for proc in (cluster.driver, cluster.drakubelet) if cluster is not None else ():
        if proc is not None:
            proc.stop(signal.SIGTERM)
    plane.stop()
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


def log_tails(root: Path, chars: int = 2500, patterns: tuple[str, ...] = ("**/*.log", "**/*.out")) -> str:
    """The end of every component's log under ``root`` (files matching ``patterns``, each pattern's
    matches sorted): what to read when a scenario fails."""
    parts = []
    for path in (p for pattern in patterns for p in sorted(root.glob(pattern))):
        if path.is_file() and path.stat().st_size:
            tail = path.read_text(errors="replace")[-chars:]
            parts.append(f"----- {path.relative_to(root)} (last {chars} chars)\n{tail}")
    return "\n".join(parts)


@pytest.fixture
def cluster(e2e_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The session cluster, checked alive before each scenario (a driver a failed test left dead restarts).

    When the scenario fails, the tails of all component logs are printed with its report.
    """
    if e2e_cluster.driver is None:
        registrations = e2e_cluster.registrations()
        e2e_cluster.start_driver()
        wait_for(lambda: e2e_cluster.registrations() > registrations, 30, "the driver to register again")
    e2e_cluster.check_running()
    yield e2e_cluster
    if request.node.stash.get(CALL_FAILED, False):
        print(log_tails(e2e_cluster.root))


__all__ = [
    "DRIVER",
    "NAMESPACE",
    "NODE",
    "RESOURCE",
    "ApiError",
    "Cluster",
    "condition",
    "kustomize_base_objects",
    "start_cluster",
]
