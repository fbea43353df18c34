"""``numadra run`` as a real process: /healthz at once, /readyz only once registered and published.

The kubelet is played by driver.testing.kubeletclient (real gRPC over the registration socket), the
apiserver by the fake one; the host is the workstation fixture tree.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver import DEFAULT_DRIVER_NAME
from driver.kubelet.paths import registration_socket_path
from driver.testing.fakeapiserver import FakeApiServer
from driver.testing.hosttree import write_host_tree
from driver.testing.kubeletclient import KubeletClient
from driver.testing.poll import free_port
from driver.testing.topologies import TOPOLOGIES

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("driver.cli.run") is None,
    reason="numadra run is not wired yet (driver/cli/run.py)",
)

NODE = "ws-1"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _wait_for(url: str, status: int, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    last = (0, "")
    while time.monotonic() < deadline:
        last = _get(url)
        if last[0] == status:
            return last[1]
        time.sleep(0.1)
    raise AssertionError(f"{url}: wanted {status}, last answer {last}")


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.put_object(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid-1"}}
        )
        yield server


def test_run_serves_metrics_and_becomes_ready(api: FakeApiServer, tmp_path: Path) -> None:
    """/healthz at once; /readyz 200 only after kubelet registration and publishing; SIGTERM exits 0."""
    root = write_host_tree(tmp_path / "host", TOPOLOGIES["workstation"])
    registrar, plugin, cdi = (tmp_path / d for d in ("registry", "plugin", "cdi"))
    for d in (registrar, plugin, cdi):
        d.mkdir()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "POD_UID", "KUBECONFIG")}
    cmd = [
        sys.executable, "-m", "driver.cli", "run",
        "--node-name", NODE, "--host-root", str(root), "--kubeconfig", api.kubeconfig_path,
        "--registrar-dir", str(registrar), "--plugin-dir", str(plugin), "--cdi-dir", str(cdi),
        "--pinning", "off", "--metrics-address", f"127.0.0.1:{port}", "--log-format", "json",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(base + "/healthz", 200)
        socket_path = registration_socket_path(registrar, DEFAULT_DRIVER_NAME, None)
        deadline = time.monotonic() + 30
        while not socket_path.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no registration socket"
            time.sleep(0.1)
        status, body = _get(base + "/readyz")
        assert status == 503
        assert "registered" in body
        with KubeletClient() as kubelet:
            kubelet.register(socket_path)
            _wait_for(base + "/readyz", 200)
        assert api.objects("ResourceSlice"), "ready before any slice was published"
        metrics = _wait_for(base + "/metrics", 200)
        assert 'numadra_devices{health="Healthy",type="gpu"} 2.0' in metrics
        assert 'numadra_devices{health="Healthy",type="cpu"} 1.0' in metrics
        assert f'driver="{DEFAULT_DRIVER_NAME}",node="{NODE}"' in metrics
        assert "numadra_publish_operations_total" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
