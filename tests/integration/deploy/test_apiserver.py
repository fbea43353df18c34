"""deploy/ against a real kube-apiserver 1.37: objects validate, RBAC and the admission policy bite.

Starts etcd and kube-apiserver from the e2e binaries (tests/e2e/build-bins.sh builds them into
~/.cache/numadra-e2e/bin) and creates every object of the kustomize base. Then it acts as the
driver's ServiceAccount with a pod-bound token (which carries the pod's node name) and checks:
slices of its own node and driver are accepted, other nodes or drivers are refused by the
ValidatingAdmissionPolicy, and RBAC allows exactly what the hardening guide lists.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.poll import free_port, wait_for

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "deploy" / "kustomize" / "base"
BIN = Path(os.environ.get("NUMADRA_E2E_BIN", Path.home() / ".cache" / "numadra-e2e" / "bin"))
NAMESPACE, SA = "numadra-system", "numadra"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not all((BIN / b).is_file() for b in ("etcd", "kube-apiserver")) or shutil.which("openssl") is None,
        reason=f"etcd/kube-apiserver not in {BIN} (tests/e2e/build-bins.sh) or no openssl",
    ),
]

_COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "Node": "/api/v1/nodes",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "ResourceClaim": "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
    "ResourceClaimTemplate": "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
    "ResourceSlice": "/apis/resource.k8s.io/v1/resourceslices",
}


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"{}")
    except json.JSONDecodeError:
        return {"message": raw.decode(errors="replace")}  # /readyz answers plain text
    return body if isinstance(body, dict) else {"items": body}


@dataclass
class Api:
    url: str
    token: str

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the apiserver's self-signed serving cert
        req = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token or self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read())

    def create(
        self, obj: dict[str, Any], token: str | None = None, dry_run: bool = False
    ) -> tuple[int, dict[str, Any]]:
        ns = obj.get("metadata", {}).get("namespace", NAMESPACE)
        path = _COLLECTIONS[obj["kind"]].format(ns=ns) + ("?dryRun=All" if dry_run else "")
        return self.call("POST", path, obj, token)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("apiserver")
    subprocess.run(
        ["openssl", "genrsa", "-out", str(tmp / "sa.key"), "2048"], check=True, capture_output=True
    )
    subprocess.run(
        ["openssl", "rsa", "-in", str(tmp / "sa.key"), "-pubout", "-out", str(tmp / "sa.pub")],
        check=True,
        capture_output=True,
    )
    (tmp / "tokens.csv").write_text('admin-token,admin,admin-uid,"system:masters"\n')
    client, peer, secure = free_port(), free_port(), free_port()
    logs = (tmp / "etcd.log").open("w"), (tmp / "apiserver.log").open("w")
    etcd = subprocess.Popen(
        [str(BIN / "etcd"), "--data-dir", str(tmp / "etcd"), "--unsafe-no-fsync",
         "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
        stdout=logs[0], stderr=subprocess.STDOUT,
    )  # fmt: skip
    apiserver = subprocess.Popen(
        [str(BIN / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{client}", "--bind-address=127.0.0.1",
         f"--secure-port={secure}", "--advertise-address=127.0.0.1", f"--cert-dir={tmp / 'certs'}",
         "--service-account-issuer=https://kubernetes.default.svc",
         f"--service-account-key-file={tmp / 'sa.pub'}",
         f"--service-account-signing-key-file={tmp / 'sa.key'}", f"--token-auth-file={tmp / 'tokens.csv'}",
         "--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount", "--allow-privileged=true",
         "--endpoint-reconciler-type=none", "--service-cluster-ip-range=10.96.0.0/16"],
        stdout=logs[1], stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = Api(f"https://127.0.0.1:{secure}", "admin-token")
    try:

        def ready() -> bool:
            assert apiserver.poll() is None, (tmp / "apiserver.log").read_text()[-3000:]
            try:
                return server.call("GET", "/readyz")[0] == 200
            except OSError:
                return False

        wait_for(ready, 120, "kube-apiserver /readyz", interval=0.25)
        yield server
    finally:
        apiserver.kill()  # its graceful shutdown waits ~20 s for clients; nothing here needs it
        etcd.terminate()
        for proc in (apiserver, etcd):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()


def _base_objects() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        objects.extend(doc for doc in yaml.safe_load_all((BASE / name).read_text()) if doc)
    for obj in objects:
        if obj["kind"] == "DaemonSet":
            obj["spec"]["template"]["spec"]["containers"][0]["image"] = "localhost/numadra:0.1.0"
    return objects


@pytest.fixture(scope="module")
def installed(api: Api) -> Api:
    status, body = api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    assert status == 201, body
    for obj in _base_objects():
        status, body = api.create(obj)
        assert status == 201, f"{obj['kind']} {obj['metadata']['name']}: {body.get('message', body)}"
    for name in ("node-a", "node-b"):
        assert api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})[0] == 201
    return api


def _sa_token(api: Api, node: str | None) -> str:
    """A token of the driver's ServiceAccount; bound to a pod on ``node`` when given."""
    body: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    if node is not None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "plugin-", "namespace": NAMESPACE},
            "spec": {"nodeName": node, "serviceAccountName": SA, "containers": [{"name": "c", "image": "x"}]},
        }
        status, created = api.create(pod)
        assert status == 201, created
        meta = created["metadata"]
        body["spec"]["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "uid": meta["uid"],
        }
    status, resp = api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SA}/token", body)
    assert status == 201, resp
    return str(resp["status"]["token"])


def _slice(name: str, node: str, driver: str = "numadra.dev") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0000-3b-00-0", "attributes": {"type": {"string": "gpu"}}}],
        },
    }


def test_every_base_object_is_accepted(installed: Api) -> None:
    """The apiserver stores every object: class and policy CEL compiles, the DaemonSet is valid."""
    status, classes = installed.call("GET", "/apis/resource.k8s.io/v1/deviceclasses")
    assert status == 200
    names = sorted(c["metadata"]["name"] for c in classes["items"])
    assert names == [
        "amd-gpu.numadra.dev",
        "cpu.numadra.dev",
        "gpu.numadra.dev",
        "intel-i915-gpu.numadra.dev",
        "intel-xe-gpu.numadra.dev",
        "memory.numadra.dev",
        "nic.numadra.dev",
        "nvidia-gpu.numadra.dev",
    ]
    by_name = {c["metadata"]["name"]: c["spec"] for c in classes["items"]}
    assert "extendedResourceName" not in by_name["gpu.numadra.dev"]
    # not dropped: the field is served
    assert by_name["nvidia-gpu.numadra.dev"]["extendedResourceName"] == "nvidia.com/gpu"
    assert by_name["intel-xe-gpu.numadra.dev"]["extendedResourceName"] == "gpu.intel.com/xe"


def test_driver_may_write_its_own_nodes_slices(installed: Api) -> None:
    """With a pod-bound token on node-a, the driver creates and deletes node-a's slices."""
    token = _sa_token(installed, "node-a")
    status, body = installed.create(_slice("node-a-numadra-dev-0", "node-a"), token=token)
    assert status == 201, body
    path = "/apis/resource.k8s.io/v1/resourceslices/node-a-numadra-dev-0"
    assert installed.call("DELETE", path, token=token)[0] == 200


@pytest.mark.parametrize(
    ("slice_node", "driver", "message"),
    [
        pytest.param(
            "node-b", "numadra.dev", "may not modify resourceslices on node 'node-b'", id="other-node"
        ),
        pytest.param(
            "node-a",
            "gpu.example.com",
            "only modify resourceslices of driver 'numadra.dev'",
            id="other-driver",
        ),
    ],
)
def test_admission_policy_refuses_foreign_slices(
    installed: Api, slice_node: str, driver: str, message: str
) -> None:
    """The policy refuses a slice of another node or another driver, even though RBAC allows create."""
    token = _sa_token(installed, "node-a")
    obj = _slice(f"x-{slice_node}-{driver.replace('.', '-')}", slice_node, driver)

    def refused() -> dict[str, Any] | None:
        status, body = installed.create(obj, token=token, dry_run=True)
        assert status in (201, 403, 422), body
        return body if status != 201 else None  # the policy may take a moment to load

    body = wait_for(refused, 30, "the admission policy to take effect", interval=0.25)
    assert message in body["message"]


def test_token_without_node_is_refused(installed: Api) -> None:
    """A token not bound to a pod carries no node name: every slice write is refused."""
    token = _sa_token(installed, None)
    obj = _slice("node-a-numadra-dev-1", "node-a")

    def refused() -> dict[str, Any] | None:
        status, body = installed.create(obj, token=token, dry_run=True)
        assert status in (201, 403, 422), body
        # the policy may take a moment to load: in random order this test can run first
        return body if status != 201 else None

    body = wait_for(refused, 30, "the admission policy to take effect", interval=0.25)
    assert "no node association found for user" in body["message"]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        pytest.param("GET", "/api/v1/nodes/node-a", True, id="get-node"),
        pytest.param("GET", "/apis/resource.k8s.io/v1/resourceslices", True, id="list-slices"),
        pytest.param(
            "GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/none", True, id="get-claim"
        ),
        pytest.param("GET", "/api/v1/nodes", False, id="list-nodes"),
        pytest.param(
            "GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", False, id="list-claims"
        ),
        pytest.param("GET", "/api/v1/namespaces/default/pods", False, id="list-pods"),
        pytest.param("GET", "/api/v1/namespaces/default/secrets", False, id="list-secrets"),
        pytest.param("GET", "/apis/resource.k8s.io/v1/deviceclasses", False, id="list-classes"),
    ],
)
def test_rbac_allows_only_what_the_guide_lists(installed: Api, method: str, path: str, allowed: bool) -> None:
    """The ServiceAccount may get nodes and claims and read slices; other reads are 403."""
    token = _sa_token(installed, "node-a")
    status, body = installed.call(method, path, token=token)
    if allowed:
        assert status in (200, 404), body  # 404: allowed, the claim just does not exist
    else:
        assert status == 403, body


def test_the_pinning_failure_event_is_accepted_and_events_are_write_only(installed: Api) -> None:
    """The Warning Event numadra writes on a pod whose claim container it refused passes the
    apiserver's validation under the driver's RBAC (create events); reading events stays 403."""
    from driver.observability.pinreports import pin_failure_event
    from driver.pinning.failures import PinFailure

    token = _sa_token(installed, "node-a")
    failure = PinFailure(
        reason="not_reserved",
        action="refused",
        pod_namespace="default",
        pod_name="miner",
        pod_uid="0b6f3d52-0000-4c3a-9e8f-000000000001",
        container="c",
        claim_uid="7b8c9d0e-0d1b-4c3a-9e8f-0000000000d1",
        message="container c of pod default/miner carries the marker of claim ... not for this pod",
    )
    event = pin_failure_event(failure, node_name="node-a")
    status, body = installed.call("POST", "/api/v1/namespaces/default/events", event, token=token)
    assert status == 201, body
    assert (body["reason"], body["type"], body["involvedObject"]["name"]) == (
        "NumadraPinningRefused",
        "Warning",
        "miner",
    )
    assert installed.call("GET", "/api/v1/namespaces/default/events", token=token)[0] == 403


def test_cgroupfs_overlay_daemonset_is_valid(installed: Api) -> None:
    """The cgroupfs variant (kustomize overlay) passes the apiserver's DaemonSet validation, unprivileged."""
    kustomize = shutil.which("kustomize") or str(
        Path.home() / ".cache" / "numadra-tools" / "bin" / "kustomize"
    )
    if not Path(kustomize).is_file():
        pytest.skip("kustomize not built (scripts/build-deploy-tools.sh)")
    out = subprocess.run(
        [kustomize, "build", str(ROOT / "deploy" / "kustomize" / "overlays" / "cgroupfs")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (ds,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "DaemonSet"]
    ds["metadata"]["name"] = "numadra-cgroupfs"
    status, body = installed.create(ds, dry_run=True)
    assert status == 201, body.get("message", body)
    context = body["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert "privileged" not in context and context["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize(
    "example", sorted((ROOT / "deploy" / "examples").glob("*.yaml")), ids=lambda p: p.stem
)
def test_examples_are_valid_objects(installed: Api, example: Path) -> None:
    """Every example object passes server-side validation (dry run): claim CEL compiles, pods are valid."""
    objects = [d for d in yaml.safe_load_all(example.read_text()) if d]
    assert objects
    for obj in objects:
        status, body = installed.create(obj, dry_run=True)
        assert status == 201, f"{obj['kind']} {obj['metadata']['name']}: {body.get('message', body)}"
