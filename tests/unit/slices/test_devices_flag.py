"""--devices: the kinds numadra publishes (default all); discovery still sees every device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.cli import main
from driver.config import device_kinds
from driver.errors import ConfigError
from driver.inventory.model import DeviceKind
from driver.slices.builder import build_slices
from tests.unit.cli.test_run_config import _KUBECONFIG, _config
from tests.unit.inventory.trees import host_tree
from tests.unit.inventory.trees import inventory as inventory_of


@pytest.fixture(autouse=True)
def _kubeconfig(tmp_path: Path) -> None:
    """``run`` configs need a kubeconfig file that exists (as in test_run_config.py)."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    _KUBECONFIG["KUBECONFIG"] = str(path)


def _types(slices: list[dict[str, object]]) -> set[str]:
    return {
        d["attributes"]["type"]["string"]
        for s in slices
        for d in s["spec"]["devices"]  # type: ignore[index]
    }


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        pytest.param("gpu", {DeviceKind.GPU}, id="one"),
        pytest.param("cpu, Memory", {DeviceKind.CPU, DeviceKind.MEMORY}, id="spaces-and-case"),
        pytest.param("all", set(DeviceKind), id="all"),
        pytest.param("gpu,nic,cpu,memory", set(DeviceKind), id="every-name"),
    ],
)
def test_device_kinds_parse(text: str, kinds: set[DeviceKind]) -> None:
    """A comma list of kinds, case and blanks aside; ``all`` is every kind."""
    assert device_kinds(text, "--devices") == kinds


@pytest.mark.parametrize("text", ["", ",", "gpus", "gpu,tpu", "all,gpu"])
def test_device_kinds_refuse_unknown_or_empty(text: str) -> None:
    """An unknown kind or an empty list is a ConfigError naming the flag and the value."""
    with pytest.raises(ConfigError, match=r"--devices must be a comma list of gpu,nic,cpu,memory"):
        device_kinds(text, "--devices")


def test_run_flag_and_env() -> None:
    """--devices / NUMADRA_DEVICES reach the RunConfig; the default is every kind."""
    assert _config(["--node-name", "n"]).devices == frozenset(DeviceKind)
    assert _config(["--node-name", "n", "--devices", "cpu,memory"]).devices == {
        DeviceKind.CPU,
        DeviceKind.MEMORY,
    }
    assert _config(["--node-name", "n"], {"NUMADRA_DEVICES": "nic"}).devices == {DeviceKind.NIC}
    with pytest.raises(ConfigError, match="NUMADRA_DEVICES"):
        _config(["--node-name", "n"], {"NUMADRA_DEVICES": "fpga"})


@pytest.mark.parametrize(
    "kinds",
    [
        pytest.param({DeviceKind.CPU}, id="cpu"),
        pytest.param({DeviceKind.GPU, DeviceKind.NIC}, id="gpu-nic"),
        pytest.param(set(DeviceKind) - {DeviceKind.GPU}, id="all-but-gpu"),
    ],
)
def test_builder_publishes_only_the_served_kinds(kinds: set[DeviceKind]) -> None:
    """Every device of a served kind is in the slices, none of another kind."""
    inventory = inventory_of("dgx")
    everything = _types(build_slices(inventory, node_name="n"))
    assert {"gpu", "nic", "cpu"} <= everything
    served = _types(build_slices(inventory, node_name="n", kinds=kinds))
    assert served == everything & {k.value for k in kinds}
    names = {
        d["name"] for s in build_slices(inventory, node_name="n", kinds=kinds) for d in s["spec"]["devices"]
    }
    assert names == {dev.name for kind, dev in inventory.devices() if kind in kinds}


def test_without_leaves_out_withheld_devices() -> None:
    """The publisher's inventory without a withheld GPU: not published; the rest of its kind is."""
    from driver.slices.ownership import without

    inventory = inventory_of("dgx")
    gone = inventory.gpus[0].name
    assert without(inventory, {"cpu-numa0", "nothing"}) is inventory
    slices = build_slices(without(inventory, {gone}), node_name="n")
    names = {d["name"] for s in slices for d in s["spec"]["devices"]}
    assert gone not in names
    assert inventory.gpus[1].name in names


def test_discover_honours_devices(capsys: pytest.CaptureFixture[str]) -> None:
    """``numadra discover --devices cpu`` prints only cpu devices; a bad list exits 2."""
    root = str(host_tree("dgx"))
    assert main(["discover", "--host-root", root, "--node-name", "n", "--devices", "cpu"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert _types(items) == {"cpu"}
    assert main(["discover", "--host-root", root, "--node-name", "n", "--devices", "gpu,fpga"]) == 2
    assert "--devices" in capsys.readouterr().err
