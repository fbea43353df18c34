"""A claim's record: which entries a repeated prepare cannot answer from the journal alone, and
the optional keys (the claim's PodGroups) that older records lack."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from driver.pinning.types import PodGroupRef
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


GROUPS = (PodGroupRef("train", "pg-1"), PodGroupRef("eval", "pg-2"))


def test_the_pod_groups_go_round_the_record() -> None:
    """The PodGroups are written beside the reserved pods and read back equal, in order."""
    entry = replace(REBUILT, reserved_pods=("pod-a",), reserved_groups=GROUPS, adopted=False)
    text = entry.json_text()
    assert '"reservedPodGroups":[{"name":"train","uid":"pg-1"},{"name":"eval","uid":"pg-2"}],' in text
    assert json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) == text  # canonical
    again = JournalEntry.from_json(json.loads(text))
    assert again == entry and again.reserved_groups == GROUPS


def test_a_record_without_groups_keeps_the_text_older_records_had() -> None:
    """No key for no group: an older numadra reads the entry, and an older entry reads as no group."""
    entry = replace(REBUILT, reserved_pods=("pod-a",))
    assert "reservedPodGroups" not in entry.json_text()
    assert JournalEntry.from_json(json.loads(entry.json_text())).reserved_groups == ()


@pytest.mark.parametrize(
    "groups",
    [
        pytest.param([{"name": "train"}], id="no-uid"),
        pytest.param([{"name": 7, "uid": "u"}], id="name-not-a-string"),
        pytest.param(["train"], id="not-an-object"),
    ],
)
def test_a_malformed_group_is_a_malformed_record(groups: object) -> None:
    """The journal's own record is checksummed; a group that does not parse fails the entry."""
    body = json.loads(REBUILT.json_text())
    body["reservedPodGroups"] = groups
    with pytest.raises((KeyError, TypeError)):
        JournalEntry.from_json(body)
