"""The parts a :class:`~driver.claims.driver.ClaimsDriver` is built from, and their null objects.

The builder (``driver.app``) makes every part and hands it in; the claims driver constructs none
of them. A part a deployment can go without (CPU pinning, the claims' ``status.devices``, the
NVIDIA user space, warnings to the user) has a null object here that does nothing, so the driver
calls each part the same way on every node and has no ``if part is not None`` of its own: what is
optional is decided once, where the parts are chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from cdi import Spec
from driver.claims.hostedits import DeviceExtras
from driver.claims.selection import AllocatedDevice
from driver.inventory.model import Gpu, Inventory
from driver.inventory.nvidia_source import UserspaceSource
from driver.kube.types import JsonObject
from driver.pinning.types import ClaimPinning, CpuRequest
from driver.plugin import DeviceHealth, PreparedDevice
from driver.state.evidence import Evidence
from driver.state.journal import Journal, journal_path
from driver.untrusted.hostpaths import CheckedDirs

__all__ = [
    "NO_HOST_EDITS",
    "NO_PINNING",
    "NO_STATUS",
    "NO_WARNINGS",
    "DeviceHostEdits",
    "NoClaimStatus",
    "PinPlanner",
    "StatusWriter",
    "UserspaceWarner",
    "claims_journal",
]


@runtime_checkable
class PinPlanner(Protocol):
    """Chooses the CPUs of a claim (``driver.pinning.planner.CpuPlanner``).

    Raises PinningError (e.g. CpuExhaustedError) or ClaimError (e.g. an empty shared pool) when it
    cannot; either becomes that claim's error. None: the claim is prepared without pinning.
    """

    def plan(
        self,
        claim_uid: str,
        requests: Sequence[CpuRequest],
        taken: frozenset[int],
        /,
        *,
        memory_nodes: frozenset[int] = ...,
    ) -> ClaimPinning | None:
        """Pin every request; never hand out a CPU in ``taken_cpus``; ``memory_nodes``: the
        nodes of the claim's memory devices, which its assignments may allocate on."""
        ...


@runtime_checkable
class StatusWriter(Protocol):
    """Reports prepared devices in the claim's ``status.devices`` (best effort)."""

    def report_prepared(self, claim: JsonObject, devices: Sequence[PreparedDevice]) -> None:
        """Publish the prepared devices of a claim."""
        ...

    def clear(self, namespace: str, name: str, uid: str = "") -> None:
        """Remove what :meth:`report_prepared` published (``uid`` names the claim in logs)."""
        ...


class DeviceHostEdits(Protocol):
    """What the host adds to a claim's GPUs and NICs (``driver.claims.hostedits.HostEdits``)."""

    def for_devices(
        self, devices: Sequence[AllocatedDevice], *, dirs: CheckedDirs | None = None
    ) -> DeviceExtras | None:
        """The device nodes, mounts and warnings for ``devices``; None: nothing to add. ``dirs``:
        the host directories checked for the call's earlier claims (one per prepare call)."""
        ...

    def read_ahead(self, gpus: Sequence[Gpu]) -> None:
        """Parse what changed in the host's files before a prepare takes its locks (best effort)."""
        ...

    def recheck(self, spec: Spec, *, own_dir: str) -> tuple[Spec, tuple[str, ...]]:
        """``spec`` read back from the journal with its host paths checked again, and the paths
        left out (a re-created spec after a reboot: the host may have changed meanwhile)."""
        ...


class UserspaceWarner(Protocol):
    """Tells the user about a claim's NVIDIA user space (``driver.claims.hostedits.UserspaceWarnings``)."""

    def warn(self, claim: JsonObject, source: UserspaceSource, warnings: Sequence[str]) -> None:
        """Report ``warnings`` about ``claim`` (an Event, a metric)."""
        ...


class _NoPinning:
    """No pinning backend (``--pinning off``, or a caller that pins nothing): CPU requests are
    prepared as devices, and no CPUs are chosen for them."""

    def plan(
        self,
        claim_uid: str,
        requests: Sequence[CpuRequest],
        taken: frozenset[int],
        /,
        *,
        memory_nodes: frozenset[int] = frozenset(),
    ) -> None:
        return None


class NoClaimStatus:
    """``--no-claim-status``: the claims' ``status.devices`` are left alone (nothing to do)."""

    def report_prepared(self, claim: JsonObject, devices: Sequence[PreparedDevice]) -> None: ...
    def clear(self, namespace: str, name: str, uid: str = "") -> None: ...
    def set_health(self, snapshot: Sequence[DeviceHealth]) -> None: ...
    def set_inventory(self, inventory: Inventory) -> None: ...
    def close(self) -> None: ...


class _NoHostEdits:
    """Nothing from the host for a claim's GPUs and NICs, not even their device nodes: those are
    host paths the runtime resolves, so they come from the host's edits, checked
    (``driver.claims.hostedits.HostEdits``, which ``numadra run`` always wires)."""

    def for_devices(self, devices: Sequence[AllocatedDevice], *, dirs: CheckedDirs | None = None) -> None:
        return None

    def read_ahead(self, gpus: Sequence[Gpu]) -> None:
        return None

    def recheck(self, spec: Spec, *, own_dir: str) -> tuple[Spec, tuple[str, ...]]:
        return spec, ()  # nothing was added from the host, so nothing to check again


class _NoWarnings:
    """Nobody to tell beyond the claims driver's own log line."""

    def warn(self, claim: JsonObject, source: UserspaceSource, warnings: Sequence[str]) -> None: ...


NO_PINNING: PinPlanner = _NoPinning()
NO_STATUS: StatusWriter = NoClaimStatus()
NO_HOST_EDITS: DeviceHostEdits = _NoHostEdits()
NO_WARNINGS: UserspaceWarner = _NoWarnings()


def claims_journal(*, cdi_dir: Path, plugin_dir: Path, driver_name: str, pool: str) -> Journal:
    """The journal of a plugin dir, cross-checked against the files prepare writes there and in
    the CDI dir (the evidence that a claim was prepared even when the journal lost it)."""
    evidence = Evidence(cdi_dir=cdi_dir, plugin_dir=plugin_dir, driver_name=driver_name, pool=pool)
    return Journal(journal_path(plugin_dir), evidence=evidence)
