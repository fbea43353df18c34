"""The VM tier's session fixture: build (or find cached) the guest image, boot it once, hand the
guest's findings to every test.

Skips, naming the reason, when the tier cannot run here: not root (debootstrap), no
``qemu-system-x86_64``, no debootstrap/mkfs.ext4 or no Debian mirror for a cold build, an
interpreter other than the guest's Python 3.11. Without a usable ``/dev/kvm`` the VM boots under
TCG (software emulation) with a longer timeout; ``NUMADRA_VM_TCG=0`` skips instead.
``NUMADRA_VM_KEEP=1`` keeps the output directory (console log, guest log, result.json).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SECTIONS
from tests.vm.machine import TOPOLOGY, Boot, boot, find_qemu, kvm_usable

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "tests" / "vm" / "build-image.sh"
CACHE = Path(os.environ.get("NUMADRA_VM_CACHE", Path.home() / ".cache" / "numadra-vm"))
BUILD_TIMEOUT = 1500
BOOT_TIMEOUT_KVM = 240
BOOT_TIMEOUT_TCG = 900

#: filled by the fixture, printed by pytest_terminal_summary
_REPORT: dict[str, str] = {}


@dataclass(frozen=True)
class VmRun:
    """The guest's result.json and how the run went."""

    result: dict[str, Any]
    boot: Boot
    build_seconds: float


def _skip_unless_runnable() -> str:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the VM tier needs root on Linux (debootstrap builds the guest image)")
    qemu = find_qemu()
    if qemu is None:
        pytest.skip("qemu-system-x86_64 not found (apt-get install -y qemu-system-x86)")
    if sys.version_info[:2] != (3, 11):
        pytest.skip(
            "the guest runs Debian bookworm's Python 3.11 on this interpreter's site-packages; "
            f"this is {sys.version_info[:2]}"
        )
    return qemu


def _build() -> float:
    started = time.monotonic()
    check = os.environ.get("NUMADRA_SKIP_VM_IMAGE") == "1"
    argv = ["bash", str(BUILD), *(["--check"] if check else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False)
    if check and done.returncode != 0:
        pytest.skip(
            f"NUMADRA_SKIP_VM_IMAGE=1 and no up-to-date guest image in {CACHE} ({BUILD.relative_to(REPO)})"
        )
    if done.returncode in (3, 4):
        pytest.skip(
            f"guest image not built ({BUILD.relative_to(REPO)} rc {done.returncode}): "
            f"{done.stderr.strip()[-400:]}"
        )
    if done.returncode != 0:
        pytest.fail(f"{BUILD.relative_to(REPO)} failed (rc {done.returncode}):\n{done.stderr[-4000:]}")
    return time.monotonic() - started


@pytest.fixture(scope="session")
def vm() -> Iterator[VmRun]:
    """One boot of the VM of :data:`tests.vm.machine.TOPOLOGY`; the guest ran tests/vm/guest.py."""
    qemu = _skip_unless_runnable()
    no_kvm = kvm_usable()
    if no_kvm is not None and os.environ.get("NUMADRA_VM_TCG", "1") == "0":
        pytest.skip(f"no KVM ({no_kvm}) and NUMADRA_VM_TCG=0")
    build_seconds = _build()
    out = Path(tempfile.mkdtemp(prefix="numadra-vm-"))
    out.chmod(0o755)
    site = Path(sysconfig.get_paths()["purelib"])
    run = boot(
        qemu,
        TOPOLOGY,
        CACHE,
        REPO,
        site,
        out,
        kvm=no_kvm is None,
        timeout=BOOT_TIMEOUT_KVM if no_kvm is None else BOOT_TIMEOUT_TCG,
    )
    _REPORT.update(
        accel=run.accel + ("" if no_kvm is None else f" ({no_kvm})"),
        image=f"{CACHE} (build step {build_seconds:.1f} s)",
        boot=f"{run.seconds:.1f} s, QEMU rc {run.returncode}",
        guest=" ".join(f"{k} {v:.1f} s" for k, v in (run.result or {}).get("seconds", {}).items()),
        kernel=str((run.result or {}).get("sysfs", {}).get("kernel", "?")),
        output=str(out),
    )
    try:
        if run.result is None:
            pytest.fail(
                f"the guest wrote no result.json ({run.accel}, {run.seconds:.0f} s, "
                f"QEMU rc {run.returncode}); "
                f"guest log:\n{run.guest_log[-3000:]}\nconsole:\n{run.console[-5000:]}"
            )
        yield VmRun(run.result, run, build_seconds)
    finally:
        if os.environ.get("NUMADRA_VM_KEEP") != "1":
            shutil.rmtree(out, ignore_errors=True)


def _section() -> list[str]:
    """Accelerator, kernel, build and boot times (the run's summary)."""
    return [f"{key:<8} {value}" for key, value in _REPORT.items()]


SECTIONS["numadra VM tier"] = _section
