"""Build the enforcement backend that ``--pinning`` names.

Kept apart from ``backend.py`` so the interface module imports no backend (no import cycles) and
so that ``run`` wiring is one call. The NRI plugin comes back unconnected: the caller runs
``serve_forever`` in a thread, since the runtime may start after the driver.
"""

from __future__ import annotations

from pathlib import Path

from driver.errors import ConfigError
from driver.pinning.backend import NoopBackend, PinningBackend, PinningKind
from driver.pinning.cgroupfs import CgroupfsBackend, CpusetHierarchy
from driver.pinning.hook import HookBackend
from driver.pinning.nri import DEFAULT_NRI_SOCKET, ClaimLookup, NriPlugin, SharedPool

__all__ = ["build_backend"]


def build_backend(
    kind: PinningKind | str,
    *,
    nri_socket: Path = DEFAULT_NRI_SOCKET,
    claim_lookup: ClaimLookup | None = None,
    node_shared_pool: SharedPool | None = None,
    hierarchy: CpusetHierarchy | None = None,
    plugin_name: str = "numadra",
) -> PinningBackend:
    """The backend for ``kind``; an unknown value is a :class:`ConfigError` (exit code 2)."""
    try:
        choice = PinningKind(kind)
    except ValueError as exc:
        valid = "|".join(k.value for k in PinningKind)
        raise ConfigError(f"--pinning must be one of {valid}, got {kind!r}") from exc
    if choice is PinningKind.NRI:
        return NriPlugin(
            claim_lookup=claim_lookup,
            node_shared_pool=node_shared_pool,
            socket_path=nri_socket,
            name=plugin_name,
        )
    if choice is PinningKind.HOOK:
        return HookBackend(CgroupfsBackend(hierarchy))
    if choice is PinningKind.CGROUPFS:
        return CgroupfsBackend(hierarchy)
    return NoopBackend()
