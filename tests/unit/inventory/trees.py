"""Generated host trees and their inventories, built once per test process and shared by test modules."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

from driver.inventory.discovery import discover
from driver.inventory.model import Inventory
from harness.hosttree import TOPOLOGIES, write_host_tree

__all__ = ["host_tree", "inventory"]


_SHM = Path("/dev/shm")


@functools.cache
def _base() -> Path:
    """A private temp dir, on tmpfs when there is one (the trees hold thousands of small files)."""
    shm = _SHM if _SHM.is_dir() and os.access(_SHM, os.W_OK) else None
    base = Path(tempfile.mkdtemp(prefix="numadra-trees-", dir=shm))
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    return base


@functools.cache
def host_tree(name: str) -> Path:
    """The generated tree of topology ``name`` (dgx, workstation, cloud_vm, huge, hostile)."""
    return write_host_tree(_base() / name, TOPOLOGIES[name])


@functools.cache
def inventory(name: str) -> Inventory:
    """Discovery's result on that tree."""
    return discover(host_tree(name), use_nvml=False)
