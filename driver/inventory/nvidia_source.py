"""Where the NVIDIA user space of a set of GPUs comes from: the toolkit's spec, the driver root, or nowhere.

One rule, used per claim (``driver.claims.userspace``) and for the whole node (``numadra discover
-o table``):

1. **toolkit spec**, when every GPU has a known UUID and the toolkit's spec has a device of that
   UUID that a runtime could apply (:meth:`ToolkitSpecs.check`). All GPUs or none: a container
   whose GPUs came half from the toolkit and half from the driver root would get two copies of
   the driver's files. A toolkit spec that cannot serve the GPUs is a warning with the reason.
2. **driver root**, when it has the driver's libraries; files it lacks (``libnvidia-ml``) are a
   warning naming them, and so are the files a container must not be given (a planted
   ``/tmp/nvidia-mps``: :attr:`DriverUserspace.refused`).
3. **none**: a CUDA container would start without a driver, which is a warning with both reasons.

Pure: the facts are read by the callers (:class:`~driver.inventory.nvidia_toolkit.ToolkitSpecFinder`,
:func:`~driver.inventory.nvidia_userspace.discover_driver_userspace`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from driver.inventory.model import Gpu
from driver.inventory.nvidia_toolkit import ToolkitSpecs
from driver.inventory.nvidia_userspace import DriverUserspace

__all__ = ["SourceChoice", "UserspaceSource", "choose_source"]


class UserspaceSource(enum.Enum):
    """Which source gives the NVIDIA GPUs their user space."""

    TOOLKIT = "toolkit spec"
    DRIVER_ROOT = "driver root"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class SourceChoice:
    """The decision for some GPUs, and what the user should be told about it."""

    source: UserspaceSource
    #: GPU device name -> the toolkit's CDI device ID (TOOLKIT only)
    toolkit_ids: Mapping[str, str] = field(default_factory=dict)
    driver: DriverUserspace | None = None  # DRIVER_ROOT only
    toolkit_files: tuple[str, ...] = ()  # TOOLKIT only: the spec files that define the devices
    #: warnings: why the toolkit spec was not used, what the driver root lacks, why there is none
    warnings: tuple[str, ...] = ()


def _toolkit_ids(gpus: Sequence[Gpu], toolkit: ToolkitSpecs) -> dict[str, str] | str:
    ids: dict[str, str] = {}
    for gpu in gpus:
        if not gpu.uuid:
            return (
                f"GPU {gpu.name} has no known UUID (neither NVML nor "
                f"/proc/driver/nvidia/gpus/{gpu.pci.bus_id}/information gives one)"
            )
        problem = toolkit.check(gpu.uuid)
        if problem:
            return problem
        ids[gpu.name] = toolkit.devices[gpu.uuid].cdi_id
    return ids


def choose_source(gpus: Sequence[Gpu], toolkit: ToolkitSpecs, driver: DriverUserspace) -> SourceChoice:
    """The source for ``gpus`` (their NVIDIA ones); see the module docstring for the rule."""
    nvidia = [g for g in gpus if g.vendor == "nvidia"]
    warnings: list[str] = []
    if toolkit.files:
        found = _toolkit_ids(nvidia, toolkit)
        if isinstance(found, dict):
            files = tuple(sorted({toolkit.devices[g.uuid].path for g in nvidia if g.uuid}))
            return SourceChoice(UserspaceSource.TOOLKIT, toolkit_ids=found, toolkit_files=files)
        warnings.append(f"toolkit spec not used: {found}")
    warnings += [f"toolkit spec not used: {p}" for p in toolkit.problems]
    if driver.usable:
        if driver.missing:
            lacks = ", ".join(driver.missing)
            warnings.append(f"driver root {driver.driver_root} lacks {lacks} (driver {driver.version})")
        warnings += [f"driver root file not mounted: {why}" for why in driver.refused]
        return SourceChoice(UserspaceSource.DRIVER_ROOT, driver=driver, warnings=tuple(warnings))
    if not toolkit.files and not toolkit.problems:
        warnings.append(f"no NVIDIA toolkit spec (kind nvidia.com/gpu) in {', '.join(toolkit.dirs)}")
    warnings.append(driver.problem)
    return SourceChoice(UserspaceSource.NONE, warnings=tuple(warnings))
