"""A claim's record: which entries a repeated prepare cannot answer from the journal alone."""

from __future__ import annotations

from dataclasses import replace

from driver.plugin import PreparedDevice
from driver.state.entry import JournalEntry, StoredFile

UID = "2f1c9b5e-8a7d-4c3b-9e1f-0a1b2c3d4e5f"
REBUILT = JournalEntry(
    namespace="ml",
    name="train",
    uid=UID,
    devices=(PreparedDevice(("gpu",), "node-1", "gpu-0000-3b-00-0", ()),),
    metadata_files=(StoredFile(f"/plugin/dra-device-metadata/{UID}_gpu.json", "{}"),),
    adopted=True,
)


def test_an_entry_rebuilt_from_metadata_alone_holds_devices_without_a_spec() -> None:
    assert REBUILT.holds_devices_without_spec()


def test_an_entry_with_its_spec_or_without_devices_does_not() -> None:
    spec = StoredFile(f"/var/run/cdi/numadra.dev_claim_{UID}.json", "{}")
    assert not replace(REBUILT, cdi_specs=(spec,)).holds_devices_without_spec()
    assert not replace(REBUILT, devices=()).holds_devices_without_spec()
