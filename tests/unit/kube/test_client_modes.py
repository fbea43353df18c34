"""Which connection a KubeClient takes: the pod's own, or the official client's configuration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from driver.errors import ConfigError, KubeError
from driver.kube.client import KubeClient
from driver.kube.incluster import InCluster

POD_ENV = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"}


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_without_a_kubeconfig_and_a_proxy_the_pod_settings_are_used() -> None:
    assert KubeClient()._pod_mode()
    assert not KubeClient("/some/kubeconfig")._pod_mode()


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"])
def test_a_proxy_in_the_environment_hands_the_pod_to_the_official_client(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The lean pool connects directly; a proxy (and its NO_PROXY rules) is the official client's."""
    monkeypatch.setenv(variable, "http://proxy.example:3128")
    assert not KubeClient()._pod_mode()


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
