"""``numadra explain --namespace/--name``: the claim comes from an apiserver (the fake one, real HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.cli import main
from harness.fakeapiserver import FakeApiServer
from harness.hosttree import write_host_tree
from harness.topologies import TOPOLOGIES

CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"namespace": "team", "name": "render", "uid": "3f6c"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.numadra.dev"}}]}},
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "numadra.dev", "pool": "ws-1", "device": "gpu-0000-03-00-0"}
                ]
            }
        }
    },
}


def test_explain_fetches_the_claim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The claim is read from the apiserver; its allocation shows up and the allocated GPU is marked."""
    root = write_host_tree(tmp_path / "root", TOPOLOGIES["workstation"])
    with FakeApiServer() as api:
        api.put_object(CLAIM)
        args = ["explain", "-n", "team", "--name", "render", "--kubeconfig", api.kubeconfig_path,
                "--host-root", str(root), "--node-name", "ws-1", "--no-journal", "-o", "json"]  # fmt: skip
        assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["uid"] == "3f6c"
    assert doc["allocated"] == [{"request": "gpu", "pool": "ws-1", "device": "gpu-0000-03-00-0"}]
    (gpu,) = doc["requests"]
    allocated = [c["device"] for c in gpu["checks"] if c["allocated"]]
    assert allocated == ["gpu-0000-03-00-0"]
    assert gpu["status"] == "satisfiable"


def test_missing_claim_is_a_runtime_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A claim that does not exist exits 1 with the apiserver's answer on one line."""
    root = write_host_tree(tmp_path / "root", TOPOLOGIES["workstation"])
    with FakeApiServer() as api:
        args = ["explain", "-n", "team", "--name", "nope", "--kubeconfig", api.kubeconfig_path,
                "--host-root", str(root), "--no-journal"]  # fmt: skip
        assert main(args) == 1
    err = capsys.readouterr().err
    assert "nope" in err
    assert len(err.strip().splitlines()) == 1
