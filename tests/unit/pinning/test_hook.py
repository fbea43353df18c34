"""The createRuntime hook's parsing, its CDI entry and its affinity fallback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from driver.errors import PinningError, PinRefusedError
from driver.pinning.cgroupfs import CgroupfsBackend, CpusetHierarchy
from driver.pinning.hook import (
    HookBackend,
    assignment_from_bundle,
    cdi_hook,
    cdi_hook_entry,
    parse_oci_state,
    run_create_runtime,
)
from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode, PodGroupRef


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("nope", "not JSON", id="not-json"),
        pytest.param("[]", "not a JSON object", id="not-object"),
        pytest.param('{"bundle": "/b"}', "pid: is required", id="no-pid"),
        pytest.param('{"pid": 0, "bundle": "/b"}', "pid: must be between 1 and", id="zero-pid"),
        pytest.param('{"pid": 7}', "bundle: is required", id="no-bundle"),
        # a boolean is no PID: true was taken for process 1 before the state was checked by type
        pytest.param(
            '{"pid": true, "bundle": "/b"}', "pid: must be an integer, got a boolean", id="pid-true"
        ),
        pytest.param('{"pid": 7, "bundle": 5}', "bundle: must be a string, got a number", id="bundle-number"),
    ],
)
def test_bad_oci_state(text: str, message: str) -> None:
    """Malformed OCI state is refused with a reason."""
    with pytest.raises(PinningError, match=message):
        parse_oci_state(text)


def test_oci_state_fields() -> None:
    """id, pid and bundle are taken from the runtime state."""
    s = parse_oci_state('{"ociVersion": "1.2.0", "id": "c1", "status": "creating", "pid": 7, "bundle": "/b"}')
    assert (s.container_id, s.pid, s.bundle) == ("c1", 7, Path("/b"))


def test_marker_from_bundle(tmp_path: Path) -> None:
    """NUMADRA_CPUS/MEMS are read from process.env of config.json; values may contain '='."""
    (tmp_path / "config.json").write_text(
        json.dumps({"process": {"env": ["A=b=c", "NUMADRA_CPUS=2-3", "NUMADRA_MEMS=1", "junk"]}})
    )
    assert assignment_from_bundle(tmp_path) == ("2-3", "1")


def test_missing_config_json_names_path(tmp_path: Path) -> None:
    """A bundle without config.json is an error naming the path."""
    with pytest.raises(PinningError, match=str(tmp_path / "config.json")):
        assignment_from_bundle(tmp_path)


def test_malformed_marker_rejected(tmp_path: Path) -> None:
    """A malformed cpulist fails the hook (fail closed) instead of running unpinned."""
    state = json.dumps({"pid": os.getpid(), "bundle": str(tmp_path)})
    with pytest.raises(PinningError, match="malformed cpu list"):
        run_create_runtime(state, cpus_arg="3-1")


def test_affinity_fallback_when_cgroup_unwritable(tmp_path: Path) -> None:
    """Without a writable cgroup the hook pins every thread by affinity and says so."""
    proc = tmp_path / "proc"
    pid = os.getpid()
    (proc / str(pid) / "task" / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text("3:cpuset:/gone\n")
    backend = HookBackend(
        CgroupfsBackend(CpusetHierarchy(1, tmp_path / "nocg"), proc_root=proc), proc_root=proc
    )
    before = os.sched_getaffinity(pid)
    target = min(before)
    try:
        out = run_create_runtime(
            json.dumps({"pid": pid, "bundle": str(tmp_path)}), str(target), None, backend
        )
        assert out.method == "affinity"
        assert os.sched_getaffinity(pid) == {target}
    finally:
        os.sched_setaffinity(pid, before)


def test_cdi_hook_entry() -> None:
    """The CDI hook entry runs 'numadra hook create-runtime' with the assignment as args."""
    a = CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({4, 5, 6}), frozenset({1}))
    entry = cdi_hook_entry(a, path="/opt/numadra/bin/numadra")
    assert entry == {
        "hookName": "createRuntime",
        "path": "/opt/numadra/bin/numadra",
        "args": ["numadra", "hook", "create-runtime", "--cpus", "4-6", "--mems", "1"],
        "timeout": 5,
    }


@pytest.mark.parametrize(
    "config",
    [
        pytest.param([], id="not-object"),
        pytest.param({"process": []}, id="process-list"),
        pytest.param({}, id="no-env"),
    ],
)
def test_bundle_without_env_has_no_marker(tmp_path: Path, config: object) -> None:
    """Odd but valid JSON in config.json means no marker, not a crash."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert assignment_from_bundle(tmp_path) == (None, None)


def test_cdi_hook_validates_in_a_cdi_spec() -> None:
    """The hook passes the cdi library's validation inside a spec at the lowest version (0.3.0)."""
    from cdi.spec import ContainerEdits, Device, Spec, validate_spec

    a = CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({1}), frozenset({0}))
    spec = Spec(
        kind="numadra.dev/cpu",
        devices=(Device(name="claim-1-main", edits=ContainerEdits(hooks=(cdi_hook(a),))),),
    )
    validate_spec(spec)
    doc = spec.to_json()
    assert doc["cdiVersion"] == "0.3.0"
    assert doc["devices"][0]["containerEdits"]["hooks"][0]["hookName"] == "createRuntime"


def _env_bundle(tmp_path: Path, env: list[str], annotations: dict[str, str]) -> str:
    """The OCI state of our own pid with a bundle whose config.json has ``env`` and ``annotations``."""
    (tmp_path / "config.json").write_text(json.dumps({"process": {"env": env}, "annotations": annotations}))
    return json.dumps({"id": "c1", "pid": os.getpid(), "bundle": str(tmp_path)})


def test_env_mode_claim_without_cpus_from_another_pod_pins_nothing(tmp_path: Path) -> None:
    """A GPU claim's marker in a pod it was not prepared for: nothing to steal, nothing pinned."""
    gpu = ClaimBinding("claim-g", "default", "gpu", frozenset({"pod-a"}), None, mems=frozenset({0}))
    state = _env_bundle(
        tmp_path, ["NUMADRA_MEMS=0", "NUMADRA_CLAIM_UID=claim-g"], {"io.kubernetes.cri.sandbox-uid": "pod-b"}
    )
    assert run_create_runtime(state, lookup={"claim-g": gpu}.get).method == "none"


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({}, id="pod-unknown"),
        pytest.param({"io.kubernetes.cri.sandbox-uid": "pod-a"}, id="pod-known"),
    ],
)
def test_env_mode_entry_without_recorded_pods_binds_no_pod(
    tmp_path: Path, annotations: dict[str, str]
) -> None:
    """A rebuilt entry, or one journaled before pods were recorded: no pod binds on the claim UID
    alone, and the refusal says where the hook's knowledge ends and what pins without it."""
    pinning = ClaimPinning(
        "claim-a", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({1}), frozenset()),)
    )
    unknown = ClaimBinding("claim-a", "default", "cpus", None, pinning)
    env = ["NUMADRA_CPUS=0-255", "NUMADRA_CLAIM_UID=claim-a", "NUMADRA_REQUEST=main"]
    with pytest.raises(PinRefusedError, match="whose consumers numadra has not learned") as err:
        run_create_runtime(_env_bundle(tmp_path, env, annotations), lookup={"claim-a": unknown}.get)
    assert err.value.reason == "consumers_unknown"
    assert "cannot ask the apiserver" in str(err.value) and "--cpus/--mems" in str(err.value)


def test_env_mode_refuses_an_unrecorded_pod_of_a_podgroup_and_says_why(tmp_path: Path) -> None:
    """A claim reserved for a PodGroup: the hook cannot read which group a pod belongs to (a pod's
    annotations are its own words), so an unrecorded pod is refused, naming the group."""
    pinning = ClaimPinning(
        "claim-a", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({1}), frozenset()),)
    )
    gang = ClaimBinding(
        "claim-a", "ml", "cpus", frozenset(), pinning, pod_groups=(PodGroupRef("train", "pg-1"),)
    )
    env = ["NUMADRA_CPUS=0-255", "NUMADRA_CLAIM_UID=claim-a", "NUMADRA_REQUEST=main"]
    annotations = {"io.kubernetes.cri.sandbox-uid": "pod-b", "io.kubernetes.cri.sandbox-namespace": "ml"}
    with pytest.raises(PinRefusedError, match="PodGroup train") as err:
        run_create_runtime(_env_bundle(tmp_path, env, annotations), lookup={"claim-a": gang}.get)
    assert err.value.reason == "not_reserved"
    assert "cannot read which group a pod belongs to" in str(err.value)


def test_env_mode_pins_a_pod_the_driver_recorded_since(tmp_path: Path) -> None:
    """Once the driver recorded the pod (a repeated prepare, its adopted-claims check), env mode pins
    it to the journal's CPUs, whatever the env says."""
    proc = tmp_path / "proc"
    pid = os.getpid()
    (proc / str(pid) / "task" / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text("3:cpuset:/gone\n")
    backend = HookBackend(
        CgroupfsBackend(CpusetHierarchy(1, tmp_path / "nocg"), proc_root=proc), proc_root=proc
    )
    before = os.sched_getaffinity(pid)
    target = min(before)
    pinning = ClaimPinning(
        "claim-a", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({target}), frozenset()),)
    )
    recorded = ClaimBinding("claim-a", "default", "cpus", frozenset({"pod-a"}), pinning)
    env = ["NUMADRA_CPUS=0-255", "NUMADRA_CLAIM_UID=claim-a", "NUMADRA_REQUEST=main"]
    annotations = {"io.kubernetes.cri.sandbox-uid": "pod-a", "io.kubernetes.cri.sandbox-namespace": "default"}
    try:
        out = run_create_runtime(
            _env_bundle(tmp_path, env, annotations), backend=backend, lookup={"claim-a": recorded}.get
        )
        assert (out.method, out.cpus) == ("affinity", frozenset({target}))
        assert os.sched_getaffinity(pid) == {target}
    finally:
        os.sched_setaffinity(pid, before)
