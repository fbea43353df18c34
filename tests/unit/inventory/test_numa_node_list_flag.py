"""--numa-node-list: off by default; on ``numadra discover`` and ``numadra run`` (flag or env)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from driver.cli import main
from driver.errors import ConfigError
from tests.unit.cli.test_run_config import _KUBECONFIG, _config
from tests.unit.inventory.trees import host_tree

NUMA = "resource.kubernetes.io/numaNode"


@pytest.fixture(autouse=True)
def _kubeconfig(tmp_path: Path) -> None:
    """``run`` configs need a kubeconfig file that exists (as in test_run_config.py)."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    _KUBECONFIG["KUBECONFIG"] = str(path)


def _numa_attributes(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert main(["discover", "--host-root", str(host_tree("snc2")), "--node-name", "n", *extra]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    return {d["name"]: d["attributes"][NUMA] for s in items for d in s["spec"]["devices"]}


def test_discover_publishes_the_int_by_default_and_the_list_on_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SNC-2: the NIC of node 1 is ``int 1``, or with the flag the list [1, 0]."""
    assert _numa_attributes(capsys)["nic-0000-38-00-0"] == {"int": 1}
    listed = _numa_attributes(capsys, "--numa-node-list")
    assert listed["nic-0000-38-00-0"] == {"ints": [1, 0]}
    assert listed["cpu-numa2"] == {"ints": [2, 3]}


def test_run_flag_and_env() -> None:
    """--numa-node-list / NUMADRA_NUMA_NODE_LIST reach the RunConfig; default off; typos rejected."""
    assert _config(["--node-name", "n"]).numa_node_list is False
    assert _config(["--node-name", "n", "--numa-node-list"]).numa_node_list is True
    assert _config(["--node-name", "n"], {"NUMADRA_NUMA_NODE_LIST": "true"}).numa_node_list is True
    assert (
        _config(["--node-name", "n", "--no-numa-node-list"], {"NUMADRA_NUMA_NODE_LIST": "1"}).numa_node_list
        is False
    )
    with pytest.raises(ConfigError, match="NUMADRA_NUMA_NODE_LIST"):
        _config(["--node-name", "n"], {"NUMADRA_NUMA_NODE_LIST": "sometimes"})
