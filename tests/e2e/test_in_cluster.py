"""The pod's own connection (in-cluster) and a proxied one, against the real kube-apiserver.

A DaemonSet pod reaches the apiserver through KUBERNETES_SERVICE_HOST/PORT, the service account's
CA and its token file; numadra reads them itself and never imports ``kubernetes`` (its import alone
is most of the driver's memory, bench/README.md). Here a fresh interpreter gets exactly that: the
driver's bound token in a file, the cluster's CA, the apiserver's address in the environment. It
reads its Node, lists and watches its slices over TLS, and reads a claim, and then reports which
modules it loaded. A second test sends the same calls through a real CONNECT proxy
(tests/support/connectproxy.py), TLS end to end through the tunnel.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from driver.errors import KubeError
from driver.kube.client import KubeClient, slice_field_selector
from harness.controlplane import write_kubeconfig
from tests.e2e.conftest import DRIVER, NODE, REPO, Cluster
from tests.support.connectproxy import ConnectProxy

_SCRIPT = """
import json, sys
from driver.errors import KubeError
from driver.kube.client import KubeClient, slice_field_selector
from driver.kube.incluster import InCluster

env, token_file, ca_file = json.loads(sys.argv[1])
client = KubeClient(in_cluster=InCluster(env, token_file=token_file, ca_file=ca_file))
out = {}
try:
    client.configure()
    out["node_uid"] = client.get_node(sys.argv[2])["metadata"]["uid"]
    mine = slice_field_selector(sys.argv[2], sys.argv[3])
    items, version = client.list_resource_slices(field_selector=mine)
    out["slices"] = sorted(item["metadata"]["name"] for item in items)
    watch = client.watch_resource_slices(field_selector=mine, resource_version=version, timeout_seconds=1)
    out["watch_events"] = [kind for kind, _ in watch]  # the server ends the watch after 1 s
    try:
        client.get_resource_claim("default", "no-such-claim")
    except KubeError as exc:
        out["missing_claim"] = exc.status
except KubeError as exc:
    out["error"] = [str(exc), exc.status]
client.close()
out["official_client_modules"] = sorted(
    m for m in sys.modules if m.split(".")[0] in ("kubernetes", "urllib3", "pydantic", "pydantic_core")
)
print(json.dumps(out))
"""


def _in_cluster(cluster: Cluster, tmp_path: Path, token: str) -> dict[str, object]:
    server = urlsplit(cluster.plane.server)
    env = {"KUBERNETES_SERVICE_HOST": str(server.hostname), "KUBERNETES_SERVICE_PORT": str(server.port)}
    token_file = tmp_path / "token"
    token_file.write_text(token)
    args = json.dumps([env, str(token_file), str(cluster.plane.ca_file)])
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, args, NODE, DRIVER],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_in_cluster_reads_watches_and_never_imports_the_official_client(
    cluster: Cluster, tmp_path: Path
) -> None:
    got = _in_cluster(cluster, tmp_path, cluster.driver_token)
    assert "error" not in got, got
    assert got["node_uid"] == cluster.admin.get(f"/api/v1/nodes/{NODE}")["metadata"]["uid"]
    assert got["slices"] == sorted(s["metadata"]["name"] for s in cluster.slices())
    assert got["slices"]  # the running driver published some: the LIST really saw them
    assert isinstance(got["watch_events"], list)  # ended by the server, no error
    assert got["missing_claim"] == 404  # authorized (a 403 would be a token not sent)
    assert got["official_client_modules"] == []


def test_in_cluster_with_a_wrong_token_is_unauthorized(cluster: Cluster, tmp_path: Path) -> None:
    got = _in_cluster(cluster, tmp_path, "not-a-token")
    assert got["error"][1] == 401, got  # type: ignore[index]
    assert "HTTP 401" in got["error"][0]  # type: ignore[index]


def test_every_call_tunnels_through_a_proxy_to_the_real_apiserver(cluster: Cluster, tmp_path: Path) -> None:
    """A kubeconfig proxy-url: the Node read, the slice LIST and watch, a claim read, all through
    CONNECT tunnels the proxy saw, with the server's certificate checked through them."""
    server = urlsplit(cluster.plane.server)
    proxy = ConnectProxy()
    path = write_kubeconfig(
        tmp_path / "kubeconfig", cluster.plane.server, cluster.plane.ca_file, cluster.driver_token, "driver"
    )
    config = json.loads(path.read_text())  # written as JSON
    config["clusters"][0]["cluster"]["proxy-url"] = proxy.url
    path.write_text(json.dumps(config))
    client = KubeClient(str(path))
    try:
        assert client.get_node(NODE)["metadata"]["name"] == NODE
        mine = slice_field_selector(NODE, DRIVER)
        items, version = client.list_resource_slices(field_selector=mine)
        assert items
        watch = client.watch_resource_slices(field_selector=mine, resource_version=version, timeout_seconds=1)
        assert isinstance([kind for kind, _ in watch], list)  # ended by the server after 1 s, no error
        with pytest.raises(KubeError) as missing:
            client.get_resource_claim("default", "no-such-claim")
        assert missing.value.status == 404  # authorized: the token went through the tunnel
    finally:
        client.close()
        proxy.close()
    target = f"{server.hostname}:{server.port}"
    assert proxy.tunnels and set(proxy.tunnels) == {target}
