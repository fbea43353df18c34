"""The kustomize base in deploy/: kinds, API versions, least-privilege RBAC, DaemonSet wiring.

Pure YAML checks (no kustomize needed); tests/integration/deploy checks that Helm renders the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from driver import DEFAULT_DRIVER_NAME
from driver.explain.analyze import default_device_classes
from driver.explain.cel import CelDevice, evaluate

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "deploy" / "kustomize" / "base"


def _objects() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    out: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        out.extend(doc for doc in yaml.safe_load_all((BASE / name).read_text()) if doc)
    return out


def _one(kind: str) -> dict[str, Any]:
    found = [o for o in _objects() if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def _container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = _one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_every_yaml_under_deploy_parses() -> None:
    """Every YAML file in deploy/ (Helm templates aside) is valid YAML with kind and apiVersion."""
    files = [p for p in (ROOT / "deploy").rglob("*.yaml") if "templates" not in p.parts]
    assert len(files) >= 10
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None or path.name in ("values.yaml", "Chart.yaml"):
                continue
            assert {"apiVersion", "kind"} <= doc.keys(), path


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        pytest.param("ServiceAccount", "v1", id="serviceaccount"),
        pytest.param("ClusterRole", "rbac.authorization.k8s.io/v1", id="clusterrole"),
        pytest.param("ClusterRoleBinding", "rbac.authorization.k8s.io/v1", id="clusterrolebinding"),
        pytest.param("ValidatingAdmissionPolicy", "admissionregistration.k8s.io/v1", id="vap"),
        pytest.param("ValidatingAdmissionPolicyBinding", "admissionregistration.k8s.io/v1", id="vap-binding"),
        pytest.param("DaemonSet", "apps/v1", id="daemonset"),
    ],
)
def test_kinds_and_api_versions(kind: str, api_version: str) -> None:
    """The base holds exactly one object of each kind, in the GA API version."""
    assert _one(kind)["apiVersion"] == api_version


def test_clusterrole_is_exactly_the_hardening_guide() -> None:
    """RBAC: get claims and nodes, manage slices, claim status + associated-node driver verbs,
    create Events (pinning failures, NVIDIA user-space warnings on the pod); no more."""
    rules = _one("ClusterRole")["rules"]
    normalized = sorted(
        (
            tuple(r["apiGroups"]),
            tuple(r["resources"]),
            tuple(sorted(r["verbs"])),
            tuple(r.get("resourceNames", ())),
        )
        for r in rules
    )
    assert normalized == sorted(
        [
            (("resource.k8s.io",), ("resourceclaims",), ("get",), ()),
            (("resource.k8s.io",), ("resourceclaims/status",), ("get", "patch", "update"), ()),
            (
                ("resource.k8s.io",),
                ("resourceclaims/driver",),
                ("associated-node:patch", "associated-node:update"),
                (DEFAULT_DRIVER_NAME,),
            ),
            (
                ("resource.k8s.io",),
                ("resourceslices",),
                ("create", "delete", "get", "list", "patch", "update", "watch"),
                (),
            ),
            (("",), ("nodes",), ("get",), ()),
            (("",), ("events",), ("create",), ()),
        ]
    )
    assert not any("*" in v for r in rules for v in r["verbs"] + r["resources"] + r["apiGroups"])


def test_binding_grants_the_role_to_the_daemonset_serviceaccount() -> None:
    """The ClusterRoleBinding ties the ClusterRole to the ServiceAccount the DaemonSet runs as."""
    binding, sa = _one("ClusterRoleBinding"), _one("ServiceAccount")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": _one("ClusterRole")["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    ]
    assert _one("DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_admission_policy_pins_writes_to_own_node_and_driver() -> None:
    """The VAP matches our ServiceAccount's slice writes (v1 included) and checks node-name and driver."""
    vap, binding, sa = (
        _one("ValidatingAdmissionPolicy"),
        _one("ValidatingAdmissionPolicyBinding"),
        _one("ServiceAccount"),
    )
    spec = vap["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["resourceslices"]
    assert "v1" in rule["apiVersions"]
    assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"]
    username = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    assert [c["expression"] for c in spec["matchConditions"]] == [
        f'request.userInfo.username == "{username}"'
    ]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "authentication.kubernetes.io/node-name" in variables["userNodeName"]
    assert "oldObject" in variables["slice"]
    checks = [v["expression"] for v in spec["validations"]]
    assert "variables.userNodeName == variables.objectNodeName" in checks
    assert f'variables.objectDriver == "{DEFAULT_DRIVER_NAME}"' in checks
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}


def test_daemonset_rolling_update_surges_one() -> None:
    """Rolling update starts the new pod first (maxSurge 1) and never leaves a node without one."""
    strategy = _one("DaemonSet")["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


#: every hostPath of the base DaemonSet: host path -> (mount path, read-only); nothing else
BASE_HOST_MOUNTS = {
    "/var/lib/kubelet/plugins_registry": ("/var/lib/kubelet/plugins_registry", False),
    f"/var/lib/kubelet/plugins/{DEFAULT_DRIVER_NAME}": (
        f"/var/lib/kubelet/plugins/{DEFAULT_DRIVER_NAME}",
        False,
    ),
    "/var/run/cdi": ("/var/run/cdi", False),
    "/sys": ("/host/sys", True),
    "/dev": ("/host/dev", True),
    "/usr": ("/host/usr", True),
    "/var/run/nri": ("/var/run/nri", False),
}


def host_mounts(ds: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """host path -> (mount path, read-only) of a DaemonSet's hostPath volumes."""
    spec = ds["spec"]["template"]["spec"]
    by_volume = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    (container,) = spec["containers"]
    out: dict[str, tuple[str, bool]] = {}
    for mount in container["volumeMounts"]:
        if mount["name"] in by_volume:
            read_only = bool(mount.get("readOnly", False))
            if read_only:
                assert mount.get("recursiveReadOnly") == "IfPossible", mount
            out[by_volume[mount["name"]]] = (mount["mountPath"], read_only)
    assert len(out) == len(by_volume), "a hostPath volume is not mounted"
    return out


def test_daemonset_mounts_only_what_it_reads_and_writes() -> None:
    """Not the host's / (kubelet credentials, every pod's secrets) and not all of
    /var/lib/kubelet/plugins (other drivers' sockets): sys and dev read-only for discovery, usr
    read-only for the NVIDIA driver's files, the driver's own plugin dir, the registry, CDI and
    NRI dirs read-write."""
    mounts = host_mounts(_one("DaemonSet"))
    assert mounts == BASE_HOST_MOUNTS
    assert "/" not in mounts and "/var/lib/kubelet/plugins" not in mounts and "/proc" not in mounts
    assert "--host-root=/host" in _container()["args"]


def test_daemonset_env_args_and_probes() -> None:
    """NODE_NAME/POD_UID/POD_IP from the downward API; metrics on the pod IP; probes on that port."""
    c = _container()
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_UID": "metadata.uid", "POD_IP": "status.podIP"}
    assert c["args"][0] == "run"
    assert "--host-root=/host" in c["args"]
    assert "--pinning=nri" in c["args"]
    (port,) = c["ports"]
    assert f"--metrics-address=$(POD_IP):{port['containerPort']}" in c["args"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert {"cpu", "memory"} <= c["resources"]["requests"].keys()


def test_network_policy_admits_only_monitoring_to_the_metrics_port() -> None:
    """Ingress to the driver pods: the metrics port, from the monitoring namespace; nothing else."""
    policy = _one("NetworkPolicy")
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["metadata"]["namespace"] == _one("DaemonSet")["metadata"]["namespace"]
    spec = policy["spec"]
    pod_labels = _one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    (port,) = _container()["ports"]
    assert rule["ports"] == [{"protocol": "TCP", "port": port["name"]}]


def test_cgroupfs_component_is_unprivileged() -> None:
    """The cgroupfs variant only swaps the backend and drops the NRI mount: no privilege, no new mount."""
    component = ROOT / "deploy" / "kustomize" / "components" / "cgroupfs" / "kustomization.yaml"
    (patch,) = yaml.safe_load(component.read_text())["patches"]
    ops = yaml.safe_load(patch["patch"])
    assert {op["op"] for op in ops} == {"replace", "test", "remove"}
    assert [op["value"] for op in ops if op["op"] == "replace"] == ["--pinning=cgroupfs"]
    assert [op["value"] for op in ops if op["op"] == "test"] == ["nri", "nri"]


def test_daemonset_security_and_scheduling() -> None:
    """No privilege, no capabilities, read-only rootfs; node-critical priority; GPU taints tolerated."""
    spec = _one("DaemonSet")["spec"]["template"]["spec"]
    sc = _container()["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in sc
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert "hostNetwork" not in spec
    assert "hostPID" not in spec


def test_daemonset_selector_matches_pod_labels() -> None:
    """The selector picks the pod template's labels (else the API rejects the DaemonSet)."""
    ds = _one("DaemonSet")["spec"]
    labels = ds["template"]["metadata"]["labels"]
    assert ds["selector"]["matchLabels"].items() <= labels.items()


def test_device_classes_are_the_ones_explain_assumes() -> None:
    """The classes of deploy/ in resource.k8s.io/v1, with the selectors numadra explain assumes."""
    classes = [o for o in _objects() if o["kind"] == "DeviceClass"]
    assert {c["apiVersion"] for c in classes} == {"resource.k8s.io/v1"}
    defaults = default_device_classes(DEFAULT_DRIVER_NAME)
    assert {
        c["metadata"]["name"]: tuple(s["cel"]["expression"] for s in c["spec"]["selectors"]) for c in classes
    } == {name: cls.selectors for name, cls in defaults.items()}
    extended = {c["metadata"]["name"]: c["spec"].get("extendedResourceName") for c in classes}
    assert extended == {
        "gpu.numadra.dev": None,
        "nic.numadra.dev": None,
        "cpu.numadra.dev": None,
        "memory.numadra.dev": None,
        "nvidia-gpu.numadra.dev": "nvidia.com/gpu",
        "amd-gpu.numadra.dev": "amd.com/gpu",
        "intel-i915-gpu.numadra.dev": "gpu.intel.com/i915",
        "intel-xe-gpu.numadra.dev": "gpu.intel.com/xe",
    }


def _gpu(vendor: str, kernel_driver: str) -> CelDevice:
    attrs = {"type": "gpu", "vendor": vendor, "driver": kernel_driver}
    return CelDevice(DEFAULT_DRIVER_NAME, {DEFAULT_DRIVER_NAME: attrs}, {})


@pytest.mark.parametrize(
    ("cls", "selected"),
    [
        pytest.param("nvidia-gpu", {("nvidia", "nvidia")}, id="nvidia"),
        pytest.param("amd-gpu", {("amd", "amdgpu")}, id="amd"),
        pytest.param("intel-i915-gpu", {("intel", "i915")}, id="intel-i915"),
        pytest.param("intel-xe-gpu", {("intel", "xe")}, id="intel-xe"),
        pytest.param(
            "gpu", {("nvidia", "nvidia"), ("amd", "amdgpu"), ("intel", "i915"), ("intel", "xe")}, id="generic"
        ),
    ],
)
def test_vendor_class_selects_only_its_vendors_gpus(cls: str, selected: set[tuple[str, str]]) -> None:
    """nvidia.com/gpu (and each vendor's resource) can only ever be an NVIDIA (that vendor's) GPU."""
    (obj,) = [
        o for o in _objects() if o["kind"] == "DeviceClass" and o["metadata"]["name"] == f"{cls}.numadra.dev"
    ]
    (expr,) = [s["cel"]["expression"] for s in obj["spec"]["selectors"]]
    gpus = [("nvidia", "nvidia"), ("amd", "amdgpu"), ("intel", "i915"), ("intel", "xe")]
    got = {g for g in gpus if evaluate(expr, _gpu(*g)).matches is True}
    assert got == selected
    nic = CelDevice(DEFAULT_DRIVER_NAME, {DEFAULT_DRIVER_NAME: {"type": "nic", "vendor": "nvidia"}}, {})
    assert evaluate(expr, nic).matches is False


@pytest.mark.parametrize("dtype", ["gpu", "nic", "cpu"])
def test_device_class_selects_exactly_its_type(dtype: str) -> None:
    """Each class's CEL selects our devices of its type and nothing else (other type, other driver)."""
    (cls,) = [o for o in _objects() if o["kind"] == "DeviceClass" and o["metadata"]["name"].startswith(dtype)]
    (expr,) = [s["cel"]["expression"] for s in cls["spec"]["selectors"]]

    def device(driver: str, t: str) -> CelDevice:
        return CelDevice(driver, {driver: {"type": t}}, {})

    assert evaluate(expr, device(DEFAULT_DRIVER_NAME, dtype)).matches is True
    for other in {"gpu", "nic", "cpu"} - {dtype}:
        assert evaluate(expr, device(DEFAULT_DRIVER_NAME, other)).matches is False
    assert evaluate(expr, device("gpu.example.com", dtype)).matches is False


#: other drivers' DeviceClasses an example may name beside ours (the cross-driver example)
OTHER_DRIVERS_CLASSES = frozenset({"gpu.nvidia.com"})


def test_examples_use_our_device_classes() -> None:
    """Every example claim or template names a DeviceClass of the base (no typos in class names),
    or one of another driver's that the cross-driver example is written for."""
    names = {o["metadata"]["name"] for o in _objects() if o["kind"] == "DeviceClass"} | OTHER_DRIVERS_CLASSES
    used: set[str] = set()
    for path in sorted((ROOT / "deploy" / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc["kind"] not in ("ResourceClaim", "ResourceClaimTemplate"):
                continue
            spec = doc["spec"]["spec"] if doc["kind"] == "ResourceClaimTemplate" else doc["spec"]
            for req in spec["devices"]["requests"]:
                for sub in req.get("firstAvailable") or [req.get("exactly")]:
                    used.add(sub["deviceClassName"])
    assert used
    assert used <= names


def test_chart_and_kustomize_image_follow_the_package_version() -> None:
    """Chart appVersion and the kustomize image tag are the package version (bump them together)."""
    from driver import __version__

    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "numadra" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    (image,) = yaml.safe_load((BASE / "kustomization.yaml").read_text())["images"]
    assert image["newTag"] == __version__


def test_helm_values_default_to_the_kustomize_base() -> None:
    """values.yaml defaults match the base: driver, backend, port, priority, requests, tolerations."""
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "numadra" / "values.yaml").read_text())
    c = _container()
    spec = _one("DaemonSet")["spec"]["template"]["spec"]
    assert values["driverName"] == DEFAULT_DRIVER_NAME
    assert f"--pinning={values['pinning']['backend']}" in c["args"]
    assert c["ports"][0]["containerPort"] == values["metrics"]["port"]
    assert spec["priorityClassName"] == values["priorityClassName"]
    assert c["resources"] == values["resources"]
    assert spec["tolerations"] == values["tolerations"]
    assert values["rbac"]["listClaims"] is False  # the base grants get only
    assert values["rbac"]["readPods"] is False  # the base reads no pods


def test_list_claims_component_adds_only_list_to_the_claims_rule() -> None:
    """The opt-in list-claims component turns the base's claim rule (get) into get+list, nothing else."""
    component = ROOT / "deploy" / "kustomize" / "components" / "list-claims" / "kustomization.yaml"
    patches = yaml.safe_load(component.read_text())["patches"]
    assert [p["target"] for p in patches] == [{"kind": "ClusterRole", "name": "numadra-kubeletplugin"}]
    ops = yaml.safe_load(patches[0]["patch"])
    assert ops == [{"op": "replace", "path": "/rules/0/verbs", "value": ["get", "list"]}]
    rule = _one("ClusterRole")["rules"][0]
    assert (rule["resources"], rule["verbs"]) == (["resourceclaims"], ["get"])
    overlay = ROOT / "deploy" / "kustomize" / "overlays" / "list-claims" / "kustomization.yaml"
    assert yaml.safe_load(overlay.read_text())["components"] == ["../../components/list-claims"]


def test_no_gpus_component_serves_no_gpu_and_installs_no_gpu_class() -> None:
    """The no-gpus component passes a --devices that the driver accepts and that leaves GPUs out,
    and deletes exactly the base's classes that select GPUs (every extended-resource mapping)."""
    from driver.config import device_kinds
    from driver.inventory.model import DeviceKind

    component = ROOT / "deploy" / "kustomize" / "components" / "no-gpus" / "kustomization.yaml"
    patches = yaml.safe_load(component.read_text())["patches"]
    (args_patch,) = [p for p in patches if "target" in p]
    (op,) = yaml.safe_load(args_patch["patch"])
    assert op["path"] == "/spec/template/spec/containers/0/args/-"
    flag, _, value = op["value"].partition("=")
    assert flag == "--devices"
    assert device_kinds(value, flag) == frozenset(DeviceKind) - {DeviceKind.GPU}
    deleted = set()
    for p in patches:
        if "target" in p:
            continue
        doc = yaml.safe_load(p["patch"])
        assert (doc["$patch"], doc["kind"]) == ("delete", "DeviceClass")
        deleted.add(doc["metadata"]["name"])
    gpu_classes = {
        o["metadata"]["name"]
        for o in _objects()
        if o["kind"] == "DeviceClass" and '.type == "gpu"' in o["spec"]["selectors"][0]["cel"]["expression"]
    }
    mapped = {
        o["metadata"]["name"]
        for o in _objects()
        if o["kind"] == "DeviceClass" and o["spec"].get("extendedResourceName")
    }
    assert deleted == gpu_classes
    assert mapped <= deleted


def test_read_pods_component_adds_only_get_on_pods() -> None:
    """The opt-in read-pods component (PodGroup claims' pinning) appends one rule: get pods."""
    component = ROOT / "deploy" / "kustomize" / "components" / "read-pods" / "kustomization.yaml"
    patches = yaml.safe_load(component.read_text())["patches"]
    assert [p["target"] for p in patches] == [{"kind": "ClusterRole", "name": "numadra-kubeletplugin"}]
    ops = yaml.safe_load(patches[0]["patch"])
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    assert ops == [{"op": "add", "path": "/rules/-", "value": rule}]
    assert not [r for r in _one("ClusterRole")["rules"] if "pods" in r["resources"]]
    overlay = ROOT / "deploy" / "kustomize" / "overlays" / "read-pods" / "kustomization.yaml"
    assert yaml.safe_load(overlay.read_text())["components"] == ["../../components/read-pods"]
