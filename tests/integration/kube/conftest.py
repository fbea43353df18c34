"""Fixtures: throwaway certificates (once per session), a fake TLS apiserver, the plain-HTTP fake."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.fake_tls_api import FakeTlsApiServer, Pki, make_pki
from harness.fakeapiserver import FakeApiServer


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make test certificates")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_api(pki: Pki) -> Iterator[FakeTlsApiServer]:
    server = FakeTlsApiServer(pki)
    yield server
    server.close()


@pytest.fixture
def mtls_api(pki: Pki) -> Iterator[FakeTlsApiServer]:
    """A fake that refuses the handshake without a client certificate signed by the CA."""
    server = FakeTlsApiServer(pki, require_client_cert=True)
    yield server
    server.close()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    server.start()
    yield server
    server.close()


@pytest.fixture
def kubeconfig_dir(tmp_path: Path) -> Path:
    return tmp_path
