"""The toolkit's CDI spec: found in the CDI dirs, read safely, and refused when it lies about the host."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from driver.inventory.discovery import discover
from driver.inventory.model import Gpu
from driver.inventory.nvidia_source import UserspaceSource, choose_source
from driver.inventory.nvidia_toolkit import MAX_SPEC_BYTES, ToolkitSpecFinder
from driver.inventory.nvidia_userspace import discover_driver_userspace
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

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="character devices need root (mknod)")

UUIDS = ("GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000")
DRIVER = NvidiaDriver()
GPUS = [ToolkitGpu(0, UUIDS[0], 0), ToolkitGpu(1, UUIDS[1], 1)]
NODES = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]

TOPOLOGY = Topology(
    name="two-nvidia",
    gpus=tuple(
        GpuSpec(
            bus_id=f"0000:{17 + k:02x}:00.0", nvidia_minor=k, nvidia_uuid=UUIDS[k], product_name="NVIDIA L4"
        )
        for k in range(2)
    ),
)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host tree with two NVIDIA GPUs, their driver, real character devices and the hook binary."""
    root = write_host_tree(tmp_path / "host", TOPOLOGY)
    write_nvidia_driver(root, DRIVER, driver_root="/")
    make_char_devices(root, NODES)
    hook = root / "usr/bin/nvidia-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    return root


def _finder(host: Path, cdi_dir: Path) -> ToolkitSpecFinder:
    return ToolkitSpecFinder(
        str(host), [str(host / "etc/cdi"), str(cdi_dir)], skip_prefix="numadra.dev_claim_"
    )


def _gpus(host: Path) -> list[Gpu]:
    return list(discover(host, use_nvml=False).gpus)


def test_devices_by_uuid_from_a_yaml_spec(host: Path, tmp_path: Path) -> None:
    """The toolkit's YAML in the CDI dir serves every GPU by its UUID."""
    cdi = tmp_path / "cdi"
    write_toolkit_spec(cdi / "nvidia.yaml", toolkit_spec(GPUS, DRIVER))
    specs = _finder(host, cdi).find()
    assert specs.files == (str(cdi / "nvidia.yaml"),)
    assert specs.check(UUIDS[0]) == ""
    assert specs.devices[UUIDS[1]].cdi_id == f"nvidia.com/gpu={UUIDS[1]}"
    choice = choose_source(_gpus(host), specs, discover_driver_userspace(str(host)))
    assert choice.source is UserspaceSource.TOOLKIT
    assert sorted(choice.toolkit_ids.values()) == sorted(f"nvidia.com/gpu={u}" for u in UUIDS)
    assert choice.warnings == ()


def test_json_spec_in_the_static_dir(host: Path, tmp_path: Path) -> None:
    """A JSON spec in the host's /etc/cdi counts too."""
    static = host / "etc/cdi"
    static.mkdir(parents=True)
    (static / "nvidia.json").write_text(json.dumps(toolkit_spec(GPUS, DRIVER)))
    assert _finder(host, tmp_path / "cdi").find().check(UUIDS[1]) == ""


@pytest.mark.parametrize(
    ("break_it", "reason"),
    [
        pytest.param(
            lambda spec: spec["containerEdits"]["mounts"].append(
                {"hostPath": "/usr/lib/x86_64-linux-gnu/libgone.so.1", "containerPath": "/x"}
            ),
            "mount source /usr/lib/x86_64-linux-gnu/libgone.so.1 does not exist",
            id="missing-mount-source",
        ),
        pytest.param(
            lambda spec: spec["containerEdits"]["deviceNodes"].append({"path": "/dev/nvidia-caps"}),
            "device node /dev/nvidia-caps does not exist",
            id="missing-device-node",
        ),
        pytest.param(
            lambda spec: spec["containerEdits"]["deviceNodes"].append({"path": "/usr/bin/nvidia-smi"}),
            "device node /usr/bin/nvidia-smi is not a character device",
            id="node-not-a-char-device",
        ),
        pytest.param(
            lambda spec: spec["containerEdits"]["hooks"][0].update(path="/usr/bin/nvidia-smi-gone"),
            "hook /usr/bin/nvidia-smi-gone does not exist",
            id="missing-hook",
        ),
        pytest.param(
            lambda spec: spec["containerEdits"]["hooks"][0].update(
                path="/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
            ),
            "is not an executable file",
            id="hook-not-executable",
        ),
    ],
)
def test_a_spec_that_lies_about_the_host_is_refused(
    host: Path, tmp_path: Path, break_it: object, reason: str
) -> None:
    """A device the runtime could not apply falls back to the driver root, and the reason is given."""
    spec = toolkit_spec(GPUS, DRIVER)
    assert callable(break_it)
    break_it(spec)
    write_toolkit_spec(tmp_path / "cdi/nvidia.yaml", spec)
    specs = _finder(host, tmp_path / "cdi").find()
    assert reason in specs.check(UUIDS[0])
    choice = choose_source(_gpus(host), specs, discover_driver_userspace(str(host)))
    assert choice.source is UserspaceSource.DRIVER_ROOT
    assert len(choice.warnings) == 1
    assert "toolkit spec not used" in choice.warnings[0]
    assert reason in choice.warnings[0]


def test_a_spec_without_the_gpu_falls_back_naming_it(host: Path, tmp_path: Path) -> None:
    """A spec generated before a GPU was added names no such device: driver root, with the UUID."""
    write_toolkit_spec(tmp_path / "cdi/nvidia.yaml", toolkit_spec(GPUS[:1], DRIVER))
    specs = _finder(host, tmp_path / "cdi").find()
    choice = choose_source(_gpus(host), specs, discover_driver_userspace(str(host)))
    assert choice.source is UserspaceSource.DRIVER_ROOT
    assert UUIDS[1] in choice.warnings[0]
    # the GPU it does name alone is served
    assert choose_source(_gpus(host)[:1], specs, discover_driver_userspace(str(host))).source is (
        UserspaceSource.TOOLKIT
    )


def test_a_gpu_without_uuid_cannot_be_matched(host: Path, tmp_path: Path) -> None:
    """Matching is by UUID only: a GPU whose UUID nobody reported is not guessed by index."""
    write_toolkit_spec(tmp_path / "cdi/nvidia.yaml", toolkit_spec(GPUS, DRIVER))
    gpus = [dataclasses.replace(g, uuid=None) for g in _gpus(host)]
    choice = choose_source(gpus, _finder(host, tmp_path / "cdi").find(), discover_driver_userspace(str(host)))
    assert choice.source is UserspaceSource.DRIVER_ROOT
    assert "no known UUID" in choice.warnings[0]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(b"kind: nvidia.com/gpu\ndevices: [\n", "is not YAML", id="bad-yaml"),
        pytest.param(
            b"kind: nvidia.com/gpu\ndevices: 3\n",
            "devices: must be a list, got a number",
            id="devices-not-list",
        ),
        pytest.param(
            b"kind: nvidia.com/gpu\ndevices:\n- containerEdits: {}\n",
            "devices[0].name: is required",
            id="device-without-name",
        ),
        pytest.param(
            b"kind: nvidia.com/gpu\ndevices:\n- name: '-bad-'\n  containerEdits: {}\n",
            "invalid",
            id="bad-device-name",
        ),
    ],
)
def test_a_spec_that_does_not_parse_is_a_warning(
    host: Path, tmp_path: Path, content: bytes, reason: str
) -> None:
    """A toolkit-kind file that cannot be read as a spec: the driver root serves, and the file is named."""
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_bytes(content)
    specs = _finder(host, cdi).find()
    assert specs.files == ()
    assert len(specs.problems) == 1
    assert str(cdi / "nvidia.yaml") in specs.problems[0]
    assert reason in specs.problems[0]
    choice = choose_source(_gpus(host), specs, discover_driver_userspace(str(host)))
    assert choice.source is UserspaceSource.DRIVER_ROOT
    assert reason in choice.warnings[0]


def test_links_fifos_and_huge_files_are_not_read(host: Path, tmp_path: Path) -> None:
    """The shared dir's files are read under the safe-read rules, and never block the prepare."""
    cdi = tmp_path / "cdi"
    real = write_toolkit_spec(tmp_path / "elsewhere.yaml", toolkit_spec(GPUS, DRIVER))
    cdi.mkdir()
    (cdi / "linked.yaml").symlink_to(real)
    os.mkfifo(cdi / "fifo.yaml")
    (cdi / "huge.yaml").write_bytes(b"kind: nvidia.com/gpu\n" + b"#" * MAX_SPEC_BYTES)
    specs = _finder(host, cdi).find()
    assert specs.files == ()
    problems = "\n".join(specs.problems)
    assert "linked.yaml: a symbolic link" in problems
    assert "fifo.yaml: cannot be read" in problems
    assert "huge.yaml: cannot be read" in problems


def test_own_claim_specs_and_other_kinds_are_skipped(host: Path, tmp_path: Path) -> None:
    """numadra's own specs are never opened; another vendor's spec is not a problem."""
    cdi = tmp_path / "cdi"
    own = toolkit_spec(GPUS, DRIVER)
    write_toolkit_spec(cdi / "numadra.dev_claim_0b6e.yaml", own)
    (cdi / "other.json").write_text(
        json.dumps({"cdiVersion": "0.3.0", "kind": "example.com/x", "devices": []})
    )
    specs = _finder(host, cdi).find()
    assert specs.files == ()
    assert specs.problems == ()


def test_cdi_priority_and_conflicts(host: Path, tmp_path: Path) -> None:
    """The runtime's rules: the later dir overrides; a name twice in one dir is unusable."""
    cdi = tmp_path / "cdi"
    broken = toolkit_spec(GPUS, DRIVER)
    broken["containerEdits"]["mounts"][0]["hostPath"] = "/nowhere"
    write_toolkit_spec(host / "etc/cdi/nvidia.yaml", broken)  # lower priority, broken
    write_toolkit_spec(cdi / "nvidia.yaml", toolkit_spec(GPUS, DRIVER))  # higher priority, fine
    assert _finder(host, cdi).find().check(UUIDS[0]) == ""
    write_toolkit_spec(cdi / "nvidia-again.yaml", toolkit_spec(GPUS, DRIVER))
    problem = _finder(host, cdi).find().check(UUIDS[0])
    assert "defined in both" in problem


def test_a_changed_file_is_read_again(host: Path, tmp_path: Path) -> None:
    """The parse is cached per file version: a regenerated spec counts at the next lookup."""
    cdi = tmp_path / "cdi"
    path = write_toolkit_spec(cdi / "nvidia.yaml", toolkit_spec(GPUS[:1], DRIVER))
    finder = _finder(host, cdi)
    assert UUIDS[1] not in finder.find().devices
    write_toolkit_spec(path, toolkit_spec(GPUS, DRIVER))
    os.utime(path, ns=(1, 2))  # a different mtime whatever the clock's resolution
    assert finder.find().check(UUIDS[1]) == ""
    path.unlink()
    assert finder.find().files == ()
