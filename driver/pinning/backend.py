"""The one interface every enforcement backend implements, and the ``--pinning`` choice.

A backend turns a decided :class:`CpuAssignment` into a kernel effect for one container. What
identifies the container differs per mechanism, so :class:`PinTarget` carries every handle a
backend may use (a cgroup path, a PID, a runtime container ID) and each backend says which it
needs. ``off`` exists so that clusters whose kubelet already manages cpusets can keep only the
bookkeeping (env markers) without any enforcement.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: the config imports this module on the registration path
    from driver.pinning.types import CpuAssignment

__all__ = ["NoopBackend", "PinTarget", "PinningBackend", "PinningKind"]


class PinningKind(StrEnum):
    """Values of ``--pinning``."""

    NRI = "nri"
    HOOK = "hook"
    CGROUPFS = "cgroupfs"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class PinTarget:
    """Handles of one container; a backend uses the one it understands.

    ``cgroup`` is relative to the cpuset hierarchy root ("/kubepods/pod<uid>/<id>"); ``pid`` is any
    process of the container (its cgroup is read from /proc); ``container_id`` is the runtime's id.
    """

    cgroup: str | None = None
    pid: int | None = None
    container_id: str | None = None


@runtime_checkable
class PinningBackend(Protocol):
    """Applies and releases a CPU/memory assignment for one container."""

    @property
    def kind(self) -> PinningKind:
        """Which ``--pinning`` value this backend implements."""
        ...

    def apply(self, target: PinTarget, assignment: CpuAssignment) -> None:
        """Confine the container to ``assignment.cpus`` / ``assignment.mems``."""
        ...

    def release(self, target: PinTarget) -> None:
        """Undo :meth:`apply` (widen to the parent's set or forget the container)."""
        ...


class NoopBackend:
    """``--pinning off``: decisions are still made and published as env markers, nothing enforced."""

    @property
    def kind(self) -> PinningKind:
        """Always :attr:`PinningKind.OFF`."""
        return PinningKind.OFF

    def apply(self, target: PinTarget, assignment: CpuAssignment) -> None:
        """Do nothing."""

    def release(self, target: PinTarget) -> None:
        """Do nothing."""
