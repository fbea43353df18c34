"""Build the enforcement backend that ``--pinning`` names.

Kept apart from ``backend.py`` so the interface module imports no backend (no import cycles) and
so that ``run`` wiring is one call. The NRI plugin comes back unconnected: the caller runs
``serve_forever`` in a thread, since the runtime may start after the driver.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from driver.errors import ConfigError
from driver.pinning.backend import NoopBackend, PinningBackend, PinningKind
from driver.pinning.cgroupfs import CgroupfsBackend, CpusetHierarchy
from driver.pinning.consumers import ConsumerCheck
from driver.pinning.failures import PinFailureSink
from driver.pinning.hook import HookBackend
from driver.pinning.nri import DEFAULT_NRI_SOCKET, ClaimLookup, NriPlugin, SharedPool
from driver.pinning.nri.plugin import ENV_PLUGIN_SOCKET

__all__ = ["build_backend"]


def build_backend(
    kind: PinningKind | str,
    *,
    nri_socket: Path = DEFAULT_NRI_SOCKET,
    claim_lookup: ClaimLookup | None = None,
    node_shared_pool: SharedPool | None = None,
    hierarchy: CpusetHierarchy | None = None,
    plugin_name: str = "numadra",
    environ: Mapping[str, str] = os.environ,
    nri_pinner_lock: Path | None = None,
    consumers: ConsumerCheck | None = None,
    on_failure: PinFailureSink | None = None,
) -> PinningBackend:
    """The backend for ``kind``; an unknown value is a :class:`ConfigError` (exit code 2).

    ``nri_pinner_lock``: the lock file the processes of a rolling update share so that only one
    of them adjusts containers (see :mod:`driver.pinning.nri.plugin`). ``consumers`` and
    ``on_failure``: the NRI handlers' consumer reads and failure sink (``PinningHandlers``).

    When the runtime started numadra as an NRI plugin, ``NRI_PLUGIN_SOCKET`` names the inherited
    socket fd and the plugin uses it instead of dialing ``nri_socket``.
    """
    try:
        choice = PinningKind(kind)
    except ValueError as exc:
        valid = "|".join(k.value for k in PinningKind)
        raise ConfigError(f"--pinning must be one of {valid}, got {kind!r}") from exc
    if choice is PinningKind.NRI:
        raw_fd = environ.get(ENV_PLUGIN_SOCKET)
        try:
            fd = int(raw_fd) if raw_fd else None
            if fd is not None and not 0 <= fd < 1 << 31:  # socket(fileno=) would raise OverflowError
                raise ValueError(raw_fd)
        except ValueError as exc:
            raise ConfigError(
                f"{ENV_PLUGIN_SOCKET} must be a file descriptor number, got {raw_fd!r}"
            ) from exc
        return NriPlugin(
            claim_lookup=claim_lookup,
            node_shared_pool=node_shared_pool,
            socket_path=nri_socket,
            name=plugin_name,
            socket_fd=fd,
            leader_lock=nri_pinner_lock,
            consumers=consumers,
            on_failure=on_failure,
        )
    if choice is PinningKind.HOOK:
        return HookBackend(CgroupfsBackend(hierarchy))
    if choice is PinningKind.CGROUPFS:
        return CgroupfsBackend(hierarchy)
    return NoopBackend()
