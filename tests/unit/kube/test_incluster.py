"""The in-cluster settings: read as client-go reads them, and a planted token never becomes a header."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from driver.errors import ConfigError
from driver.kube.incluster import REFRESH_S, InCluster

ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sa(tmp_path: Path) -> Path:
    (tmp_path / "token").write_text("eyJhbGciOi.first\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    return tmp_path


def _load(sa: Path, env: dict[str, str] = ENV, clock: Clock | None = None) -> InCluster:
    return InCluster(env, token_file=str(sa / "token"), ca_file=str(sa / "ca.crt"), clock=clock or Clock())


def test_settings_and_header_as_client_go_reads_them(sa: Path) -> None:
    got = _load(sa)
    assert (got.settings.scheme, got.settings.host, got.settings.port) == ("https", "10.96.0.1", 443)
    assert got.settings.ca_file == str(sa / "ca.crt")
    assert got.authorization() == "Bearer eyJhbGciOi.first"  # the trailing newline trimmed
    assert got.server == "https://10.96.0.1:443"


def test_an_ipv6_service_host_is_bracketed_in_the_url_only(sa: Path) -> None:
    got = _load(sa, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"})
    assert got.settings.host == "fd00::1"
    assert got.server == "https://[fd00::1]:6443"
    assert got.settings.host_header == "[fd00::1]:6443"


def test_a_rotated_token_is_sent_after_a_minute_and_a_bad_read_keeps_the_last(sa: Path) -> None:
    clock = Clock()
    got = _load(sa, clock=clock)
    (sa / "token").write_text("eyJhbGciOi.second")
    clock.now += REFRESH_S - 1
    assert got.authorization() == "Bearer eyJhbGciOi.first"  # read less than a minute ago
    clock.now += 1
    assert got.authorization() == "Bearer eyJhbGciOi.second"
    (sa / "token").unlink()  # the kubelet swaps the file: a moment without it
    clock.now += REFRESH_S
    assert got.authorization() == "Bearer eyJhbGciOi.second"
    (sa / "token").write_text("eyJhbGciOi.third")
    clock.now += REFRESH_S
    assert got.authorization() == "Bearer eyJhbGciOi.third"


@pytest.mark.fault
@pytest.mark.parametrize(
    "planted", ["tok\r\nX-Injected: 1", "tok en", "tok\x00", "t\u00e9", "x" * (64 * 1024 + 1)], ids=repr
)
def test_a_planted_token_never_becomes_a_header(sa: Path, planted: str) -> None:
    """A token file holding a header break (or not a token at all) fails the start, and a later
    rotation to such a file keeps the last good token instead of sending it."""
    clock = Clock()
    got = _load(sa, clock=clock)
    (sa / "token").write_bytes(planted.encode())
    clock.now += REFRESH_S
    assert got.authorization() == "Bearer eyJhbGciOi.first"
    with pytest.raises(ConfigError, match="is not a token"):
        _load(sa)


@pytest.mark.parametrize(
    ("env", "files", "message"),
    [
        ({}, {}, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"),
        ({**ENV, "KUBERNETES_SERVICE_PORT": ""}, {}, "must be set"),
        ({**ENV, "KUBERNETES_SERVICE_PORT": "https"}, {}, "is not a port number"),
        ({**ENV, "KUBERNETES_SERVICE_HOST": "evil/path"}, {}, "is not a host name or address"),
        (ENV, {"ca.crt": ""}, "CA file .* is empty"),
        (ENV, {"ca.crt": None}, "cannot read the service account CA file"),
        (ENV, {"token": ""}, "token .* is empty"),
        (ENV, {"token": None}, "cannot read the service account token"),
    ],
)
def test_what_is_missing_is_named(
    sa: Path, env: dict[str, str], files: dict[str, str | None], message: str
) -> None:
    for name, text in files.items():
        if text is None:
            (sa / name).unlink()
        else:
            (sa / name).write_text(text)
    with pytest.raises(ConfigError, match=message):
        _load(sa, env)


def test_loading_imports_nothing_of_the_official_client(sa: Path) -> None:
    """The point of the module: the pod's settings cost no ``import kubernetes``."""
    import subprocess

    code = (
        "import sys; from driver.kube.incluster import InCluster; "
        f"InCluster({ENV!r}, token_file={str(sa / 'token')!r}, ca_file={str(sa / 'ca.crt')!r}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3', 'pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
