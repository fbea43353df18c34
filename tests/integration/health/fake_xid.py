"""``FakeXidSource``: stands in for NVML's critical Xid events, which need an NVIDIA GPU and driver.

The boundary faked is :class:`driver.health.xid.XidSource` (one ``drain`` call); the NVML
implementation behind it is tested against ``FakeNvml`` in tests/unit/health/test_xid.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["FakeXidSource"]


class FakeXidSource:
    """Critical Xids queued by the test, handed out once by the next ``drain``."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}
        self.watched: set[str] = set()
        self.fail = False

    def emit(self, bus_id: str, code: int) -> None:
        """As if the driver reported Xid ``code`` on that GPU."""
        self.pending[bus_id] = code

    def drain(self, bus_ids: Sequence[str]) -> Mapping[str, int]:
        self.watched.update(bus_ids)
        if self.fail:
            raise RuntimeError("NVMLError_Unknown")
        out, self.pending = self.pending, {}
        return out
