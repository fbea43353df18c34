"""``--nvidia-driver-root`` (env ``NUMADRA_NVIDIA_DRIVER_ROOT``): where the NVIDIA driver's files are."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.cli import build_parser
from driver.cli.run import config_from_args
from driver.config import RunConfig
from driver.errors import ConfigError


def _config(tmp_path: Path, argv: list[str], env: dict[str, str] | None = None) -> RunConfig:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    args = build_parser().parse_args(["run", "--node-name", "n", *argv])
    return config_from_args(args, {"KUBECONFIG": str(kubeconfig), **(env or {})})


def test_default_is_the_host_root(tmp_path: Path) -> None:
    """A driver installed on the host itself: "/"."""
    assert _config(tmp_path, []).nvidia_driver_root == "/"


def test_flag_and_env(tmp_path: Path) -> None:
    """The GPU operator's driver container root, by flag or env; the flag wins."""
    env = {"NUMADRA_NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"}
    assert _config(tmp_path, [], env).nvidia_driver_root == "/run/nvidia/driver"
    assert _config(tmp_path, ["--nvidia-driver-root", "/opt/drv"], env).nvidia_driver_root == "/opt/drv"


def test_relative_root_is_a_usage_error_naming_flag_and_env(tmp_path: Path) -> None:
    """A host path must be absolute: the error names both spellings."""
    with pytest.raises(ConfigError, match=r"--nvidia-driver-root \(env NUMADRA_NVIDIA_DRIVER_ROOT\)"):
        _config(tmp_path, ["--nvidia-driver-root", "run/nvidia/driver"])


def test_device_groups_on_by_default_and_off_by_flag_or_env(tmp_path: Path) -> None:
    """--device-groups (env NUMADRA_DEVICE_GROUPS): additionalGids unless the runtime is too old."""
    assert _config(tmp_path, []).device_groups is True
    assert _config(tmp_path, ["--no-device-groups"]).device_groups is False
    assert _config(tmp_path, [], {"NUMADRA_DEVICE_GROUPS": "false"}).device_groups is False
