"""A claim's GPUs get the driver's user space and the groups that open their nodes, read from a host tree.

Real files throughout: a generated host tree with two NVIDIA GPUs (UUIDs in the driver's
information files) and an AMD GPU, an NVIDIA driver root in it, real character devices for the
nodes the toolkit's spec names, and the real ClaimsDriver writing CDI specs. The toolkit's spec is
a stand-in of ``nvidia-ctk cdi generate``'s output (harness/nvidia.py).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from driver.claims.hostedits import HostEdits
from driver.inventory.discovery import discover
from driver.inventory.nvidia_source import UserspaceSource
from driver.kube.types import JsonObject
from driver.kubelet.serialize import SerializeLock
from harness.hostspec import GpuSpec, Topology
from harness.hosttree import write_host_tree
from harness.nvidia import (
    NvidiaDriver,
    ToolkitGpu,
    make_char_devices,
    toolkit_spec,
    write_nvidia_driver,
    write_toolkit_spec,
)
from tests.integration.claims._world import DRIVER, ServedDriver, World, claim, result

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="device nodes and groups need root")

UUIDS = ("GPU-0a0a0a0a-1111-2222-3333-444444444444", "GPU-0b0b0b0b-5555-6666-7777-888888888888")
NV0, NV1, AMD = "gpu-0000-17-00-0", "gpu-0000-18-00-0", "gpu-0000-c1-00-0"
V = "550.54.15"
LIB = "/usr/lib/x86_64-linux-gnu"
RENDER_GID = 993
TOPOLOGY = Topology(
    name="gpus",
    gpus=(
        GpuSpec(bus_id="0000:17:00.0", nvidia_minor=0, nvidia_uuid=UUIDS[0], product_name="NVIDIA L4"),
        GpuSpec(bus_id="0000:18:00.0", nvidia_minor=1, nvidia_uuid=UUIDS[1], product_name="NVIDIA L4"),
        GpuSpec(
            bus_id="0000:c1:00.0",
            vendor_id=0x1002,
            device_id=0x74A1,
            pci_class=0x038000,
            driver="amdgpu",
            drm=("card1", "renderD128"),
        ),
    ),
)
NVIDIA_NODES = ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


class Recorder:
    """The warning sink: what numadra would turn into an Event and a metric."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, UserspaceSource, tuple[str, ...]]] = []

    def warn(self, claim: JsonObject, source: UserspaceSource, warnings: Sequence[str]) -> None:
        self.calls.append((claim["metadata"]["uid"], source, tuple(warnings)))


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = write_host_tree(tmp_path / "host", TOPOLOGY)
    write_nvidia_driver(root, NvidiaDriver(version=V))
    make_char_devices(root, NVIDIA_NODES)  # 0666 like the NVIDIA driver's nodes
    make_char_devices(root, ("/dev/dri/renderD128", "/dev/kfd", "/dev/dri/card1"), major=226, minor=128)
    for node in ("dev/dri/renderD128", "dev/kfd"):
        os.chown(root / node, 0, RENDER_GID)
        (root / node).chmod(0o660)
    hook = root / "usr/bin/nvidia-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    return root


def _world(tmp_path: Path, host: Path, recorder: Recorder, *, groups: bool = True) -> tuple[World, Any]:
    world = World(tmp_path / "node")
    world.inventory = discover(host, use_nvml=False)
    world.cdi_dir.mkdir(parents=True)
    edits = HostEdits(
        host_root=str(host),
        driver_root="/",
        cdi_dir=str(world.cdi_dir),
        claim_kind=f"{DRIVER}/claim",
        device_groups=groups,
    )
    return world, world.driver(planner=False, host_edits=edits, warnings=recorder)


def _prepare(
    world: World, served: Any, uid: str, *devices: str
) -> tuple[list[tuple[str, ...]], dict[str, Any]]:
    ref = world.getter.add(claim(uid, results=[result("gpus", d) for d in devices]))
    out = served.prepare_claims([ref])[uid]
    assert out.ok, out.error
    spec = json.loads((world.cdi_dir / f"{DRIVER}_claim_{uid}.json").read_text())
    return [d.cdi_device_ids for d in out.devices], spec


def _edits(spec: dict[str, Any], device: str) -> dict[str, Any]:
    return next(d["containerEdits"] for d in spec["devices"] if d["name"].endswith(device))


def _mounts(spec: dict[str, Any], device: str) -> dict[str, str]:
    return {m["containerPath"]: m["hostPath"] for m in _edits(spec, device).get("mounts", [])}


def test_without_the_toolkit_the_driver_roots_files_are_mounted(tmp_path: Path, host: Path) -> None:
    """A plain node (runc, no toolkit): the spec mounts libcuda under its SONAME, nvidia-smi, firmware."""
    recorder = Recorder()
    world, served = _world(tmp_path, host, recorder)
    ids, spec = _prepare(world, served, "00000000-0000-4000-8000-000000000001", NV0, NV1)
    assert ids == [
        (f"{DRIVER}/claim=00000000-0000-4000-8000-000000000001-{NV0}",),
        (f"{DRIVER}/claim=00000000-0000-4000-8000-000000000001-{NV1}",),
    ]
    for gpu in (NV0, NV1):
        mounts = _mounts(spec, gpu)
        assert mounts[f"{LIB}/libcuda.so.1"] == f"{LIB}/libcuda.so.{V}"
        assert mounts[f"{LIB}/libnvidia-ml.so.1"] == f"{LIB}/libnvidia-ml.so.{V}"
        assert mounts["/usr/bin/nvidia-smi"] == "/usr/bin/nvidia-smi"
        assert (
            mounts[f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin"] == f"/usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin"
        )
    driver_files = [m for m in _edits(spec, NV0)["mounts"] if "kubernetes.io" not in m["containerPath"]]
    assert all(m["options"] == ["ro", "nosuid", "nodev", "rbind", "rprivate"] for m in driver_files)
    env = dict(e.split("=", 1) for e in _edits(spec, NV0)["env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(UUIDS)
    assert recorder.calls == []


def test_with_the_toolkit_the_claim_returns_its_device_by_uuid(tmp_path: Path, host: Path) -> None:
    """The toolkit's spec serves: its device for exactly the claim's GPU, first; numadra's own stays."""
    recorder = Recorder()
    world, served = _world(tmp_path, host, recorder)
    gpus = [ToolkitGpu(0, UUIDS[0], 0), ToolkitGpu(1, UUIDS[1], 1)]
    write_toolkit_spec(world.cdi_dir / "nvidia.yaml", toolkit_spec(gpus, NvidiaDriver(version=V)))
    uid = "00000000-0000-4000-8000-000000000002"
    ids, spec = _prepare(world, served, uid, NV1)
    assert ids == [(f"nvidia.com/gpu={UUIDS[1]}", f"{DRIVER}/claim={uid}-{NV1}")]
    edits = _edits(spec, NV1)
    assert "mounts" not in edits or all("libcuda" not in m["hostPath"] for m in edits["mounts"])
    assert [n["path"] for n in edits["deviceNodes"]][:2] == ["/dev/nvidia1", "/dev/nvidiactl"]
    assert dict(e.split("=", 1) for e in edits["env"])["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
    assert recorder.calls == []


def test_a_lying_toolkit_spec_falls_back_and_warns_once(tmp_path: Path, host: Path) -> None:
    """A toolkit spec whose mount source is gone: driver-root files instead, one warning, also on repeat."""
    recorder = Recorder()
    world, served = _world(tmp_path, host, recorder)
    spec_obj = toolkit_spec([ToolkitGpu(0, UUIDS[0], 0)], NvidiaDriver(version=V))
    spec_obj["containerEdits"]["mounts"][0]["hostPath"] = f"{LIB}/libcuda.so.999.1.1"
    write_toolkit_spec(world.cdi_dir / "nvidia.yaml", spec_obj)
    uid = "00000000-0000-4000-8000-000000000003"
    with capture_logs() as logs:
        ids, spec = _prepare(world, served, uid, NV0)
    assert ids == [(f"{DRIVER}/claim={uid}-{NV0}",)]
    assert _mounts(spec, NV0)[f"{LIB}/libcuda.so.1"] == f"{LIB}/libcuda.so.{V}"
    assert len(recorder.calls) == 1
    got_uid, source, warnings = recorder.calls[0]
    assert (got_uid, source) == (uid, UserspaceSource.DRIVER_ROOT)
    assert f"mount source {LIB}/libcuda.so.999.1.1 does not exist" in warnings[0]
    logged = [e for e in logs if e["event"] == "nvidia user space"]
    assert logged[0]["claim_uid"] == uid
    assert logged[0]["log_level"] == "warning"
    # the kubelet asks again (a restart, a retry): same answer, no second warning
    again = served.prepare_claims([world.getter.add(world.getter.claims[("default", f"claim-{uid}")])])
    assert [d.cdi_device_ids for d in again[uid].devices] == ids
    assert len(recorder.calls) == 1
    assert served.userspace_warnings == {"driver_root": 1}  # numadra_nvidia_userspace_warnings_total


def test_no_user_space_anywhere_is_prepared_but_never_silent(tmp_path: Path, host: Path) -> None:
    """No toolkit, no libraries in the driver root: the GPU is still given, with a warning naming both."""
    for path in (host / LIB.strip("/")).glob("libcuda*"):
        path.unlink()
    recorder = Recorder()
    world, served = _world(tmp_path, host, recorder)
    uid = "00000000-0000-4000-8000-000000000004"
    _, spec = _prepare(world, served, uid, NV0)
    assert [p for p in _mounts(spec, NV0) if "kubernetes.io" not in p] == []
    ((got_uid, source, warnings),) = recorder.calls
    assert (got_uid, source) == (uid, UserspaceSource.NONE)
    assert "no NVIDIA toolkit spec" in warnings[0]
    assert f"no libcuda.so.{V}" in warnings[1]


def test_render_node_of_a_root_only_group_gives_that_group(tmp_path: Path, host: Path) -> None:
    """The AMD GPU's 0660 root:993 nodes: GID 993 in additionalGids (cdiVersion 0.7.0); 0666 nodes: none."""
    world, served = _world(tmp_path, host, Recorder())
    uid = "00000000-0000-4000-8000-000000000005"
    _, spec = _prepare(world, served, uid, AMD, NV0)
    assert _edits(spec, AMD)["additionalGids"] == [RENDER_GID]
    assert "additionalGids" not in _edits(spec, NV0)
    assert spec["cdiVersion"] == "0.7.0"
    _, plain = _prepare(world, served, "00000000-0000-4000-8000-000000000006", NV1)
    assert plain["cdiVersion"] == "0.5.0"  # device names start with the claim UID's digit


def test_device_groups_off_keeps_the_spec_at_its_old_version(tmp_path: Path, host: Path) -> None:
    """--device-groups=false: no additionalGids, so a runtime with an older CDI library reads the spec."""
    world, served = _world(tmp_path, host, Recorder(), groups=False)
    _, spec = _prepare(world, served, "00000000-0000-4000-8000-000000000009", AMD)
    assert "additionalGids" not in _edits(spec, AMD)
    assert spec["cdiVersion"] == "0.5.0"


def test_a_repeat_prepare_keeps_its_answer_when_the_toolkit_spec_appears(tmp_path: Path, host: Path) -> None:
    """Prepare is idempotent: the toolkit's spec generated after the first prepare changes nothing
    for that claim (same CDI IDs, same spec); the next claim gets the toolkit's device."""
    world, served = _world(tmp_path, host, Recorder())
    uid = "00000000-0000-4000-8000-000000000007"
    ids, spec = _prepare(world, served, uid, NV0)
    gpus = [ToolkitGpu(0, UUIDS[0], 0), ToolkitGpu(1, UUIDS[1], 1)]
    write_toolkit_spec(world.cdi_dir / "nvidia.yaml", toolkit_spec(gpus, NvidiaDriver(version=V)))
    again = served.prepare_claims([world.getter.add(world.getter.claims[("default", f"claim-{uid}")])])
    assert [d.cdi_device_ids for d in again[uid].devices] == ids
    assert json.loads((world.cdi_dir / f"{DRIVER}_claim_{uid}.json").read_text()) == spec
    served.unprepare_claims([world.getter.add(world.getter.claims[("default", f"claim-{uid}")])])
    next_ids, _ = _prepare(world, served, "00000000-0000-4000-8000-000000000008", NV0)
    assert next_ids[0][0] == f"nvidia.com/gpu={UUIDS[0]}"


# -- host paths planted by a user of the node ---------------------------------------------------
# The attacker, a user without root, plants before the prepare: /tmp/nvidia-mps as a link to /etc
# (without the check, the spec mounted the host's /etc read-write into the container), or a GPU's
# device node given to them. Each is left out, the claim is still prepared, and the warning (the
# claim's Event) names the path and why (driver/untrusted/hostpaths.py).

MPS = "/tmp/nvidia-mps"
USER = 1000  # a user of the node, not root
UID = "00000000-0000-4000-8000-0000000000a1"


def _spec_after_prepare(tmp_path: Path, host: Path, recorder: Recorder) -> dict[str, Any]:
    world, served = _world(tmp_path, host, recorder)
    ref = world.getter.add(_claim())
    out = served.prepare_claims([ref])[UID]
    assert out.ok, out.error
    return json.loads((world.cdi_dir / f"{DRIVER}_claim_{UID}.json").read_text())


def _claim() -> dict[str, Any]:
    return claim(UID, results=[result("gpus", NV0)])


def _plant_tmp(host: Path) -> Path:
    """The host's sticky, world-writable /tmp (and an /etc to point at); returns /tmp/nvidia-mps."""
    (host / "etc").mkdir(exist_ok=True)
    tmp = host / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)
    return tmp / "nvidia-mps"


def test_mps_dir_planted_as_a_link_to_etc_is_not_in_the_spec(tmp_path: Path, host: Path) -> None:
    """The link's owner is the attacker; the spec neither mounts /tmp/nvidia-mps nor /etc."""
    link = _plant_tmp(host)
    link.symlink_to("/etc")
    os.lchown(link, USER, USER)
    recorder = Recorder()
    spec = _spec_after_prepare(tmp_path, host, recorder)
    mounts = _edits(spec, NV0)["mounts"]
    assert [m for m in mounts if m["containerPath"] == MPS or m["hostPath"].startswith("/etc")] == []
    assert any(m["containerPath"].endswith("libcuda.so.1") for m in mounts)  # the rest is there
    (warnings,) = [w for _, _, w in recorder.calls]
    assert f"driver root file not mounted: {MPS} (ipc): {MPS} is owned by uid {USER}, not root" in warnings


def test_mps_dir_of_the_root_daemon_is_in_the_spec_read_write(tmp_path: Path, host: Path) -> None:
    """What a real MPS daemon makes (root's directory in the sticky /tmp) is mounted, no warning."""
    _plant_tmp(host).mkdir()
    recorder = Recorder()
    spec = _spec_after_prepare(tmp_path, host, recorder)
    (mps,) = [m for m in _edits(spec, NV0)["mounts"] if m["containerPath"] == MPS]
    assert mps["hostPath"] == MPS
    assert "ro" not in mps["options"]
    assert recorder.calls == []


def test_a_device_node_given_to_a_user_is_not_in_the_spec(tmp_path: Path, host: Path) -> None:
    """/dev/nvidia0 owned by a user (who could replace it): the node is left out, with a warning."""
    os.chown(host / "dev/nvidia0", USER, USER)
    recorder = Recorder()
    spec = _spec_after_prepare(tmp_path, host, recorder)
    assert "/dev/nvidia0" not in [n["path"] for n in _edits(spec, NV0).get("deviceNodes", [])]
    (warnings,) = [w for _, _, w in recorder.calls]
    why = f"device node /dev/nvidia0 of {NV0} not given to containers: /dev/nvidia0 is owned by uid {USER}"
    assert any(w.startswith(why) for w in warnings)


def test_a_reboot_checks_the_journaled_spec_again(tmp_path: Path, host: Path) -> None:
    """Prepared while root's MPS directory was there; after a reboot a user plants the link first.

    The start re-creates the claim's spec from the journal (``/var/run/cdi`` is a tmpfs): the
    host paths are checked again, so the re-created spec leaves the planted link out.
    """
    mps = _plant_tmp(host)
    mps.mkdir()
    spec = _spec_after_prepare(tmp_path, host, Recorder())
    assert MPS in [m["containerPath"] for m in _edits(spec, NV0)["mounts"]]
    world = World(tmp_path / "node")  # the same directories: a restart
    spec_path = world.cdi_dir / f"{DRIVER}_claim_{UID}.json"
    spec_path.unlink()  # the reboot empties the CDI dir and /tmp
    mps.rmdir()
    mps.symlink_to("/etc")
    os.lchown(mps, USER, USER)
    edits = HostEdits(
        host_root=str(host), driver_root="/", cdi_dir=str(world.cdi_dir), claim_kind=f"{DRIVER}/claim"
    )
    with capture_logs() as logs:
        assert world.driver(planner=False, host_edits=edits).inner.reconcile() == 1  # the spec
    mounts = _edits(json.loads(spec_path.read_text()), NV0)["mounts"]
    assert [m for m in mounts if m["containerPath"] == MPS or m["hostPath"].startswith("/etc")] == []
    assert any(m["containerPath"].endswith("libcuda.so.1") for m in mounts)
    (logged,) = [e for e in logs if e["event"] == "host paths left out of a re-created CDI spec"]
    assert logged["refused"] == [f"{MPS}: {MPS} is owned by uid {USER}, not root"]


#: specs of about 100 bytes another CDI producer could write: a number in env, as a device's name,
#: as a common mount's hostPath (each used to fail every NVIDIA claim with an internal error)
BAD_SPECS = {
    "env-number": (
        {"kind": "nvidia.com/gpu", "devices": [{"name": UUIDS[0], "containerEdits": {"env": [5]}}]},
        "devices[0].containerEdits.env[0]: must be a string, got a number",
    ),
    "name-number": (
        {"kind": "nvidia.com/gpu", "devices": [{"name": 5, "containerEdits": {}}]},
        "devices[0].name: must be a string, got a number",
    ),
    "hostpath-number": (
        {
            "kind": "nvidia.com/gpu",
            "devices": [{"name": UUIDS[0], "containerEdits": {}}],
            "containerEdits": {"mounts": [{"hostPath": 5, "containerPath": "/x"}]},
        },
        "containerEdits.mounts[0].hostPath: must be a string, got a number",
    ),
}


def _alias_bomb() -> bytes:
    """129 KiB of YAML: one device of 1,000 mounts, aliased 3,000 times (hundreds of MiB expanded)."""
    lib = "/usr/lib/x86_64-linux-gnu/libnvidia"
    lines = ["kind: nvidia.com/gpu", "x-device: &gpu", "  name: all", "  containerEdits:", "    mounts:"]
    lines += [
        f"    - {{hostPath: {lib}-{k:05d}.so.{V}, containerPath: /usr/lib/nvidia/{k:05d}}}"
        for k in range(1000)
    ]
    lines.append("devices: [" + ", ".join(["*gpu"] * 3000) + "]")
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_a_spec_of_wrong_types_is_skipped_and_the_claim_prepared(
    tmp_path: Path, host: Path, case: str
) -> None:
    """The only toolkit-kind spec has a field of the wrong type: the claim gets the driver root's
    files, and the warning names the file and the field (no internal error)."""
    recorder = Recorder()
    world, served = _world(tmp_path, host, recorder)
    document, field = BAD_SPECS[case]
    bad = world.cdi_dir / "other-vendor.json"
    bad.write_text(json.dumps(document, separators=(",", ":")))
    uid = "00000000-0000-4000-8000-000000000010"
    ids, spec = _prepare(world, served, uid, NV0)
    assert ids == [(f"{DRIVER}/claim={uid}-{NV0}",)]
    assert _mounts(spec, NV0)[f"{LIB}/libcuda.so.1"] == f"{LIB}/libcuda.so.{V}"
    ((_, source, warnings),) = recorder.calls
    assert source is UserspaceSource.DRIVER_ROOT
    assert f"toolkit spec not used: {bad}: {field}" in warnings


@pytest.mark.parametrize("case", [*sorted(BAD_SPECS), "alias-bomb"])
def test_a_bad_spec_beside_the_toolkits_leaves_the_toolkit_serving(
    tmp_path: Path, host: Path, case: str
) -> None:
    """A bad spec next to the toolkit's good one: skipped with a logged warning naming it; the claim
    gets the toolkit's device. The alias bomb is refused as YAML, before anything is built."""
    recorder = Recorder()
    world, served = _world(tmp_path, host, recorder)
    gpus = [ToolkitGpu(0, UUIDS[0], 0), ToolkitGpu(1, UUIDS[1], 1)]
    write_toolkit_spec(world.cdi_dir / "nvidia.yaml", toolkit_spec(gpus, NvidiaDriver(version=V)))
    if case == "alias-bomb":
        bad, field = world.cdi_dir / "other-vendor.yaml", "defines the anchor &gpu"
        bad.write_bytes(_alias_bomb())
    else:
        bad, field = world.cdi_dir / "other-vendor.json", BAD_SPECS[case][1]
        bad.write_text(json.dumps(BAD_SPECS[case][0]))
    uid = "00000000-0000-4000-8000-000000000011"
    with capture_logs() as logs:
        ids, _ = _prepare(world, served, uid, NV0)
    assert ids == [(f"nvidia.com/gpu={UUIDS[0]}", f"{DRIVER}/claim={uid}-{NV0}")]
    assert recorder.calls == []
    skipped = [e for e in logs if e["event"] == "CDI spec skipped"]
    assert [(e["path"], e["log_level"]) for e in skipped] == [(str(bad), "warning")]
    assert field in skipped[0]["reason"]


def test_a_changed_spec_is_parsed_before_the_claims_lock_and_once(tmp_path: Path, host: Path) -> None:
    """Another call holds the cross-process lock: the waiting prepare has already parsed the new
    spec (its warning is logged) before it gets the lock, and the lock's holder never parses it
    again (one warning for the file's version, however many prepares look)."""
    recorder = Recorder()
    world, served = _world(tmp_path, host, recorder)
    lock = SerializeLock(world.plugin_dir / "serialize.lock")
    world.plugin_dir.mkdir(parents=True, exist_ok=True)
    lock.open()
    locked = ServedDriver(served.inner, served.fetcher, lock.hold)
    bad = world.cdi_dir / "other-vendor.json"
    bad.write_text(json.dumps(BAD_SPECS["name-number"][0]))
    uid = "00000000-0000-4000-8000-000000000012"
    ref = world.getter.add(claim(uid, results=[result("gpus", NV0)]))
    got: dict[str, Any] = {}
    with capture_logs() as logs:
        with lock.hold():  # another prepare holds the lock
            call = threading.Thread(target=lambda: got.update(locked.prepare_claims([ref])))
            call.start()
            deadline = time.monotonic() + 30
            while not any(e["event"] == "CDI spec skipped" for e in logs) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert any(e["event"] == "CDI spec skipped" for e in logs), "not parsed before the lock"
            assert call.is_alive()  # still waiting for the lock: the parse came first
        call.join(30)
        assert got[uid].ok, got[uid].error
        again = world.getter.add(claim("00000000-0000-4000-8000-000000000013", results=[result("gpus", NV1)]))
        assert locked.prepare_claims([again])[again.uid].ok
    skipped = [e for e in logs if e["event"] == "CDI spec skipped"]
    assert [e["path"] for e in skipped] == [str(bad)]
    assert [source for _, source, _ in recorder.calls] == [UserspaceSource.DRIVER_ROOT] * 2
    lock.close()
