"""Auxiliary CPUs of GPUs and NICs (``--aux-cpus``): how many exclusive CPUs each device brings.

A GPU or NIC needs host CPUs beside it: a feeding thread, an interrupt or polling loop. With
KEP-5517 (``DRANodeAllocatableResources``, alpha) a device can say so in its slice:
``nodeAllocatableResources: {cpu: {overhead: {perPod: N}}}`` makes the scheduler count N CPUs of
node allocatable for every pod that references a claim holding the device (the builder publishes
it, :mod:`driver.slices.builder`). numadra then hands those CPUs out: at prepare, a claim holding
such devices gets N per device from the same allocator as its own CPUs, exclusive against every
other claim, on the devices' NUMA node(s) (:func:`driver.claims.selection.cpu_requests`).

This module is only the count per device kind and its flag text (``gpu=2,nic=1``); it decides
nothing about where the CPUs come from.
"""

from __future__ import annotations

from dataclasses import dataclass

from driver.errors import ConfigError, UntrustedValueError
from driver.inventory.model import DeviceKind
from driver.untrusted.values import ascii_int

__all__ = ["AUX_KINDS", "MAX_AUX_CPUS", "NO_AUX_CPUS", "AuxCpus"]

#: the kinds that may carry auxiliary CPUs (a cpu or memory device is CPUs or memory itself)
AUX_KINDS = (DeviceKind.GPU, DeviceKind.NIC)
#: a bound far above any host's CPUs per device, so a typo cannot ask the scheduler for millions
MAX_AUX_CPUS = 1024


@dataclass(frozen=True, slots=True)
class AuxCpus:
    """Exclusive CPUs per allocated device, by kind; 0 for none (the default)."""

    gpu: int = 0
    nic: int = 0

    def of(self, kind: DeviceKind) -> int:
        """The CPUs one device of ``kind`` brings (0 for cpu and memory devices)."""
        if kind is DeviceKind.GPU:
            return self.gpu
        if kind is DeviceKind.NIC:
            return self.nic
        return 0

    def __bool__(self) -> bool:
        """True when any kind brings CPUs."""
        return self.gpu > 0 or self.nic > 0

    def __str__(self) -> str:
        """The flag text (``gpu=2,nic=1``; kinds with 0 left out; "" for none)."""
        return ",".join(f"{k.value}={self.of(k)}" for k in AUX_KINDS if self.of(k))

    @classmethod
    def parse(cls, text: str, where: str = "--aux-cpus") -> AuxCpus:
        """``gpu=N,nic=M`` (either may be left out; "" for none); ConfigError naming ``where``."""
        counts: dict[str, int] = {}
        kinds = {k.value for k in AUX_KINDS}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, value = item.partition("=")
            name = name.strip().lower()
            if not sep or name not in kinds:
                raise ConfigError(f"{where} {text!r}: {item!r} is not gpu=N or nic=N")
            if name in counts:
                raise ConfigError(f"{where} {text!r}: {name} is given twice")
            try:
                counts[name] = ascii_int(value.strip(), what=f"{where} {name}", lo=0, hi=MAX_AUX_CPUS)
            except UntrustedValueError as err:
                wanted = f"{name} must be a whole number 0..{MAX_AUX_CPUS}"
                raise ConfigError(f"{where} {text!r}: {wanted}") from err
        return cls(gpu=counts.get("gpu", 0), nic=counts.get("nic", 0))


#: no device brings CPUs (the default of every part that takes an :class:`AuxCpus`)
NO_AUX_CPUS = AuxCpus()
