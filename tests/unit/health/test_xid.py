"""NvmlXidSource against FakeNvml: registration, critical codes only, never blocking, NVML refusals."""

from __future__ import annotations

from driver.health.xid import CRITICAL_XIDS, NvmlXidSource
from tests.unit.health.fake_nvml import FakeNvml

GPU_A = "0000:3b:00.0"
GPU_B = "0000:af:00.0"


def test_critical_xids_only_per_gpu_first_code() -> None:
    """Xid 13 (an application's fault) and non-Xid events are ignored; the first critical code wins."""
    nvml = FakeNvml()
    source = NvmlXidSource(nvml)
    assert source.drain([GPU_A, GPU_B]) == {}
    assert set(nvml.registered) == {"00000000:3B:00.0", "00000000:AF:00.0"}
    nvml.emit("00000000:3B:00.0", 13)
    nvml.emit("00000000:3B:00.0", 1, event_type=FakeNvml.nvmlEventTypeSingleBitEccError)
    nvml.emit("00000000:AF:00.0", 79)
    nvml.emit("00000000:AF:00.0", 48)
    assert source.drain([GPU_A, GPU_B]) == {GPU_B: 79}
    assert source.drain([GPU_A, GPU_B]) == {}  # handed out once
    assert nvml.events == []


def test_every_critical_code_is_reported() -> None:
    """48, 79, 94, 95 are the fatal ones."""
    assert sorted(CRITICAL_XIDS) == [48, 79, 94, 95]
    for code in sorted(CRITICAL_XIDS):
        nvml = FakeNvml()
        source = NvmlXidSource(nvml)
        source.drain([GPU_A])
        nvml.emit("00000000:3B:00.0", code)
        assert source.drain([GPU_A]) == {GPU_A: code}


def test_gpu_without_event_support_is_asked_once() -> None:
    """NVML refusing registration for a GPU is no signal for it, and is not retried every poll."""
    nvml = FakeNvml(unsupported=frozenset({"00000000:3B:00.0"}))
    source = NvmlXidSource(nvml)
    assert source.drain([GPU_A, GPU_B]) == {}
    assert set(nvml.registered) == {"00000000:AF:00.0"}
    nvml.unsupported = frozenset()
    source.drain([GPU_A, GPU_B])
    assert set(nvml.registered) == {"00000000:AF:00.0"}
    assert nvml.sets == 1
