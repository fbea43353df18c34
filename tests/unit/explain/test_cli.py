"""``numadra explain`` and ``numadra state`` end to end through the CLI front (files, no cluster)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from driver.cli import main
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import PreparedDevice
from driver.state.entry import JournalEntry
from driver.state.journal import Journal, journal_path
from harness.hosttree import write_host_tree
from harness.topologies import TOPOLOGIES

ROOT = Path(__file__).resolve().parents[3]
NUMA = 'device.attributes["resource.kubernetes.io"].numaNode'


@pytest.fixture(scope="module")
def slices(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``numadra discover -o json`` of the workstation topology (1 NUMA node, 2 GPUs, 1 NIC, 16 CPUs)."""
    tmp = tmp_path_factory.mktemp("ws")
    root = write_host_tree(tmp / "root", TOPOLOGIES["workstation"])
    out = tmp / "slices.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["discover", "--host-root", str(root), "--node-name", "ws-1", "-o", "json"]) == 0
    out.write_text(buf.getvalue())
    return out


def _journal(plugin_dir: Path) -> None:
    journal = Journal(journal_path(plugin_dir))
    journal.put(
        JournalEntry(
            namespace="team",
            name="render",
            uid="uid-render",
            devices=(
                PreparedDevice(("gpu",), "ws-1", "gpu-0000-03-00-0", ("numadra.dev/claim=uid-render-gpu",)),
            ),
            pinning=ClaimPinning(
                "uid-render",
                (CpuAssignment("cpu", CpuMode.EXCLUSIVE, frozenset({2, 3, 10, 11}), frozenset({0})),),
            ),
        )
    )
    journal.save()


def _claim_file(tmp_path: Path, uid: str = "uid-new") -> Path:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "team", "name": "train", "uid": uid},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.numadra.dev",
                                                "selectors": [{"cel": {"expression": f"{NUMA} == 0"}}]}},
                    {"name": "cpu", "exactly": {"deviceClassName": "cpu.numadra.dev",
                                                "capacity": {"requests": {"cpus": "14"}}}},
                ]
            }
        },
    }  # fmt: skip
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(claim))
    return path


def test_explain_json_accounts_for_the_journal(
    slices: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a prepared claim holding a GPU and 4 CPUs, that GPU is in use and 14 CPUs do not fit."""
    _journal(tmp_path / "plugin")
    args = [
        "explain",
        "-f",
        str(_claim_file(tmp_path)),
        "--slices",
        str(slices),
        "--plugin-dir",
        str(tmp_path / "plugin"),
    ]
    assert main([*args, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    gpu, cpu = doc["requests"]
    assert gpu["status"] == "satisfiable"
    assert gpu["eligible"] == ["gpu-0000-00-02-0"]
    held = next(c for c in gpu["checks"] if c["device"] == "gpu-0000-03-00-0")
    assert held["reasons"] == [
        {"kind": "in-use", "message": "in use: prepared on this node for claim team/render"}
    ]
    assert cpu["status"] == "unsatisfiable"
    (numa0,) = [c for c in cpu["checks"] if c["device"] == "cpu-numa0"]
    assert numa0["reasons"][0]["message"] == (
        "capacity cpus exhausted: asks 14, 12 of 16 free (4 held by prepared claims on NUMA node 0)"
    )
    assert doc["prepared"] is None


def test_explain_text_of_a_prepared_claim(
    slices: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A claim in the journal shows its CDI IDs, cpuset and memset; its own GPU is not "in use"."""
    _journal(tmp_path / "plugin")
    claim = _claim_file(tmp_path, uid="uid-render")
    rc = main(
        ["explain", "-f", str(claim), "--slices", str(slices), "--plugin-dir", str(tmp_path / "plugin")]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "prepared on this node (journal):" in out
    assert "gpu-0000-03-00-0 (requests gpu) cdi: numadra.dev/claim=uid-render-gpu" in out
    assert "request cpu: cpuset 2-3,10-11 memset 0 (exclusive)" in out
    assert "request 'gpu': satisfiable (class gpu.numadra.dev, needs 1, 2 eligible)" in out


def test_explain_reads_a_claim_template(slices: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The prioritized-list example (a ResourceClaimTemplate) is explained per subrequest."""
    example = ROOT / "deploy" / "examples" / "prioritized-list-claim.yaml"
    assert main(["explain", "-f", str(example), "--slices", str(slices), "--no-journal", "-o", "json"]) == 0
    (gpu,) = json.loads(capsys.readouterr().out)["requests"]
    assert gpu["status"] == "satisfiable"
    assert [s["name"] for s in gpu["subrequests"]] == ["gpu/two-h100", "gpu/any-gpu"]
    assert [s["status"] for s in gpu["subrequests"]] == ["unsatisfiable", "satisfiable"]


def test_explain_from_host_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --slices the node's devices come from discovery of --host-root."""
    root = write_host_tree(tmp_path / "root", TOPOLOGIES["workstation"])
    claim = _claim_file(tmp_path)
    args = ["explain", "-f", str(claim), "--host-root", str(root), "--node-name", "ws-1", "--no-journal"]
    assert main(args) == 0
    assert (
        "request 'cpu': satisfiable (class cpu.numadra.dev, needs 1, 1 eligible)" in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "which claim?", id="no-claim"),
        pytest.param(["-f", "/nonexistent/claim.yaml"], "No such file", id="missing-file"),
        pytest.param(["-f", "SLICES"], "no ResourceClaim", id="not-a-claim"),
    ],
)
def test_explain_usage_errors(
    slices: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input exits 2 with a one-line reason."""
    args = [str(slices) if a == "SLICES" else a for a in args]
    assert main(["explain", *args, "--slices", str(slices)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_state_lists_prepared_claims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """numadra state prints each prepared claim with devices, CDI IDs, cpuset and memset."""
    _journal(tmp_path)
    assert main(["state", "--plugin-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("1 prepared claim(s)")
    assert "team/render  uid uid-render" in out
    assert "ws-1/gpu-0000-03-00-0  requests gpu  cdi numadra.dev/claim=uid-render-gpu" in out
    assert "request cpu: cpuset 2-3,10-11 memset 0 (exclusive)" in out
    assert main(["state", "--plugin-dir", str(tmp_path), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["uid"] for c in doc["claims"]] == ["uid-render"]


def test_state_marks_admin_access(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A monitoring claim's devices say "(admin access)" in text and list under adminDevices in JSON."""
    journal = Journal(journal_path(tmp_path))
    gpu = PreparedDevice(("gpu",), "ws-1", "gpu-0000-03-00-0", ("numadra.dev/claim=uid-mon-gpu",))
    journal.put(JournalEntry("ops", "monitor", "uid-mon", (gpu,), admin_devices=("gpu-0000-03-00-0",)))
    journal.save()
    assert main(["state", "--plugin-dir", str(tmp_path)]) == 0
    assert "cdi numadra.dev/claim=uid-mon-gpu  (admin access)" in capsys.readouterr().out
    assert main(["state", "--plugin-dir", str(tmp_path), "-o", "json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["claims"]
    assert doc["adminDevices"] == ["gpu-0000-03-00-0"]


def test_state_of_an_empty_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No journal file means no prepared claims, not an error."""
    assert main(["state", "--plugin-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("no prepared claims")


def test_state_of_a_corrupt_journal_fails_with_recovery(
    slices: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A corrupt journal exits 1 and the message says how to recover; explain only warns."""
    path = journal_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert main(["state", "--plugin-dir", str(tmp_path)]) == 1
    assert "recovery" in capsys.readouterr().err
    claim = _claim_file(tmp_path)
    assert main(["explain", "-f", str(claim), "--slices", str(slices), "--plugin-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("numadra: warning: prepared claims not taken into account")
    assert "request 'gpu'" in captured.out


def test_slices_of_a_cluster_need_a_node_name(
    slices: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Slices of two nodes are refused without --node-name and filtered with it."""
    doc = json.loads(slices.read_text())
    other = json.loads(json.dumps(doc["items"][0]))
    other["metadata"]["name"] = "ws-2-numadra-dev-0"
    other["spec"]["nodeName"] = other["spec"]["pool"]["name"] = "ws-2"
    doc["items"].append(other)
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(doc))
    claim = _claim_file(tmp_path)
    assert main(["explain", "-f", str(claim), "--slices", str(cluster), "--no-journal"]) == 2
    assert "slices of several nodes (ws-1, ws-2): pick one with --node-name" in capsys.readouterr().err
    args = [
        "explain",
        "-f",
        str(claim),
        "--slices",
        str(cluster),
        "--node-name",
        "ws-2",
        "--no-journal",
        "-o",
        "json",
    ]
    assert main(args) == 0
    gpu = json.loads(capsys.readouterr().out)["requests"][0]
    assert gpu["eligible"] == ["gpu-0000-00-02-0", "gpu-0000-03-00-0"]


def test_explain_names_the_owner_of_a_withheld_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPU the running driver withholds (its record in the plugin dir) is excluded, with the owner
    named; the other GPU stays eligible."""
    from driver.slices.ownership import Owner, Ownership, Reason
    from driver.slices.withheld import WITHHELD_FILE, WithheldReport

    root = write_host_tree(tmp_path / "root", TOPOLOGIES["workstation"])
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    report = WithheldReport(node_name="ws-1", component="numadra.dev", record_path=plugin / WITHHELD_FILE)
    report.update(Ownership({"gpu-0000-03-00-0": Owner(Reason.DRA_DRIVER, "gpu.nvidia.com")}))
    claim = _claim_file(tmp_path)
    args = ["explain", "-f", str(claim), "--host-root", str(root), "--node-name", "ws-1"]
    capsys.readouterr()  # the report's log line
    assert main([*args, "--plugin-dir", str(plugin), "-v"]) == 0
    out = capsys.readouterr().out
    assert (
        "- gpu-0000-03-00-0: withheld: DRA driver gpu.nvidia.com owns it on this node, "
        "numadra does not publish it"
    ) in out
    assert "+ gpu-0000-00-02-0" in out  # the other GPU stays eligible
