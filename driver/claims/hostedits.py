"""What a claim's CDI devices take from the host at prepare: the NVIDIA user space and node groups.

A claim's spec (:mod:`driver.claims.render`) is built from the claim and the inventory; two things
it needs are read from the host when the claim is prepared, here:

* **the NVIDIA user space** of the claim's NVIDIA GPUs (the driver's libraries, tools and firmware
  that CUDA images do not ship). The source follows one rule
  (:func:`driver.inventory.nvidia_source.choose_source`): the NVIDIA Container Toolkit's spec
  when it can serve every GPU (the claim then also returns the toolkit's device, by UUID, and
  the runtime applies the toolkit's edits), else the driver root's files mounted by numadra's
  own spec, else nothing, with a warning;
* **the supplementary group** that opens each device node for a non-root process
  (:func:`driver.inventory.nodeaccess.access_gid`), carried as ``additionalGids``;
* **the device nodes** themselves, as host paths the runtime will resolve: each one goes through
  :func:`~driver.untrusted.hostpaths.check_host_path_for_container` at prepare, and a node reached
  through a link or directory that someone other than root could change is left out, logged and
  named in the claim's warnings.

The driver root's files are looked up again only when the loaded module's version or one of the
library directories changed; the toolkit's spec files are re-read only when they changed
(:class:`~driver.inventory.nvidia_toolkit.ToolkitSpecFinder`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from cdi import CheckedHostPath, ContainerEdits, Device, Mount, Spec, transient_spec_file_name
from driver.claims.selection import AllocatedDevice
from driver.errors import UntrustedHostPathError
from driver.inventory.hostfiles import host_join
from driver.inventory.model import Gpu, Nic
from driver.inventory.nodeaccess import access_gid
from driver.inventory.nodewatch import WatchedNodes
from driver.inventory.nvidia_source import SourceChoice, UserspaceSource, choose_source
from driver.inventory.nvidia_toolkit import ToolkitSpecFinder, ToolkitSpecs
from driver.inventory.nvidia_userspace import DriverUserspace, discover_driver_userspace, driver_version
from driver.kube.types import JsonObject
from driver.log import get_logger
from driver.untrusted.hostpaths import CheckedDirs, check_host_path_for_container

__all__ = ["STATIC_CDI_DIR", "DeviceExtras", "HostEdits", "UserspaceWarnings"]

# ruff: noqa: PTH116 - os.stat on plain strings, as the inventory's readers do

_DriverKey = tuple[str | None, tuple[int, ...]]  # (module version, library dir mtimes)

#: the CDI dir for specs that survive a reboot (the toolkit's ``nvidia-ctk cdi generate`` default)
STATIC_CDI_DIR = "/etc/cdi"
_log = get_logger("claims.hostedits")


@dataclass(frozen=True, slots=True)
class DeviceExtras:
    """What the host adds to a claim's CDI devices, by inventory device name."""

    #: more CDI device IDs to return for a device (the toolkit's, placed before numadra's own)
    cdi_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: mounts into the container with a device (the driver root's files)
    mounts: Mapping[str, tuple[Mount, ...]] = field(default_factory=dict)
    #: supplementary groups that open a device's nodes
    gids: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: a device's nodes: (path in the container, checked host path); a refused node is not here
    nodes: Mapping[str, tuple[tuple[str, CheckedHostPath], ...]] = field(default_factory=dict)
    #: the NVIDIA user-space source, None when the claim has no NVIDIA GPU
    source: UserspaceSource | None = None
    #: what the user should be told (once per claim)
    warnings: tuple[str, ...] = ()


@runtime_checkable
class UserspaceWarnings(Protocol):
    """Tells the user that a claim's NVIDIA GPUs got a fallback or no user space (best effort).

    Called once per claim, after it was prepared, off the claims driver's lock; the claims
    driver has already logged the warnings with the claim's UID.
    """

    def warn(self, claim: JsonObject, source: UserspaceSource, warnings: Sequence[str]) -> None:
        """Report ``warnings`` about ``claim`` (an Event, a metric)."""
        ...


class HostEdits:
    """Reads the host facts of :class:`DeviceExtras` (see the module docstring); thread-safe.

    ``cdi_dir`` is numadra's CDI dir as numadra sees it (the runtime reads it too); the static dir
    ``/etc/cdi`` is read below ``host_root``. Spec files numadra writes for claims are skipped.
    ``device_groups`` False (``--device-groups=false``) leaves the groups out.
    """

    def __init__(
        self, *, host_root: str, driver_root: str, cdi_dir: str, claim_kind: str, device_groups: bool = True
    ) -> None:
        self.host_root = host_root
        self.driver_root = driver_root
        #: False: no ``additionalGids`` (a runtime whose CDI library predates cdiVersion 0.7.0)
        self.device_groups = device_groups
        dirs: list[str] = []
        for directory in (host_join(host_root, STATIC_CDI_DIR), cdi_dir):  # lowest priority first
            if os.path.realpath(directory) not in {os.path.realpath(d) for d in dirs}:
                dirs.append(directory)
        own = transient_spec_file_name(claim_kind, "x").removesuffix("x.json")
        self._toolkit = ToolkitSpecFinder(host_root, dirs, skip_prefix=own)
        self._lock = threading.Lock()
        self._nodes = WatchedNodes(host_root)
        #: the last usable driver root and what it was found under: (version, dir mtimes)
        self._driver: tuple[_DriverKey, DriverUserspace, tuple[Mount, ...]] | None = None

    def toolkit(self) -> ToolkitSpecs:
        """The toolkit's specs as they are now."""
        return self._toolkit.find()

    def read_ahead(self, gpus: Sequence[Gpu]) -> None:
        """Parse the toolkit's spec files that changed since the last look, when ``gpus`` (the
        node's) has an NVIDIA one: called before the locks of a prepare, whose own lookup then
        costs an ``lstat`` per file (the finder keeps each file's parse by its version)."""
        if any(g.vendor == "nvidia" for g in gpus):
            self._toolkit.find()

    def _mtimes(self, directories: Sequence[str]) -> tuple[int, ...]:
        root = host_join(self.host_root, self.driver_root)
        out = []
        for directory in directories:
            try:
                out.append(os.stat(host_join(root, directory)).st_mtime_ns)
            except OSError:
                out.append(-1)
        return tuple(out)

    def _driver_files(self) -> tuple[DriverUserspace, tuple[Mount, ...]]:
        version, _ = driver_version(self.host_root)
        with self._lock:
            cached = self._driver
        if cached is not None and cached[0] == (version, self._mtimes(cached[1].library_dirs)):
            return cached[1], cached[2]
        found = discover_driver_userspace(self.host_root, self.driver_root)
        mounts = tuple(Mount(m.host_path, m.container_path, m.options) for m in found.mounts)
        if found.usable:  # an unusable root is looked at again next time: it is cheap, and may get fixed
            with self._lock:
                self._driver = ((found.version, self._mtimes(found.library_dirs)), found, mounts)
        return found, mounts

    def driver(self) -> DriverUserspace:
        """The driver root's user space as it is now."""
        return self._driver_files()[0]

    def choose(self, gpus: Sequence[Gpu]) -> SourceChoice:
        """The user-space source for ``gpus`` (their NVIDIA ones) as the host is now."""
        return choose_source(gpus, self.toolkit(), self.driver())

    def recheck(self, spec: Spec, *, own_dir: str) -> tuple[Spec, tuple[str, ...]]:
        """``spec`` (a claim's, read back from the journal) with its host paths checked again.

        A spec is re-created at start after a reboot, and the host's ``/tmp`` is new by then: a
        path that passed at prepare (root's ``/tmp/nvidia-mps``) may be a user's link now. Each
        mount and device node goes through the check again, except numadra's own files (mounts
        whose container path is below ``own_dir``, the device metadata); one that fails is left
        out, and named in the second value.
        """
        dirs = CheckedDirs()
        refused: list[str] = []

        def checked(path: str) -> CheckedHostPath | None:
            try:
                return check_host_path_for_container(self.host_root, path, dirs=dirs)
            except UntrustedHostPathError as exc:
                refused.append(f"{path}: {exc.reason}")
                return None

        def edits(old: ContainerEdits) -> ContainerEdits:
            mounts = []
            for mount in old.mounts:
                if mount.container_path.startswith(own_dir):
                    mounts.append(mount)
                elif (host_path := checked(mount.host_path)) is not None:
                    mounts.append(replace(mount, host_path=host_path))
            nodes = []
            for node in old.device_nodes:
                if (host_path := checked(node.host_path or node.path)) is not None:
                    nodes.append(replace(node, host_path=host_path))
            return replace(old, mounts=tuple(mounts), device_nodes=tuple(nodes))

        devices = tuple(Device(d.name, edits(d.edits)) for d in spec.devices)
        return Spec(spec.kind, devices, edits(spec.edits)), tuple(refused)

    def for_devices(
        self, devices: Sequence[AllocatedDevice], *, dirs: CheckedDirs | None = None
    ) -> DeviceExtras:
        """The extras of one claim's allocated devices. ``dirs``: the directories already checked
        for the earlier claims of the same prepare call (one call's claims share them: a change
        between two claims of a call is the same race as one between two nodes of a claim); None
        checks them anew."""
        by_name: dict[str, Gpu | Nic] = {}
        for dev in devices:
            if isinstance(dev.device, (Gpu, Nic)):
                by_name.setdefault(dev.device_name, dev.device)
        nodes, gids, refused = self._device_nodes(by_name, CheckedDirs() if dirs is None else dirs)
        nvidia = [d for d in by_name.values() if isinstance(d, Gpu) and d.vendor == "nvidia"]
        if not nvidia:
            return DeviceExtras(gids=gids, nodes=nodes, warnings=refused)
        driver, mounts = self._driver_files()
        choice = choose_source(nvidia, self.toolkit(), driver)
        ids = {name: (cdi_id,) for name, cdi_id in choice.toolkit_ids.items()}
        files = {g.name: mounts for g in nvidia} if choice.source is UserspaceSource.DRIVER_ROOT else {}
        return DeviceExtras(ids, files, gids, nodes, choice.source, (*choice.warnings, *refused))

    def _device_nodes(
        self, by_name: Mapping[str, Gpu | Nic], dirs: CheckedDirs
    ) -> tuple[
        dict[str, tuple[tuple[str, CheckedHostPath], ...]], dict[str, tuple[int, ...]], tuple[str, ...]
    ]:
        """Each device's nodes that a container may be given, the groups that open its nodes
        (:func:`access_gid`; none without ``device_groups``), and why each refused node is refused.

        An accepted node's check and group are :class:`WatchedNodes`' (kept until the host changes);
        a refused node's group is read by :func:`access_gid`.
        """
        nodes: dict[str, tuple[tuple[str, CheckedHostPath], ...]] = {}
        gids: dict[str, tuple[int, ...]] = {}
        refused: list[str] = []
        for name, device in by_name.items():
            checked: list[tuple[str, CheckedHostPath]] = []
            found: set[int] = set()
            for path, got in zip(
                device.device_nodes, self._nodes.check(device.device_nodes, dirs), strict=True
            ):
                if isinstance(got, UntrustedHostPathError):
                    _log.warning(
                        "device node not given to containers", device=name, path=path, reason=got.reason
                    )
                    refused.append(f"device node {path} of {name} not given to containers: {got.reason}")
                    gid = access_gid(self.host_root, path) if self.device_groups else None
                else:
                    checked.append((path, got[0]))
                    gid = got[1] if self.device_groups else None
                if gid is not None:
                    found.add(gid)
            nodes[name] = tuple(checked)
            if found:
                gids[name] = tuple(sorted(found))
        return nodes, gids, tuple(refused)
