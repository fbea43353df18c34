"""Public modules of discovery, slices and the host-tree generator declare a sorted, valid ``__all__``."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "driver.inventory.build",
    "driver.inventory.discovery",
    "driver.inventory.facts",
    "driver.inventory.hostfiles",
    "driver.inventory.nodeaccess",
    "driver.inventory.nvidia_source",
    "driver.inventory.nvidia_toolkit",
    "driver.inventory.nvidia_userspace",
    "driver.inventory.nvml",
    "driver.inventory.probe",
    "driver.inventory.watch",
    "driver.kube.quantity",
    "driver.presentation.picture",
    "driver.presentation.sizes",
    "driver.presentation.table",
    "driver.slices.builder",
    "driver.slices.validation",
    "harness.hostspec",
    "harness.hosttree",
    "harness.topologies",
    "harness.nvidia",
    "driver.cli.discover",
]


def _isort_key(name: str) -> tuple[int, str]:
    """RUF022 order: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


@pytest.mark.parametrize("module_name", MODULES)
def test_all_is_sorted_and_resolvable(module_name: str) -> None:
    """``__all__`` is sorted (constants, classes, functions) and every name exists."""
    module = importlib.import_module(module_name)
    names = list(module.__all__)
    assert names == sorted(names, key=_isort_key)
    assert all(hasattr(module, n) for n in names)
