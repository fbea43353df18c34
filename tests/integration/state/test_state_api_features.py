"""``numadra state`` names the feature gates the running driver found missing on the apiserver.

The driver writes ``<plugin-dir>/api-features.json`` (through the same MissingFeatures the
publisher uses); ``numadra state`` reads it back as untrusted input: a link, a FIFO, a record of
another shape or with control characters is reported in one line, and the claims are still listed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from driver.cli import main
from driver.slices.features import DroppedField
from driver.slices.missingfeatures import MISSING_FEATURES_FILE, MissingFeatures

DROPPED = (
    DroppedField(
        "spec.devices[cpu-numa0].allowMultipleAllocations",
        "devices[].allowMultipleAllocations",
        "DRAConsumableCapacity",
    ),
    DroppedField(
        "spec.devices[cpu-numa0].capacity[cpus].requestPolicy",
        "devices[].capacity[].requestPolicy",
        "DRAConsumableCapacity",
    ),
)


def _state(plugin_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    cdi = plugin_dir.parent / "cdi"
    cdi.mkdir(exist_ok=True)
    argv = ["state", "--plugin-dir", str(plugin_dir), "--cdi-dir", str(cdi), "--node-name", "node-a", *extra]
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def _record(plugin_dir: Path, *dropped: DroppedField) -> None:
    plugin_dir.mkdir(parents=True, exist_ok=True)
    features = MissingFeatures(
        node_name="node-a", driver_name="numadra.dev", record_path=plugin_dir / MISSING_FEATURES_FILE
    )
    features.observe("node-a-numadra-dev-1", dropped)


def test_state_names_the_missing_gate_and_its_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "plugin"
    _record(plugin, *DROPPED)
    out = _state(plugin, capsys)
    assert "no prepared claims" in out
    assert "API FEATURES MISSING" in out
    assert (
        "  DRAConsumableCapacity: the apiserver dropped devices[].allowMultipleAllocations, "
        "devices[].capacity[].requestPolicy of ResourceSlice node-a-numadra-dev-1" in out
    ), out
    assert "the scheduler hands such a device whole to one claim" in out
    doc = json.loads(_state(plugin, capsys, "-o", "json"))
    (missing,) = doc["apiFeatures"]["missing"]
    assert missing["name"] == "DRAConsumableCapacity" and missing["refused"] is False
    assert missing["fields"] == ["devices[].allowMultipleAllocations", "devices[].capacity[].requestPolicy"]


def test_state_says_when_the_apiserver_kept_every_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "plugin"
    _record(plugin)
    out = _state(plugin, capsys)
    assert "apiserver kept every field of this node's slices" in out
    assert json.loads(_state(plugin, capsys, "-o", "json"))["apiFeatures"]["missing"] == []


def test_state_without_a_record_says_nothing_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    out = _state(plugin, capsys)
    assert "API FEATURES" not in out and "apiserver" not in out
    assert json.loads(_state(plugin, capsys, "-o", "json"))["apiFeatures"] is None


def _plant_link(plugin: Path) -> str:
    target = plugin.parent / "elsewhere.json"
    target.write_text("{}")
    (plugin / MISSING_FEATURES_FILE).symlink_to(target)
    return "symbolic link"


def _plant_fifo(plugin: Path) -> str:
    os.mkfifo(plugin / MISSING_FEATURES_FILE)
    return "FIFO"


def _plant_escape(plugin: Path) -> str:
    _record(plugin, *DROPPED)
    path = plugin / MISSING_FEATURES_FILE
    doc = json.loads(path.read_text())
    doc["features"][0]["slice"] = "\x1b[2Jgone"
    path.write_text(json.dumps(doc))
    return "must be printable text"


def _plant_made_up_gate(plugin: Path) -> str:
    _record(plugin, *DROPPED)
    path = plugin / MISSING_FEATURES_FILE
    path.write_text(path.read_text().replace("DRAConsumableCapacity", "DRAEverythingOn"))
    return "no feature gate numadra knows"


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param(_plant_link, id="symlink"),
        pytest.param(_plant_fifo, id="fifo"),
        pytest.param(_plant_escape, id="control-characters"),
        pytest.param(_plant_made_up_gate, id="made-up-gate"),
    ],
)
def test_a_planted_record_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plant: object
) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    reason = plant(plugin)  # type: ignore[operator]
    out = _state(plugin, capsys)
    assert "no prepared claims" in out
    (line,) = [line for line in out.splitlines() if "api-features.json" in line]
    assert line.startswith("cannot read the driver's record of missing api features") and reason in line, line
    assert "\x1b" not in out
    doc = json.loads(_state(plugin, capsys, "-o", "json"))
    assert reason in doc["apiFeatures"]["error"]
