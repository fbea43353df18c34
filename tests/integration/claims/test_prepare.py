"""Prepare/unprepare through ClaimsDriver with real files: CDI specs, metadata, journal, pinning."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from driver.claims.hostedits import HostEdits
from driver.inventory.model import Gpu
from driver.pinning.types import parse_cpulist
from driver.plugin import ClaimRef, DriverPlugin
from driver.state.journal import Journal, journal_path
from tests.integration.claims._world import (
    CPU0,
    DRIVER,
    GPU0,
    GPU1,
    NIC0,
    NODE,
    World,
    claim,
    cpu_result,
    opaque,
    result,
)

UID = "5f2c8a9e-0d1b-4c3a-9e8f-000000000001"


def _full_claim(uid: str = UID, **kwargs: Any) -> dict[str, Any]:
    return claim(
        uid,
        "train",
        "ml",
        results=[result("gpu", GPU0), result("nic", NIC0), cpu_result("cpu", 4)],
        configs=[opaque({"apiVersion": "numadra.dev/v1alpha1", "kind": "GpuConfig", "env": {"FOO": "1"}})],
        **kwargs,
    )


def _env(spec: dict[str, Any], device_suffix: str) -> dict[str, str]:
    for dev in spec["devices"]:
        if dev["name"].endswith(device_suffix) or device_suffix in dev["name"]:
            return dict(e.split("=", 1) for e in dev["containerEdits"].get("env", []))
    raise AssertionError(f"no device {device_suffix}")


def test_claims_driver_satisfies_driver_plugin(world: World) -> None:
    """ClaimsDriver is a DriverPlugin (the kubelet layer's seam)."""
    assert isinstance(world.driver().inner, DriverPlugin)


def _host_edits(world: World, tmp_path: Path) -> HostEdits:
    """The host's extras read from a tree that holds the world's device nodes (plain files)."""
    root = tmp_path / "host"
    for node in ("dev/nvidia0", "dev/nvidiactl", "dev/infiniband/uverbs0", "dev/infiniband/rdma_cm"):
        (root / node).parent.mkdir(parents=True, exist_ok=True)
        (root / node).write_text("")
    return HostEdits(
        host_root=str(root), driver_root="/", cdi_dir=str(world.cdi_dir), claim_kind=f"{DRIVER}/claim"
    )


def test_prepare_writes_one_cdi_spec_with_nodes_env_and_pinning(world: World, tmp_path: Path) -> None:
    """A GPU+NIC+CPU claim gets one transient CDI spec with device nodes, env and CPU markers."""
    ref = world.getter.add(_full_claim())
    out = world.driver(host_edits=_host_edits(world, tmp_path)).prepare_claims([ref])
    res = out[UID]
    assert res.ok, res.error
    assert [d.device_name for d in res.devices] == [GPU0, NIC0, CPU0]
    assert all(d.pool_name == NODE for d in res.devices)
    assert [d.request_names for d in res.devices] == [("gpu",), ("nic",), ("cpu",)]
    assert res.devices[2].share_id is not None
    assert res.devices[0].cdi_device_ids == (f"{DRIVER}/claim={UID}-{GPU0}",)
    spec_path = world.cdi_dir / f"{DRIVER}_claim_{UID}.json"
    spec = json.loads(spec_path.read_text())
    assert spec["kind"] == f"{DRIVER}/claim"
    assert spec["cdiVersion"] == "0.5.0"  # the UID starts with a digit
    gpu = spec["devices"][0]
    assert gpu["name"] == f"{UID}-{GPU0}"
    assert gpu["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidiactl"}]
    gpu_env = _env(spec, GPU0)
    assert gpu_env["NVIDIA_VISIBLE_DEVICES"] == "0"
    assert gpu_env["NUMADRA_GPU_PCI_BUS_IDS"] == "0000:3b:00.0"
    assert gpu_env["FOO"] == "1"  # GpuConfig env
    assert "NUMADRA_MEMS" not in gpu_env  # the claim has a cpu device: memory follows its pinning
    nic_env = _env(spec, NIC0)
    assert nic_env["NUMADRA_NIC_INTERFACES"] == "eth1"
    assert nic_env["NUMADRA_RDMA_DEVICES"] == "mlx5_0"
    assert "FOO" not in nic_env  # GpuConfig does not apply to a NIC
    cpu_env = _env(spec, CPU0)
    assert len(parse_cpulist(cpu_env["NUMADRA_CPUS"])) == 4
    assert parse_cpulist(cpu_env["NUMADRA_CPUS"]) <= set(range(8))
    assert cpu_env["NUMADRA_MEMS"] == "0"
    assert cpu_env["NUMADRA_CPU_MODE"] == "exclusive"
    assert cpu_env["NUMADRA_CLAIM_UID"] == UID
    assert cpu_env["NUMADRA_REQUEST"] == "cpu"


def test_prepared_line_names_devices_and_pinning(world: World) -> None:
    """One "prepared" line per claim carries its devices and each pinned request's CPUs and nodes."""
    ref = world.getter.add(_full_claim())
    with capture_logs() as logs:
        res = world.driver().prepare_claims([ref])[UID]
    assert res.ok, res.error
    (line,) = [e for e in logs if e["event"] == "prepared"]
    assert line["claim_uid"] == UID
    assert line["devices"] == [GPU0, NIC0, CPU0]
    (pin,) = line["pinning"]
    assert pin["request"] == "cpu"
    assert pin["mode"] == "exclusive"
    assert len(parse_cpulist(pin["cpus"])) == 4
    assert pin["mems"] == "0"
    assert not [e for e in logs if e["event"] == "cpus planned"]  # folded into "prepared"


def test_gpu_only_claim_gets_memory_nodes_of_its_devices(world: World) -> None:
    """Without a cpu device, GPU/NIC devices carry NUMADRA_MEMS = the NUMA nodes of the claim's devices."""
    ref = world.getter.add(claim("u-gpus", results=[result("gpu", GPU0), result("gpu", GPU1)]))
    res = world.driver().prepare_claims([ref])["u-gpus"]
    assert res.ok, res.error
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_u-gpus.json").read_text())
    assert spec["cdiVersion"] == "0.3.0"  # letters first, no hostPath: the lowest version
    env = _env(spec, GPU1)
    assert env["NUMADRA_MEMS"] == "0-1"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    assert env["NUMADRA_CLAIM_UID"] == "u-gpus"
    # the metadata mount goes to the first device of the request only
    assert [len(d["containerEdits"].get("mounts", ())) for d in spec["devices"]] == [1, 0]
    assert [len(d.cdi_device_ids) for d in res.devices] == [1, 1]


def test_two_claims_never_share_exclusive_cpus(world: World) -> None:
    """CPUs pinned for one claim are taken for the next, also across a driver restart."""
    a = world.getter.add(
        claim("u-a", results=[cpu_result("cpu", 4, share="11111111-0000-4000-8000-000000000001")])
    )
    b = world.getter.add(
        claim("u-b", results=[cpu_result("cpu", 2, share="11111111-0000-4000-8000-000000000002")])
    )
    first = world.driver().prepare_claims([a])
    assert first["u-a"].ok
    second = world.driver().prepare_claims([b])  # a new process: taken CPUs come from the journal
    assert second["u-b"].ok
    entries = {e.uid: e for e in world.driver().prepared_claims()}
    cpus_a = entries["u-a"].pinning.cpus if entries["u-a"].pinning else frozenset()
    cpus_b = entries["u-b"].pinning.cpus if entries["u-b"].pinning else frozenset()
    assert len(cpus_a) == 4
    assert len(cpus_b) == 2
    assert not cpus_a & cpus_b


def test_shared_mode_from_claim_config_beats_class_config(world: World) -> None:
    """Claim config wins over class config; the request gets the shared mode marker."""
    cfg_class = opaque(
        {"apiVersion": "numadra.dev/v1alpha1", "kind": "CpuConfig", "mode": "exclusive"},
        requests=["cpu"],
        source="FromClass",
    )
    cfg_claim = opaque({"apiVersion": "numadra.dev/v1alpha1", "kind": "CpuConfig", "mode": "shared"})
    ref = world.getter.add(claim("u-sh", results=[cpu_result("cpu", 2)], configs=[cfg_claim, cfg_class]))
    res = world.driver().prepare_claims([ref])["u-sh"]
    assert res.ok, res.error
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_u-sh.json").read_text())
    assert _env(spec, CPU0)["NUMADRA_CPU_MODE"] == "shared"


def test_without_planner_cpu_devices_get_markers_but_no_cpus(world: World) -> None:
    """With pinning off, cpu devices still validate and carry mems/mode markers, but no NUMADRA_CPUS."""
    ref = world.getter.add(claim("u-np", results=[cpu_result("cpu", 2)]))
    drv = world.driver(planner=False)
    res = drv.prepare_claims([ref])["u-np"]
    assert res.ok, res.error
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_u-np.json").read_text())
    env = _env(spec, CPU0)
    assert "NUMADRA_CPUS" not in env
    assert env["NUMADRA_MEMS"] == "0"
    assert drv.prepared_claims()[0].pinning is None


def test_metadata_stream_and_its_mount(world: World) -> None:
    """KEP-5304: v1beta1 then v1alpha1 objects, a read-only bind mount at the documented path,
    carried by the request's first device in the claim's spec: two new files per claim."""
    ref = world.getter.add(_full_claim())
    world.driver().prepare_claims([ref])
    host = world.plugin_dir / "dra-device-metadata" / f"{UID}_nic.json"
    lines = host.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    assert second["apiVersion"] == "metadata.resource.k8s.io/v1alpha1"
    assert first["kind"] == "DeviceMetadata"
    assert first["metadata"] == {"name": "train", "namespace": "ml", "uid": UID, "generation": 1}
    assert "podClaimName" not in first
    (req,) = first["requests"]
    assert req["name"] == "nic"
    (dev,) = req["devices"]
    assert dev["driver"] == DRIVER
    assert dev["pool"] == NODE
    assert dev["name"] == NIC0
    assert dev["attributes"]["interfaceName"] == {"string": "eth1"}
    assert dev["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 0}
    assert dev["networkData"] == {"interfaceName": "eth1", "hardwareAddress": "b8:ce:f6:00:00:01"}
    assert host.stat().st_mode & 0o777 == 0o644
    assert world.cdi_files() == [f"{DRIVER}_claim_{UID}.json"]
    assert sorted(p.name for p in host.parent.iterdir()) == [f"{UID}_{r}.json" for r in ("cpu", "gpu", "nic")]
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_{UID}.json").read_text())
    device = next(d for d in spec["devices"] if d["name"] == f"{UID}-{NIC0}")
    assert device["containerEdits"]["mounts"] == [
        {
            "hostPath": str(host),
            "containerPath": (
                f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/train/nic/{DRIVER}-metadata.json"
            ),
            "options": ["ro", "bind"],
        }
    ]


def test_metadata_of_template_claim_uses_pod_claim_name(world: World) -> None:
    """A claim from a template is mounted under resourceclaimtemplates/<podClaimName> and says so."""
    obj = claim(
        "u-tpl",
        "pod-1-gpu-x7k2",
        results=[result("gpu/big", GPU0)],
        requests=["gpu"],
        annotations={"resource.kubernetes.io/pod-claim-name": "gpu"},
    )
    obj["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [{"name": "big"}]}]
    ref = world.getter.add(obj)
    res = world.driver().prepare_claims([ref])["u-tpl"]
    assert res.ok, res.error
    assert res.devices[0].request_names == ("gpu",)  # base name, the sub-request is stripped
    host = world.plugin_dir / "dra-device-metadata" / "u-tpl_gpu.json"
    first = json.loads(host.read_text().splitlines()[0])
    assert first["podClaimName"] == "gpu"
    assert first["requests"][0]["name"] == "gpu/big"  # the full request reference
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_u-tpl.json").read_text())
    mount = spec["devices"][0]["containerEdits"]["mounts"][0]
    assert mount["containerPath"] == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/{DRIVER}-metadata.json"
    )


def test_prepare_is_idempotent_and_survives_restart(world: World) -> None:
    """A repeat, also from a new driver over the same dirs, returns the same devices and CDI IDs."""
    ref = world.getter.add(_full_claim())
    first = world.driver().prepare_claims([ref])[UID]
    spec_path = world.cdi_dir / f"{DRIVER}_claim_{UID}.json"
    content = spec_path.read_bytes()
    again = world.driver().prepare_claims([ref])[UID]
    assert again == first
    # even when the inventory changed so that a new plan would differ, the repeat answers the same
    world.inventory = world.inventory.__class__(
        gpus=world.inventory.gpus,
        nics=world.inventory.nics,
        cpus=world.inventory.cpus,
        numa_nodes=world.inventory.numa_nodes,
    )
    assert world.driver().prepare_claims([ref])[UID] == first
    assert spec_path.read_bytes() == content


def test_repeat_prepare_rewrites_missing_files(world: World) -> None:
    """A repeated prepare re-creates CDI and metadata files that vanished, byte for byte."""
    ref = world.getter.add(_full_claim())
    drv = world.driver()
    drv.prepare_claims([ref])
    files = sorted(world.cdi_dir.iterdir())
    before = {p: p.read_bytes() for p in files}
    for p in files:
        p.unlink()
    assert drv.prepare_claims([ref])[UID].ok
    assert {p: p.read_bytes() for p in sorted(world.cdi_dir.iterdir())} == before


def test_metadata_generation_bumps_when_content_changes(world: World) -> None:
    """A repeat after the device's attributes changed rewrites the metadata with generation + 1."""
    from tests.integration.claims._world import make_inventory

    ref = world.getter.add(_full_claim())
    drv = world.driver()
    drv.prepare_claims([ref])
    host = world.plugin_dir / "dra-device-metadata" / f"{UID}_nic.json"
    assert json.loads(host.read_text().splitlines()[0])["metadata"]["generation"] == 1
    world.inventory = make_inventory(nic0_interface="ens5")
    drv.prepare_claims([ref])
    objs = [json.loads(line) for line in host.read_text().splitlines()]
    assert [o["metadata"]["generation"] for o in objs] == [2, 2]
    assert objs[0]["requests"][0]["devices"][0]["networkData"]["interfaceName"] == "ens5"
    drv.prepare_claims([ref])  # nothing changed since: the generation stays
    assert json.loads(host.read_text().splitlines()[0])["metadata"]["generation"] == 2
    # and a restarted driver restores the new content
    host.unlink()
    assert world.driver().reconcile() == 1
    assert json.loads(host.read_text().splitlines()[0])["metadata"]["generation"] == 2


def test_reboot_recovery_recreates_identical_files(world: World) -> None:
    """After /var/run/cdi is wiped, reconcile at start puts every spec back, identical."""
    world.getter.add(_full_claim())
    world.getter.add(claim("u-2", results=[result("gpu", GPU1)]))
    world.driver().prepare_claims([ClaimRef("ml", "train", UID), ClaimRef("default", "claim-u-2", "u-2")])
    before = {p.name: p.read_bytes() for p in world.cdi_dir.iterdir()}
    meta = world.plugin_dir / "dra-device-metadata" / f"{UID}_gpu.json"
    meta_before = meta.read_bytes()
    assert len(before) == 2  # two claim specs (they carry the metadata mounts)
    for p in world.cdi_dir.iterdir():
        p.unlink()
    meta.unlink()
    fresh = world.driver()
    assert fresh.reconcile() == len(before) + 1
    assert fresh.recovery == {"recreated": 2}  # per claim, for the journal-recovery metric
    assert {p.name: p.read_bytes() for p in world.cdi_dir.iterdir()} == before
    assert meta.read_bytes() == meta_before
    assert fresh.reconcile() == 0  # nothing left to do
    assert fresh.recovery == {"ok": 2}


def test_unprepare_removes_everything_and_is_idempotent(world: World) -> None:
    """Unprepare removes the spec, metadata files and journal entry; repeating it succeeds."""
    ref = world.getter.add(_full_claim())
    drv = world.driver()
    drv.prepare_claims([ref])
    assert drv.unprepare_claims([ref]) == {UID: ""}
    assert world.cdi_files() == []
    assert list((world.plugin_dir / "dra-device-metadata").iterdir()) == []
    assert drv.prepared_claims() == []
    assert world.driver().unprepare_claims([ref]) == {UID: ""}


def test_unprepare_unknown_claim_succeeds(world: World) -> None:
    """An unknown claim (never prepared, any names) unprepares successfully."""
    refs = [ClaimRef("default", "nope", "u-unknown"), ClaimRef("a/b", "../x", "")]
    assert world.driver().unprepare_claims(refs) == {"u-unknown": "", "": ""}


def test_unprepare_without_journal_entry_removes_that_claims_spec_files(world: World) -> None:
    """A crash before the journal save leaves spec files: unprepare finds them by UID, no others."""
    other_uid = UID.replace("0001", "0002")
    other = world.getter.add(claim(other_uid, "other", "ml", results=[result("gpu", GPU1)]))
    ref = world.getter.add(_full_claim())
    drv = world.driver()
    assert all(r.ok for r in drv.prepare_claims([ref, other]).values())
    journal = Journal(journal_path(world.plugin_dir), read_only=True)
    journal.load()
    assert sorted(entry.uid for entry in journal.entries()) == [UID, other_uid]
    journal.path.unlink()  # as if the crash struck before the journal was written
    assert world.driver().unprepare_claims([ref]) == {UID: ""}
    assert world.cdi_files() == [f"{DRIVER}_claim_{other_uid}.json"]
    meta = sorted(p.name for p in (world.plugin_dir / "dra-device-metadata").iterdir())
    assert meta == [f"{other_uid}_gpu.json"]  # that claim's file stays, all of this one's went


def test_unprepare_works_after_claim_deleted(world: World) -> None:
    """Unprepare needs no API call: it works after the claim is gone from the apiserver."""
    ref = world.getter.add(_full_claim())
    drv = world.driver()
    assert drv.prepare_claims([ref])[UID].ok
    world.getter.claims.clear()
    world.getter.calls = 0
    assert world.driver().unprepare_claims([ref]) == {UID: ""}
    assert world.getter.calls == 0
    assert world.cdi_files() == []


def test_unprepare_frees_cpus_for_the_next_claim(world: World) -> None:
    """After unprepare, the CPUs of the claim can be pinned again."""
    big = world.getter.add(
        claim("u-big", results=[cpu_result("cpu", 8, share="22222222-0000-4000-8000-000000000001")])
    )
    other = world.getter.add(
        claim("u-other", results=[cpu_result("cpu", 1, share="22222222-0000-4000-8000-000000000002")])
    )
    drv = world.driver()
    assert drv.prepare_claims([big])["u-big"].ok
    blocked = drv.prepare_claims([other])["u-other"]
    assert not blocked.ok
    assert "u-other" in blocked.error
    assert drv.unprepare_claims([big]) == {"u-big": ""}
    assert drv.prepare_claims([other])["u-other"].ok


def test_status_writer_is_called_and_its_failures_ignored(world: World) -> None:
    """The status writer gets prepared devices and clears; its exceptions never fail a prepare."""
    calls: list[tuple[str, Any]] = []

    class RecordingStatus:
        def report_prepared(self, claim_json: Any, devices: Any) -> None:
            calls.append(("report", claim_json["metadata"]["uid"]))
            raise RuntimeError("apiserver said no")

        def clear(self, namespace: str, name: str, uid: str = "") -> None:
            calls.append(("clear", f"{namespace}/{name}/{uid}"))
            raise RuntimeError("apiserver said no")

    ref = world.getter.add(_full_claim())
    drv = world.driver(status=RecordingStatus())
    with capture_logs() as logs:
        assert drv.prepare_claims([ref])[UID].ok
        assert drv.unprepare_claims([ref]) == {UID: ""}
    assert calls == [("report", UID), ("clear", f"ml/train/{UID}")]
    failures = [(e["call"], e["claim_uid"]) for e in logs if e["event"] == "status writer failed"]
    assert failures == [("report_prepared", UID), ("clear", UID)]


def test_claim_gets_run_concurrently(world: World) -> None:
    """32 claims are fetched 16 at a time, not one after another: each GET waits for 15 others at
    a barrier, which GETs made in turn never pass."""
    workers = 16
    world.getter.rendezvous = threading.Barrier(workers)
    refs = [
        world.getter.add(claim(f"u-{i}", results=[result("nic", NIC0 if i == 0 else "nic-0000-b0-00-0")]))
        for i in range(2)
    ]
    refs += [world.getter.add(claim(f"u-x{i}", results=[])) for i in range(30)]
    out = world.driver(max_get_workers=workers).prepare_claims(refs)
    assert len(out) == 32
    assert all(r.ok for r in out.values()), [r.error for r in out.values() if r.error]
    assert world.getter.peak_in_flight == workers


def test_written_files_leave_no_temp_files(world: World) -> None:
    """Atomic writes leave only the final files in the CDI and journal directories."""
    ref = world.getter.add(_full_claim())
    world.driver().prepare_claims([ref])
    leftovers = list(Path(world.root).rglob("*.tmp"))
    assert leftovers == []
    assert (world.plugin_dir / "state" / "journal.log").exists()


def test_two_live_processes_share_the_journal(world: World) -> None:
    """Rolling update: two drivers alive at once see each other's claims and CPUs through the journal."""
    old, new = world.driver(), world.driver()
    assert old.prepared_claims() == new.prepared_claims() == []  # both have read the (empty) journal
    a = world.getter.add(
        claim("u-a", "a", results=[cpu_result("cpu", 4, share="44444444-0000-4000-8000-000000000001")])
    )
    b = world.getter.add(
        claim("u-b", "b", results=[cpu_result("cpu", 4, share="44444444-0000-4000-8000-000000000002")])
    )
    assert old.prepare_claims([a])["u-a"].ok
    assert new.prepare_claims([b])["u-b"].ok
    pins = {e.uid: e.pinning.cpus for e in new.prepared_claims() if e.pinning}
    assert set(pins) == {"u-a", "u-b"}
    assert not pins["u-a"] & pins["u-b"]
    assert new.unprepare_claims([a]) == {"u-a": ""}  # unprepared by the other process
    assert [e.uid for e in old.prepared_claims()] == ["u-b"]


def test_journal_written_once_per_call(world: World) -> None:
    """A prepare of many claims and devices saves the journal once (and the repeat not at all)."""
    from driver.state.journal import Journal

    saves: list[int] = []
    original = Journal.save

    def counting(self: Journal) -> None:
        saves.append(1)
        original(self)

    refs = [
        world.getter.add(
            claim(
                f"u-{i}",
                results=[cpu_result("cpu", 1, node=1, share=f"55555555-0000-4000-8000-00000000000{i}")],
            )
        )
        for i in range(5)
    ]
    refs.append(world.getter.add(_full_claim()))
    drv = world.driver()
    Journal.save = counting  # type: ignore[method-assign]
    try:
        assert all(r.ok for r in drv.prepare_claims(refs).values())
        assert len(saves) == 1
        assert all(r.ok for r in drv.prepare_claims(refs).values())
        assert len(saves) == 1
        drv.unprepare_claims(refs)
        assert len(saves) == 2
    finally:
        Journal.save = original  # type: ignore[method-assign]


def test_hook_pinning_adds_create_runtime_hook_to_cpu_devices(world: World) -> None:
    """With --pinning hook, each pinned cpu device carries the createRuntime hook with its cpuset."""
    from driver.pinning.hook import cdi_hook

    ref = world.getter.add(_full_claim())
    assert world.driver(cpu_hook=cdi_hook).prepare_claims([ref])[UID].ok
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_{UID}.json").read_text())
    by_name = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    cpu_edits = next(v for k, v in by_name.items() if CPU0 in k)
    (hook,) = cpu_edits["hooks"]
    assert hook["hookName"] == "createRuntime"
    cpus = _env(spec, CPU0)["NUMADRA_CPUS"]
    assert hook["args"][1:] == ["hook", "create-runtime", "--cpus", cpus, "--mems", "0"]
    assert "hooks" not in by_name[f"{UID}-{GPU0}"]
    assert spec["cdiVersion"] == "0.5.0"  # hooks need nothing newer than the UID's leading digit


def test_reconcile_removes_temp_files_of_interrupted_writes(world: World) -> None:
    """Temp files a crash left behind in the CDI, state and metadata dirs are removed at start."""
    ref = world.getter.add(_full_claim())
    world.driver().prepare_claims([ref])
    stale_cdi = world.cdi_dir / f".{DRIVER}_claim_{UID}.json.123.456.7.tmp"
    stale_state = world.plugin_dir / "state" / ".journal.log.123.456.8.tmp"
    stale_meta = world.plugin_dir / "dra-device-metadata" / f".{UID}_nic.json.1.2.3.tmp"
    foreign = world.cdi_dir / ".other-vendor.json.1.tmp"
    for path in (stale_cdi, stale_state, stale_meta, foreign):
        path.write_text("{")
    assert world.driver().reconcile() == 0
    assert not stale_cdi.exists()
    assert not stale_state.exists()
    assert not stale_meta.exists()
    assert stale_meta.with_name(f"{UID}_nic.json").exists()
    assert foreign.exists()  # not ours


def test_prepare_makes_metadata_and_state_dirs_with_their_modes(world: World) -> None:
    """Explicit modes whatever the umask (000 here; before, the claim dir was 0777 under it):
    the metadata dir 0755, state/ 0700, specs and metadata files 0644, the journal 0600."""
    import os

    ref = world.getter.add(_full_claim())
    old = os.umask(0)
    try:
        assert world.driver().prepare_claims([ref])[UID].ok
    finally:
        os.umask(old)
    meta_root = world.plugin_dir / "dra-device-metadata"
    assert meta_root.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in meta_root.iterdir()) == [f"{UID}_{r}.json" for r in ("cpu", "gpu", "nic")]
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in meta_root.iterdir())
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in world.cdi_dir.iterdir())
    assert (world.plugin_dir / "state").stat().st_mode & 0o777 == 0o700
    assert (world.plugin_dir / "state" / "journal.log").stat().st_mode & 0o777 == 0o600


def test_claim_recreated_under_the_same_name_is_prepared_beside_the_old_one(world: World) -> None:
    """Metadata files are keyed by UID: a claim deleted and re-created under its old name can
    reach this node while the old one is still prepared (its pod still terminating). Both are
    prepared, each with its own files, and the old one's unprepare leaves the new one's alone."""
    old = world.getter.add(_full_claim())
    drv = world.driver()
    assert drv.prepare_claims([old])[UID].ok
    new_uid = UID.replace("0001", "0009")
    new = world.getter.add(claim(new_uid, "train", "ml", results=[result("gpu", GPU1)]))
    assert drv.prepare_claims([new])[new_uid].ok
    assert sorted(e.uid for e in drv.prepared_claims()) == [UID, new_uid]
    host = world.plugin_dir / "dra-device-metadata" / f"{new_uid}_gpu.json"
    assert json.loads(host.read_text().splitlines()[0])["metadata"]["uid"] == new_uid

    assert drv.unprepare_claims([old]) == {UID: ""}
    assert world.driver().unprepare_claims([old]) == {UID: ""}  # a late repeat, too
    assert host.exists()
    assert world.cdi_files() == [f"{DRIVER}_claim_{new_uid}.json"]
    assert sorted(p.name for p in host.parent.iterdir()) == [host.name]


def test_unprepare_without_journal_entry_removes_that_claims_metadata_dir(world: World) -> None:
    """With the journal lost, unprepare still removes the claim's metadata files (by UID)."""
    ref = world.getter.add(_full_claim())
    assert world.driver().prepare_claims([ref])[UID].ok
    journal_path(world.plugin_dir).unlink()
    assert world.driver().unprepare_claims([ref]) == {UID: ""}
    assert list((world.plugin_dir / "dra-device-metadata").iterdir()) == []
    assert world.cdi_files() == []


def _admin(res: dict[str, Any]) -> dict[str, Any]:
    return {**res, "adminAccess": True}


def test_admin_access_claim_shares_devices_with_workload_claims(world: World) -> None:
    """``adminAccess`` (DRAAdminAccess, beta and on since 1.34): the scheduler allocates a device
    to a monitoring claim beside the claim using it, so neither may refuse the other here."""
    drv = world.driver()
    work = world.getter.add(claim("u-work", results=[result("gpu", GPU0)]))
    assert drv.prepare_claims([work])["u-work"].ok
    monitor = world.getter.add(
        claim("u-mon", "monitor", results=[_admin(result("gpu", GPU0)), _admin(result("cpu", "cpu-numa0"))])
    )
    prepared = drv.prepare_claims([monitor])["u-mon"]
    assert prepared.ok, prepared.error
    assert [d.device_name for d in prepared.devices] == [GPU0, "cpu-numa0"]
    (entry,) = [e for e in drv.prepared_claims() if e.uid == "u-mon"]
    assert entry.admin_devices == (GPU0, "cpu-numa0")
    assert entry.pinning is None  # admin access consumes no CPUs

    # the monitoring claim blocks no workload: a new one gets the GPU once the first is gone
    assert drv.unprepare_claims([work]) == {"u-work": ""}
    again = world.getter.add(claim("u-work2", results=[result("gpu", GPU0)]))
    assert world.driver().prepare_claims([again])["u-work2"].ok  # also after a restart (journal)
    # while two workload claims of one GPU still refuse each other
    other = world.getter.add(claim("u-work3", results=[result("gpu", GPU0)]))
    refused = drv.prepare_claims([other])["u-work3"]
    assert "already prepared for claim default/claim-u-work2" in refused.error


def test_admin_access_must_be_a_boolean(world: World) -> None:
    """A malformed adminAccess is that claim's error, naming the request and device."""
    ref = world.getter.add(claim("u-bad", results=[{**result("gpu", GPU0), "adminAccess": "yes"}]))
    error = world.driver().prepare_claims([ref])["u-bad"].error
    assert f"request 'gpu': device '{GPU0}': adminAccess must be a boolean, got 'yes'" in error


def test_longest_names_still_get_their_metadata(world: World) -> None:
    """A valid 63-character namespace and 253-character name (317 bytes together, more than a
    file name may have) get their metadata: file names carry the UID and request, not the names."""
    name = "a" * 200 + "." + "b" * 52
    namespace = "n" * 63
    ref = world.getter.add(claim("u-long", name, namespace, results=[result("gpu", GPU0)]))
    prepared = world.driver().prepare_claims([ref])["u-long"]
    assert prepared.ok, prepared.error
    host = world.plugin_dir / "dra-device-metadata" / "u-long_gpu.json"
    first = json.loads(host.read_text().splitlines()[0])
    assert (first["metadata"]["namespace"], first["metadata"]["name"]) == (namespace, name)
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_u-long.json").read_text())
    (mount,) = spec["devices"][0]["containerEdits"]["mounts"]
    assert mount["containerPath"].endswith(f"/resourceclaims/{name}/gpu/{DRIVER}-metadata.json")
    assert world.driver().unprepare_claims([ref]) == {"u-long": ""}
    assert world.cdi_files() == []
    assert not host.exists()


class _CountingHostEdits(HostEdits):
    """The host's edits, recording which GPUs each look ahead at the toolkit's specs was for."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.read_for: list[list[str]] = []

    def read_ahead(self, gpus: Sequence[Gpu]) -> None:
        self.read_for.append([g.name for g in gpus])
        super().read_ahead(gpus)


def test_only_a_call_with_a_gpu_claim_reads_the_cdi_dirs_ahead(world: World, tmp_path: Path) -> None:
    """A NIC-and-CPU claim on a node with NVIDIA GPUs never looks at the toolkit's specs, so its
    prepare does not pay for that look ahead of the locks; a claim with a GPU still gets it, for
    its own GPU (another driver's result naming one of our GPUs does not count)."""
    host = _host_edits(world, tmp_path).host_root
    edits = _CountingHostEdits(
        host_root=host, driver_root="/", cdi_dir=str(world.cdi_dir), claim_kind=f"{DRIVER}/claim"
    )
    driver = world.driver(host_edits=edits)
    nic_only = world.getter.add(
        claim(
            "5f2c8a9e-0d1b-4c3a-9e8f-000000000011",
            "nic",
            "ml",
            results=[result("nic", NIC0), cpu_result("cpu", 2), result("x", GPU1, driver="other.dev")],
        )
    )
    with_gpu = world.getter.add(
        claim("5f2c8a9e-0d1b-4c3a-9e8f-000000000012", "gpu", "ml", results=[result("gpu", GPU0)])
    )

    out = driver.prepare_claims([nic_only])
    assert not out[nic_only.uid].error
    assert edits.read_for == []

    out = driver.prepare_claims([with_gpu])
    assert not out[with_gpu.uid].error
    assert edits.read_for == [[GPU0]]
