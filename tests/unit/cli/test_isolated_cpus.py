"""isolcpus: isolated CPUs count in the cpus capacity by default; --isolated-cpus exclude keeps them out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.cli import main
from driver.errors import ConfigError
from driver.inventory.model import kept_out_cpus
from tests.unit.cli.test_run_config import _KUBECONFIG, _config
from tests.unit.inventory.trees import host_tree, inventory


@pytest.fixture(autouse=True)
def _kubeconfig(tmp_path: Path) -> None:
    """``run`` configs need a kubeconfig file that exists (as in test_run_config.py)."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    _KUBECONFIG["KUBECONFIG"] = str(path)


def _cpus_capacity(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, str]:
    argv = ["discover", "--host-root", str(host_tree("hostile")), "--node-name", "h", *extra]
    assert main(argv) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    return {
        d["name"]: d["capacity"].get("cpus", {}).get("value", "0")
        for s in items
        for d in s["spec"]["devices"]
        if d["name"].startswith("cpu-")
    }


def test_isolated_cpus_count_by_default_and_can_be_excluded(capsys: pytest.CaptureFixture[str]) -> None:
    """The hostile host isolates CPUs 2-3 (both on NUMA node 1: 2, 3, 6 online there); its node 2
    has no CPUs (a memory device, no cpu device)."""
    assert _cpus_capacity(capsys) == {"cpu-numa0": "4", "cpu-numa1": "3"}
    excluded = _cpus_capacity(capsys, "--isolated-cpus", "exclude")
    assert excluded == {"cpu-numa0": "4", "cpu-numa1": "1"}
    both = _cpus_capacity(capsys, "--isolated-cpus", "exclude", "--reserved-cpus", "0,6")
    assert both == {"cpu-numa0": "3", "cpu-numa1": "0"}


def test_kept_out_cpus_is_what_the_planner_and_slices_get() -> None:
    """One function decides for the capacity and the planner alike."""
    inv = inventory("hostile")
    assert kept_out_cpus(inv, frozenset({0}), "include") == {0}
    assert kept_out_cpus(inv, frozenset({0}), "exclude") == {0, 2, 3}


def test_run_flag_and_env() -> None:
    """--isolated-cpus / NUMADRA_ISOLATED_CPUS reach the RunConfig; default include; typos rejected."""
    assert _config(["--node-name", "n"]).isolated_cpus == "include"
    assert _config(["--node-name", "n", "--isolated-cpus", "exclude"]).isolated_cpus == "exclude"
    assert _config(["--node-name", "n"], {"NUMADRA_ISOLATED_CPUS": "exclude"}).isolated_cpus == "exclude"
    with pytest.raises(ConfigError, match="--isolated-cpus"):
        _config(["--node-name", "n"], {"NUMADRA_ISOLATED_CPUS": "sometimes"})
