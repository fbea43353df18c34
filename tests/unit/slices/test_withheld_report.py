"""WithheldReport: each owner said once while it holds devices, again only after it let go."""

from __future__ import annotations

from structlog.testing import capture_logs

from driver.slices.ownership import Owner, Ownership, Reason
from driver.slices.withheld import WithheldReport

NV = Owner(Reason.DRA_DRIVER, "gpu.nvidia.com")
PLUGIN = Owner(Reason.DEVICE_PLUGIN, "amd.com/gpu")


def _said(logs: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(e["event"], e.get("owner")) for e in logs if e["event"].startswith("devices")]  # type: ignore[union-attr]


def test_once_per_cause_and_again_after_it_went() -> None:
    """More devices of a known owner say nothing; a new owner is said; a gone owner is given back
    once; the same owner coming back is said again."""
    report = WithheldReport(node_name="node-a", component="numadra.dev")
    with capture_logs() as logs:
        report.update(Ownership({"gpu-a": NV}))
        report.update(Ownership({"gpu-a": NV, "gpu-b": NV}))
        report.update(Ownership({"gpu-a": NV, "gpu-b": NV, "gpu-c": PLUGIN}))
        report.update(Ownership({"gpu-c": PLUGIN}))
        report.update(Ownership({"gpu-c": PLUGIN}))
        report.update(Ownership({"gpu-a": NV, "gpu-c": PLUGIN}))
    withheld = "devices withheld: another party owns them"
    assert _said(logs) == [
        (withheld, "gpu.nvidia.com"),
        (withheld, "amd.com/gpu"),
        ("devices given back", "gpu.nvidia.com"),
        (withheld, "gpu.nvidia.com"),
    ]
    assert report.metric_counts() == {
        ("dra-driver", "gpu.nvidia.com"): 1,
        ("device-plugin", "amd.com/gpu"): 1,
    }
