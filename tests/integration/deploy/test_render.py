"""kustomize and Helm render deploy/ to the same objects; Helm values switch what they should.

Needs kustomize and helm (scripts/build-deploy-tools.sh builds both from Go modules into
~/.cache/numadra-tools/bin); skipped with that reason when they are missing.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


def _load_render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_deploy", ROOT / "scripts" / "render_deploy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["render_deploy"] = module
    spec.loader.exec_module(module)
    return module


render = _load_render()
KUSTOMIZE = render.find_tool("kustomize", None)
HELM = render.find_tool("helm", None)
pytestmark = pytest.mark.skipif(
    KUSTOMIZE is None or HELM is None,
    reason="kustomize/helm not built (run scripts/build-deploy-tools.sh; CI does)",
)


def _helm(*args: str) -> list[dict[str, Any]]:
    return render.normalize(render.render_helm(HELM, args))  # type: ignore[no-any-return]


def _daemonset(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet"]
    return ds


@pytest.mark.parametrize("variant", sorted(render.VARIANTS))
def test_kustomize_and_helm_render_the_same_objects(variant: str) -> None:
    """Each kustomize variant equals the Helm rendering with the matching values (Helm labels aside)."""
    target, helm_args = render.VARIANTS[variant]
    left = render.normalize(render.render_kustomize(KUSTOMIZE, target))
    right = render.normalize(render.render_helm(HELM, helm_args))
    assert [(o["kind"], o["metadata"]["name"]) for o in left] == [
        (o["kind"], o["metadata"]["name"]) for o in right
    ]
    assert render.dump(left) == render.dump(right)


def test_render_script_exits_zero() -> None:
    """scripts/render_deploy.py, as CI runs it, reports identical renderings."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_deploy.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cluster_scoped_objects_have_no_namespace() -> None:
    """DeviceClasses, RBAC cluster objects and the admission policy carry no namespace (kustomize pitfall)."""
    cluster_kinds = {"DeviceClass", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicyBinding"}  # fmt: skip
    for target, _ in render.VARIANTS.values():
        for obj in render.normalize(render.render_kustomize(KUSTOMIZE, target)):
            if obj["kind"] in cluster_kinds:
                assert "namespace" not in obj["metadata"], obj["metadata"]["name"]


def test_hook_backend_mounts_the_hook_dir_unprivileged() -> None:
    """pinning.backend=hook: hook dir mounted read-write, no NRI socket, still unprivileged."""
    ds = _daemonset(_helm("--set", "pinning.backend=hook"))
    container = ds["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/host/opt/numadra" in mounts
    assert "/opt/numadra" not in mounts  # would hide the image's own virtualenv
    assert "/var/run/nri" not in mounts
    assert "--pinning=hook" in container["args"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_custom_driver_name_and_kubelet_dir_reach_every_object() -> None:
    """A different driver name and kubelet root flow into args, RBAC, the VAP and the classes."""
    objects = _helm("--set", "driverName=numa.example.com", "--set", "kubeletRootDir=/data/kubelet")
    args = _daemonset(objects)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--driver-name=numa.example.com" in args
    assert "--registrar-dir=/data/kubelet/plugins_registry" in args
    assert "--plugin-dir=/data/kubelet/plugins/numa.example.com" in args
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    assert ["numa.example.com"] in [r.get("resourceNames") for r in role["rules"]]
    classes = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "DeviceClass")
    assert classes == [
        "amd-gpu.numa.example.com",
        "cpu.numa.example.com",
        "gpu.numa.example.com",
        "intel-i915-gpu.numa.example.com",
        "intel-xe-gpu.numa.example.com",
        "memory.numa.example.com",
        "nic.numa.example.com",
        "nvidia-gpu.numa.example.com",
    ]
    (vap,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    assert 'variables.objectDriver == "numa.example.com"' in yaml.safe_dump(vap)


def test_extended_resource_name_can_be_turned_off_per_vendor() -> None:
    """deviceClasses.nvidiaGpu.extendedResourceName="" drops only NVIDIA's mapping (that node pool
    keeps the device plugin); the class stays for claims and the other vendors keep theirs."""
    objects = _helm("--set", "deviceClasses.nvidiaGpu.extendedResourceName=")
    spec = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "DeviceClass"}
    assert "extendedResourceName" not in spec["nvidia-gpu.numadra.dev"]
    assert spec["amd-gpu.numadra.dev"]["extendedResourceName"] == "amd.com/gpu"
    assert "extendedResourceName" not in spec["gpu.numadra.dev"]


def test_old_generic_extended_resource_value_fails_the_render() -> None:
    """The removed deviceClasses.gpu.extendedResourceName is an error, not silently ignored."""
    with pytest.raises(subprocess.CalledProcessError) as exc:
        _helm("--set", "deviceClasses.gpu.extendedResourceName=nvidia.com/gpu")
    assert "deviceClasses.nvidiaGpu" in exc.value.stderr


@pytest.mark.parametrize(
    ("devices", "classes"),
    [
        pytest.param("{cpu,memory}", {"cpu.numadra.dev", "memory.numadra.dev"}, id="cpu-memory"),
        pytest.param(
            "{gpu}",
            {
                "gpu.numadra.dev",
                "nvidia-gpu.numadra.dev",
                "amd-gpu.numadra.dev",
                "intel-i915-gpu.numadra.dev",
                "intel-xe-gpu.numadra.dev",
            },
            id="gpu",
        ),
    ],
)
def test_devices_value_installs_only_the_served_kinds_classes(devices: str, classes: set[str]) -> None:
    """devices= passes --devices and renders the classes of the served kinds only: without gpu no
    class maps nvidia.com/gpu (or any vendor's resource)."""
    objects = _helm("--set", f"devices={devices}")
    got = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "DeviceClass"}
    assert set(got) == classes
    if "gpu.numadra.dev" not in classes:
        assert not any("extendedResourceName" in spec for spec in got.values())
    args = _daemonset(objects)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--devices={devices.strip('{}')}" in args
    assert not any(
        a.startswith("--devices")
        for a in _daemonset(_helm())["spec"]["template"]["spec"]["containers"][0]["args"]
    )


@pytest.mark.parametrize("devices", ["{cpu,fpga}", "null"])
def test_unknown_or_no_device_kind_fails_the_render(devices: str) -> None:
    """A kind that is not gpu, nic, cpu or memory, or none at all, is a render error naming the kinds."""
    with pytest.raises(subprocess.CalledProcessError) as exc:
        _helm("--set", f"devices={devices}")
    assert "gpu, nic, cpu, memory" in exc.value.stderr


def test_unknown_pinning_backend_fails_the_render() -> None:
    """A typo in pinning.backend is a render error naming the allowed values."""
    with pytest.raises(subprocess.CalledProcessError) as exc:
        _helm("--set", "pinning.backend=nrii")
    assert "nri, hook, cgroupfs, off" in exc.value.stderr


def test_helm_lint_strict() -> None:
    """helm lint --strict passes (template errors, missing values, bad YAML)."""
    env = dict(
        os.environ, HELM_CACHE_HOME="/tmp/numadra-helm/cache", HELM_CONFIG_HOME="/tmp/numadra-helm/config"
    )
    proc = subprocess.run(
        [
            HELM,
            "lint",
            "--strict",
            "--kube-version",
            render.KUBE_VERSION,
            str(ROOT / "deploy" / "helm" / "numadra"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_backend_paths_reach_the_flags() -> None:
    """A moved NRI socket dir or hook dir is passed to numadra run (--nri-socket, --hook-path)."""
    nri = _daemonset(_helm("--set", "pinning.nriSocketDir=/run/containerd/nri"))
    assert (
        "--nri-socket=/run/containerd/nri/nri.sock"
        in nri["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    hook = _daemonset(_helm("--set", "pinning.backend=hook", "--set", "pinning.hookDir=/usr/local/numadra"))
    container = hook["spec"]["template"]["spec"]["containers"][0]
    assert "--hook-path=/usr/local/numadra/bin/numadra" in container["args"]
    assert "/host/usr/local/numadra" in {m["mountPath"] for m in container["volumeMounts"]}


def test_reserved_cpus_and_extra_args() -> None:
    """reservedCpus and extraArgs end up as numadra run flags, after the fixed ones."""
    ds = _daemonset(_helm("--set", "reservedCpus=0-1", "--set", "extraArgs={--taint-unhealthy=NoExecute}"))
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--reserved-cpus=0-1", "--taint-unhealthy=NoExecute"]


#: the hostPath mounts every backend has: host path -> (mount path, read-only)
_COMMON_MOUNTS = {
    "/var/lib/kubelet/plugins_registry": ("/var/lib/kubelet/plugins_registry", False),
    "/var/lib/kubelet/plugins/numadra.dev": ("/var/lib/kubelet/plugins/numadra.dev", False),
    "/var/run/cdi": ("/var/run/cdi", False),
    "/sys": ("/host/sys", True),
    "/dev": ("/host/dev", True),
    "/usr": ("/host/usr", True),
}
_BACKEND_MOUNTS = {
    "nri": {"/var/run/nri": ("/var/run/nri", False)},
    "hook": {"/opt/numadra": ("/host/opt/numadra", False)},
    "cgroupfs": {},
    "off": {},
}


@pytest.mark.parametrize("backend", sorted(_BACKEND_MOUNTS))
def test_each_backend_mounts_the_minimum_unprivileged(backend: str) -> None:
    """Per pinning backend: exactly the hostPath mounts it reads or writes (never the host's / nor all
    of /var/lib/kubelet/plugins), and the same unprivileged container: root without capabilities,
    no privilege escalation, read-only root filesystem, RuntimeDefault seccomp."""
    from tests.unit.deploy.test_manifests import host_mounts

    ds = _daemonset(_helm("--set", f"pinning.backend={backend}"))
    assert host_mounts(ds) == {**_COMMON_MOUNTS, **_BACKEND_MOUNTS[backend]}
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert not {"hostNetwork", "hostPID", "hostIPC"} & spec.keys()


def test_nvidia_driver_root_value_mounts_it_and_passes_the_flag() -> None:
    """nvidiaDriverRoot (the GPU operator's /run/nvidia/driver): read-only at /host<root>, and the flag."""
    from tests.unit.deploy.test_manifests import host_mounts

    ds = _daemonset(_helm("--set", "nvidiaDriverRoot=/run/nvidia/driver/"))
    assert host_mounts(ds)["/run/nvidia/driver"] == ("/host/run/nvidia/driver", True)
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--nvidia-driver-root=/run/nvidia/driver" in args
    default = _daemonset(_helm())
    assert not [a for a in default["spec"]["template"]["spec"]["containers"][0]["args"] if "nvidia" in a]


def test_network_policy_values() -> None:
    """metrics.networkPolicy: on by default for the monitoring namespace; another namespace, more
    peers, or off."""
    (policy,) = [o for o in _helm() if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    objects = _helm(
        "--set", "metrics.networkPolicy.namespace=observability",
        "--set", "metrics.networkPolicy.extraFrom[0].ipBlock.cidr=10.0.0.0/16",
    )  # fmt: skip
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}},
        {"ipBlock": {"cidr": "10.0.0.0/16"}},
    ]
    assert not [
        o for o in _helm("--set", "metrics.networkPolicy.enabled=false") if o["kind"] == "NetworkPolicy"
    ]


def test_monitoring_is_off_by_default_and_follows_the_release_namespace() -> None:
    """No monitoring objects without the switch; with it, in the release's namespace, dashboard verbatim."""
    kinds = {"PrometheusRule", "PodMonitor", "ConfigMap"}
    assert not [o for o in _helm() if o["kind"] in kinds]
    cmd = [HELM, "template", "obs", str(ROOT / "deploy/helm/numadra"), "--namespace", "observability",
           "--kube-version", render.KUBE_VERSION, "--set", "monitoring.enabled=true"]  # fmt: skip
    env = dict(
        os.environ, HELM_CACHE_HOME="/tmp/numadra-helm/cache", HELM_CONFIG_HOME="/tmp/numadra-helm/config"
    )
    text = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    objects = {o["kind"]: o for o in yaml.safe_load_all(text) if o and o["kind"] in kinds}
    assert set(objects) == kinds
    assert {o["metadata"]["namespace"] for o in objects.values()} == {"observability"}
    assert all(o["metadata"]["labels"]["app.kubernetes.io/instance"] == "obs" for o in objects.values())
    dashboard = (ROOT / "deploy" / "monitoring" / "numadra-dashboard.json").read_text()
    assert objects["ConfigMap"]["data"]["numadra-dashboard.json"] == dashboard
