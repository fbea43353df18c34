"""Which settings a KubeClient takes: the pod's own (no official client), or a kubeconfig's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from driver.errors import ConfigError, KubeError
from driver.kube.client import KubeClient
from driver.kube.incluster import InCluster

POD_ENV = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"}


def test_a_pod_imports_no_official_client_even_behind_a_proxy(tmp_path: Path) -> None:
    """Without a kubeconfig the service account's settings are used, a proxy in the environment
    included, and ``kubernetes`` (with urllib3 and pydantic) is never imported."""
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    env = {**POD_ENV, "KUBERNETES_SERVICE_HOST": "10.96.0.1", "HTTPS_PROXY": "http://proxy.example:3128"}
    files = f"token_file={str(tmp_path / 'token')!r}, ca_file={str(tmp_path / 'ca.crt')!r}"
    code = (
        "import sys; from driver.kube.client import KubeClient; "
        "from driver.kube.incluster import InCluster; "
        f"pod = InCluster({env!r}, {files}); "
        "KubeClient(in_cluster=pod); print(pod.settings.proxy); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3', 'pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["Proxy(host='proxy.example', port=3128, authorization='')", "[]"]


def test_outside_a_pod_configure_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(ConfigError, match="pass --kubeconfig outside a cluster"):
        KubeClient().configure()


def test_a_call_without_a_usable_configuration_is_a_kube_error_naming_it(tmp_path: Path) -> None:
    """A CA file that is no certificate fails the call (not the process) with the reason."""
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    source = InCluster(POD_ENV, token_file=str(tmp_path / "token"), ca_file=str(tmp_path / "ca.crt"))
    client = KubeClient(in_cluster=source)
    with pytest.raises(ConfigError, match=re.escape(f"CA file {tmp_path / 'ca.crt'}")):
        client.configure()
    with pytest.raises(KubeError, match=r"get nodes/n1: apiserver unreachable: ConfigError: .*CA file"):
        client.get_node("n1")
