"""Socket names, including rolling-update names and the AF_UNIX length limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.errors import ConfigError
from driver.kubelet import paths
from driver.kubelet.registration import supported_versions
from harness.kubeletclient import pick_dra_service, pick_health_service

POD_UID = "9b2f6c1e-5a4d-4e3b-8c7a-1f0e2d3c4b5a"


def test_default_names() -> None:
    """Without a pod UID: <driver>-reg.sock and dra.sock, plus serialize.lock in the plugin dir."""
    p = paths.socket_paths(Path("/r"), Path("/p"), "gpu.numadra.dev", None)
    assert p.registration == Path("/r/gpu.numadra.dev-reg.sock")
    assert p.dra == Path("/p/dra.sock")
    assert p.lock == Path("/p/serialize.lock")


def test_rolling_update_names() -> None:
    """With a pod UID both sockets get unique names."""
    p = paths.socket_paths(Path("/r"), Path("/p"), "gpu.numadra.dev", POD_UID)
    assert p.registration == Path(f"/r/gpu.numadra.dev-{POD_UID}-reg.sock")
    assert p.dra == Path(f"/p/dra-{POD_UID}.sock")


def test_relative_dirs_become_absolute() -> None:
    """The kubelet needs an absolute endpoint."""
    p = paths.socket_paths(Path("reg"), Path("plug"), "d", None)
    assert p.registration.is_absolute() and p.dra.is_absolute()


@pytest.mark.parametrize(
    ("dir_len", "driver", "expected_prefix"),
    [
        pytest.param(40, "drv.example", "drv.example-9b2f", id="full-uid"),
        pytest.param(60, "drv.example", "drv.example-", id="hashed-uid"),
        pytest.param(50, "a" * 40 + ".example", "dra-", id="hashed-driver-and-uid"),
    ],
)
def test_long_registration_paths_fall_back_to_hashes(dir_len: int, driver: str, expected_prefix: str) -> None:
    """Each fallback name fits in 107 bytes and differs per pod UID."""
    registrar = Path("/" + "r" * (dir_len - 1))
    path = paths.registration_socket_path(registrar, driver, POD_UID)
    other = paths.registration_socket_path(registrar, driver, POD_UID[::-1])
    assert len(str(path).encode()) <= paths.MAX_SOCKET_PATH_BYTES
    assert path.name.startswith(expected_prefix) and path.name.endswith("-reg.sock")
    assert path != other


def test_too_long_paths_are_config_errors() -> None:
    """No candidate fits: a ConfigError naming the path, not a bind failure later."""
    with pytest.raises(ConfigError, match="longer than 107 bytes"):
        paths.registration_socket_path(Path("/" + "r" * 100), "drv.example", POD_UID)
    with pytest.raises(ConfigError, match="--plugin-dir"):
        paths.dra_socket_path(Path("/" + "p" * 80), POD_UID)


def test_advertised_versions_order_and_kubelet_choice() -> None:
    """v1 first for both APIs; the kubelet picks v1 DRA and v1 health; no health without a source."""
    full = supported_versions(with_health=True)
    assert full == ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
    assert pick_dra_service(full) == "v1.DRAPlugin"
    assert pick_health_service(full) == "v1.DRAResourceHealth"
    bare = supported_versions(with_health=False)
    assert bare == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    assert pick_health_service(bare) is None
