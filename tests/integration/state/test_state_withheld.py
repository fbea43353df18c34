"""``numadra state`` names the devices the running driver withholds and who owns them.

The driver writes ``<plugin-dir>/withheld.json`` (through the WithheldReport the publisher's
owners feed); ``numadra state`` reads it back as untrusted input: a link or a record of another
shape is reported in one line, and the claims are still listed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.cli import main
from driver.slices.ownership import Owner, Ownership, Reason
from driver.slices.withheld import WITHHELD_FILE, WithheldReport


def _state(plugin_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    cdi = plugin_dir.parent / "cdi"
    cdi.mkdir(exist_ok=True)
    argv = ["state", "--plugin-dir", str(plugin_dir), "--cdi-dir", str(cdi), "--node-name", "node-a", *extra]
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def _report(plugin_dir: Path, withheld: dict[str, Owner]) -> None:
    plugin_dir.mkdir(parents=True, exist_ok=True)
    report = WithheldReport(
        node_name="node-a", component="numadra.dev", record_path=plugin_dir / WITHHELD_FILE
    )
    report.update(Ownership(withheld))


def test_state_names_each_withheld_device_and_its_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Table and JSON name the device, the reason and the owner."""
    plugin = tmp_path / "plugin"
    _report(
        plugin,
        {
            "gpu-0000-3b-00-0": Owner(Reason.DRA_DRIVER, "gpu.nvidia.com"),
            "gpu-0000-86-00-0": Owner(Reason.DEVICE_PLUGIN, "amd.com/gpu"),
        },
    )
    out = _state(plugin, capsys)
    assert "WITHHELD: 2 device(s)" in out
    assert "  gpu-0000-3b-00-0  owned by DRA driver gpu.nvidia.com" in out
    assert "  gpu-0000-86-00-0  owned by device plugin amd.com/gpu" in out
    doc = json.loads(_state(plugin, capsys, "-o", "json"))
    assert doc["withheld"] == [
        {"device": "gpu-0000-3b-00-0", "reason": "dra-driver", "owner": "gpu.nvidia.com"},
        {"device": "gpu-0000-86-00-0", "reason": "device-plugin", "owner": "amd.com/gpu"},
    ]


def test_nothing_withheld_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No record, or an empty one: no WITHHELD lines, an empty JSON list."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    assert "WITHHELD" not in _state(plugin, capsys)
    _report(plugin, {"gpu-0000-3b-00-0": Owner(Reason.DRA_DRIVER, "x.example.com")})
    _report(plugin, {})
    assert "WITHHELD" not in _state(plugin, capsys)
    assert json.loads(_state(plugin, capsys, "-o", "json"))["withheld"] == []


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(
            '{"version": 1, "devices": [{"device": "a", "reason": "evil", "owner": "o"}]}',
            "reason",
            id="reason",
        ),
        pytest.param(
            '{"version": 1, "devices": [{"device": "a\\u001b[31m", "reason": "dra-driver", "owner": "o"}]}',
            "device",
            id="escape",
        ),
        pytest.param('{"version": 9, "devices": []}', "version", id="version"),
        pytest.param(None, "link", id="symlink"),
    ],
)  # fmt: skip
def test_a_planted_record_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, reason: str
) -> None:
    """The plugin dir is a hostPath: a record others planted is named, never printed raw."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    if content is None:
        secret = tmp_path / "secret"
        secret.write_text('{"version": 1, "devices": []}')
        (plugin / WITHHELD_FILE).symlink_to(secret)
    else:
        (plugin / WITHHELD_FILE).write_text(content)
    out = _state(plugin, capsys)
    assert "no prepared claims" in out
    (line,) = [line for line in out.splitlines() if WITHHELD_FILE in line]
    assert line.startswith("cannot read the driver's record of withheld devices"), line
    assert reason in line.lower() or "symbolic" in line.lower(), line
    assert "\x1b" not in out
    assert "error" in json.loads(_state(plugin, capsys, "-o", "json"))["withheld"]
