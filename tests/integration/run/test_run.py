"""``numadra run`` as a real process: registration, publishing, prepare, shutdown, recovery, errors."""

from __future__ import annotations

import json
import signal
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from driver.claims.render import claim_spec_file_name
from driver.pinning.types import ENV_CPUS, parse_cpulist
from driver.plugin import ClaimRef
from harness.fake_nri_runtime import POD as NRI_POD
from harness.fake_nri_runtime import FakeNriRuntime
from harness.fake_nri_runtime import container as nri_container
from harness.fake_nri_runtime import pod as nri_pod
from harness.kubeletclient import KubeletClient
from tests.integration.run.conftest import (
    CPU_DEVICE,
    DRIVER,
    GPU,
    NIC,
    OTHER_GPU,
    DriverProcess,
    RunNode,
    gpu_cpu_claim,
    http_get,
    load_slack,
    wait_for,
)


def _put_claim(node: RunNode, name: str, cpus: int = 2, gpu: str = GPU, pod_uid: str = "") -> ClaimRef:
    """A claim in the fake apiserver; ``pod_uid``: reserved for that pod (status.reservedFor)."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.root.name}-{name}"))
    obj = gpu_cpu_claim(uid, name, cpus, gpu)
    if pod_uid:
        obj["status"]["reservedFor"] = [{"resource": "pods", "name": "app", "uid": pod_uid}]
    node.api.put_object(obj)
    return ClaimRef("default", name, uid)


def _prepare(node: RunNode, ref: ClaimRef, version: str = "v1") -> Any:
    """The response entry of one claim."""
    out = node.kubelet.prepare(node.dra_socket, [ref], version=version)  # type: ignore[arg-type]
    assert list(out.claims) == [ref.uid]
    return out.claims[ref.uid]


def _cdi_ids(entry: Any) -> list[str]:
    return [cdi for dev in entry.devices for cdi in dev.cdi_device_ids]


def _spec_file(node: RunNode, uid: str) -> Path:
    return node.cdi_dir / claim_spec_file_name(DRIVER, uid)


def _claim_cpus(node: RunNode, uid: str) -> frozenset[int]:
    """The CPUs the claim's CDI spec hands to its containers (the pinning marker)."""
    spec = json.loads(_spec_file(node, uid).read_text())
    for device in spec["devices"]:
        for item in device["containerEdits"].get("env", []):
            key, _, value = item.partition("=")
            if key == ENV_CPUS:
                return parse_cpulist(value)
    raise AssertionError(f"no {ENV_CPUS} in the spec of claim {uid}")


def _registered(node: RunNode, process: DriverProcess, record: Any = None) -> float:
    registration, seconds = node.register(process)
    assert registration.info.endpoint == str(node.dra_socket)
    if record is not None:
        record("start_to_registered_s", round(seconds, 3))
    return seconds


def test_registers_publishes_and_reports_ready(node: RunNode, record_property: Any) -> None:
    """Registered (the time it took is recorded, and measured in bench/startup.py, not asserted);
    owned slices, /readyz, /metrics and health follow."""
    process = node.spawn()
    _registered(node, process, record_property)

    wait_for(lambda: GPU in node.device_names(), 20, "published slices")
    assert {GPU, CPU_DEVICE} <= node.device_names()
    for obj in node.slices():
        owners = obj["metadata"]["ownerReferences"]
        assert owners == [
            {"apiVersion": "v1", "kind": "Node", "name": "node-run", "uid": "node-uid-1", "controller": True}
        ]

    url = process.metrics_url()
    assert http_get(f"{url}/healthz")[0] == 200
    wait_for(lambda: http_get(f"{url}/readyz")[0] == 200, 10, "/readyz to say ready")
    status, body = http_get(f"{url}/metrics")
    assert status == 200
    assert f'numadra_build_info{{driver="{DRIVER}",node="node-run"' in body
    wait_for(
        lambda: 'numadra_publish_operations_total{operation="create"} 1.0' in http_get(f"{url}/metrics")[1],
        10,
        "the slice create in the metrics",
    )

    stream = node.kubelet.watch_health(node.dra_socket, "v1")
    try:
        report = next(iter(stream))
        names = {d.device.device_name for d in report.devices}
        assert {GPU, CPU_DEVICE} <= names
    finally:
        stream.cancel()


def test_readyz_waits_for_registration_and_metrics_count_devices(node: RunNode) -> None:
    """/healthz at once; /readyz 503 naming "registered" until the kubelet registers us; device gauges."""
    process = node.spawn()
    url = process.metrics_url()
    assert http_get(f"{url}/healthz")[0] == 200
    status, body = http_get(f"{url}/readyz")
    assert status == 503
    assert "not ready: registered" in body
    _registered(node, process)
    wait_for(lambda: http_get(f"{url}/readyz")[0] == 200, 10, "/readyz to say ready")
    assert node.slices(), "ready before any slice was published"
    status, metrics = http_get(f"{url}/metrics")
    assert status == 200
    assert 'numadra_devices{health="Healthy",type="gpu"} 2.0' in metrics
    assert 'numadra_devices{health="Healthy",type="cpu"} 1.0' in metrics
    assert 'numadra_cpus_free{numa_node="0"}' in metrics
    wait_for(lambda: "numadra_registered 1.0" in http_get(f"{url}/metrics")[1], 10, "numadra_registered 1")
    # every loop's series is there from the first housekeeping round on, at 0 on a healthy node
    restarts = 'numadra_loop_restarts_total{loop="slice-publisher"} 0.0'
    wait_for(lambda: restarts in http_get(f"{url}/metrics")[1], 15, restarts)


def test_prepare_unprepare_over_v1_and_v1beta1(node: RunNode) -> None:
    """A GPU + CPU claim from the apiserver gets CDI IDs, a spec file, status; unprepare removes them."""
    process = node.spawn()
    _registered(node, process)
    first, second = _put_claim(node, "train-a"), _put_claim(node, "train-b", gpu=OTHER_GPU)

    for ref, version, gpu in ((first, "v1", GPU), (second, "v1beta1", OTHER_GPU)):
        entry = _prepare(node, ref, version)
        assert entry.error == ""
        assert {d.device_name for d in entry.devices} == {gpu, CPU_DEVICE}
        ids = _cdi_ids(entry)
        assert ids and all(ref.uid in cdi for cdi in ids)
        assert _spec_file(node, ref.uid).exists()
    assert _claim_cpus(node, first.uid).isdisjoint(_claim_cpus(node, second.uid))

    def status_written() -> bool:
        claim = node.api.get_object("ResourceClaim", "train-a", "default") or {}
        return bool((claim.get("status") or {}).get("devices"))

    wait_for(status_written, 10, "status.devices of the prepared claim")

    out = node.kubelet.unprepare(node.dra_socket, [first])
    assert out.claims[first.uid].error == ""
    assert not _spec_file(node, first.uid).exists()
    assert _spec_file(node, second.uid).exists()
    wait_for(lambda: not status_written(), 10, "status.devices to be cleared")

    claim_lines = [e for e in process.log_events() if e.get("claim_uid") == first.uid]
    assert {"prepared", "unprepared"} <= {e["event"] for e in claim_lines}

    url = process.metrics_url()
    wait_for(
        lambda: 'numadra_prepare_total{result="success"} 2.0' in http_get(f"{url}/metrics")[1],
        5,
        "prepare counts in the metrics",
    )


def test_apiserver_down_at_start_registers_then_publishes(node: RunNode) -> None:
    """The plugin registers without an apiserver; prepares fail per claim; slices follow once it is up."""
    ref = _put_claim(node, "early")
    node.api.stop()
    process = node.spawn()
    _registered(node, process)  # with the apiserver down: nothing before the socket needs it

    entry = _prepare(node, ref)
    assert "unreachable" in entry.error
    assert ref.uid in entry.error
    status, body = http_get(f"{process.metrics_url()}/readyz")
    assert status == 503
    assert "slices-published" in body

    node.api.start()
    wait_for(lambda: GPU in node.device_names(), 30, "slices after the apiserver came up")
    assert _prepare(node, ref).error == ""


def test_sigterm_removes_sockets_and_exits_0(node: RunNode) -> None:
    """SIGTERM: both sockets are gone and the exit code is 0, with no traceback."""
    process = node.spawn()
    _registered(node, process)
    assert node.dra_socket.exists()
    assert process.stop(signal.SIGTERM) == 0
    assert not node.registration_socket.exists()
    assert not node.dra_socket.exists()
    assert "Traceback" not in process.log_text()


def test_restart_after_kill_gives_same_cdi_ids_and_no_double_cpus(node: RunNode) -> None:
    """kill -9 and restart: the repeat prepare answers the same CDI IDs; new claims get other CPUs."""
    process = node.spawn()
    _registered(node, process)
    first = _put_claim(node, "survivor", cpus=4)
    before = _prepare(node, first)
    assert before.error == ""
    cpus_before = _claim_cpus(node, first.uid)
    stale = node.socket_identity()
    process.stop(signal.SIGKILL)

    restarted = node.spawn()
    node.kubelet.close()  # a fresh kubelet connection, as after a real restart
    node.kubelet = KubeletClient()
    node.register(restarted, stale=stale)
    again = _prepare(node, first)
    assert again.error == ""
    assert _cdi_ids(again) == _cdi_ids(before)
    assert _claim_cpus(node, first.uid) == cpus_before

    second = _put_claim(node, "newcomer", cpus=4, gpu=OTHER_GPU)
    assert _prepare(node, second).error == ""
    assert _claim_cpus(node, second.uid).isdisjoint(cpus_before)


def test_reboot_wiping_cdi_dir_is_repaired_at_start(node: RunNode) -> None:
    """Specs deleted while the driver was down are back at start, before the kubelet's first call
    is answered (the journal's reconcile comes first), and counted."""
    process = node.spawn()
    _registered(node, process)
    ref = _put_claim(node, "rebooted")
    assert _prepare(node, ref).error == ""
    content = _spec_file(node, ref.uid).read_text()
    assert process.stop() == 0
    for path in node.cdi_dir.iterdir():
        path.unlink()

    restarted = node.spawn()
    _registered(node, restarted)
    unknown = ClaimRef("default", "never-prepared", str(uuid.uuid4()))
    assert node.kubelet.unprepare(node.dra_socket, [unknown]).claims[unknown.uid].error == ""
    assert _spec_file(node, ref.uid).read_text() == content
    wait_for(
        lambda: (
            'numadra_journal_recoveries_total{action="recreated"} 1.0'
            in http_get(f"{restarted.metrics_url()}/metrics")[1]
        ),
        10,
        "the recovery in the metrics",
    )


@pytest.mark.parametrize(
    ("name", "content"),
    [
        pytest.param("journal.log", '{"kind":"NumadraJournal","version":2}\n0000 {"ops":[]}\n', id="corrupt"),
        pytest.param(
            "journal.json",
            '{"kind": "NumadraJournal", "version": 1, "body": {"claims": {}}, "checksum": "sha256:0"}',
            id="version-1",
        ),
    ],
)
def test_corrupt_journal_exits_1_with_one_line_and_the_recovery(
    node: RunNode, name: str, content: str
) -> None:
    """A corrupt journal, or a version 1 one (never released, not read): exit 1, the last line names
    the file and the recovery, no traceback, no sockets."""
    journal = node.plugin_dir / "state" / name
    journal.parent.mkdir(parents=True)
    journal.write_text(content)
    process = node.spawn()
    assert process.wait() == 1
    text = process.log_text()
    assert "Traceback" not in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("numadra: journal ")
    assert str(journal) in last
    assert "recovery:" in last
    assert not node.registration_socket.exists()


@pytest.mark.parametrize(
    ("extra", "env", "needle"),
    [
        pytest.param(("--pinning", "bogus"), {}, "--pinning", id="bad-flag-value"),
        pytest.param(("--no-such-flag",), {}, "--no-such-flag", id="unknown-flag"),
        pytest.param((), {"NUMADRA_TAINT_UNHEALTHY": "Evict"}, "NUMADRA_TAINT_UNHEALTHY", id="bad-env"),
    ],
)
def test_bad_usage_exits_2_with_one_line(
    node: RunNode, extra: tuple[str, ...], env: dict[str, str], needle: str
) -> None:
    """Bad flags or environment: exit 2 and exactly one line on stderr that names the problem."""
    process = node.spawn(*extra, env=env)
    assert process.wait() == 2
    lines = process.log_text().strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("numadra: ")
    assert needle in lines[0]


def test_missing_registrar_dir_is_a_config_error(node: RunNode) -> None:
    """No kubelet plugins_registry directory: exit 2 naming it (a misconfigured hostPath mount)."""
    node.registrar_dir.rmdir()
    process = node.spawn()
    assert process.wait() == 2
    last = process.log_text().strip().splitlines()[-1]
    assert str(node.registrar_dir) in last


def test_sighup_rescans_and_republishes_a_changed_host(node: RunNode) -> None:
    """A device gone from the host tree disappears from the slices after SIGHUP (the udev path's action)."""
    process = node.spawn()
    _registered(node, process)
    wait_for(lambda: "gpu-0000-00-02-0" in node.device_names(), 20, "the first publish")
    (node.host / "sys" / "bus" / "pci" / "devices" / "0000:00:02.0").unlink()
    process.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "gpu-0000-00-02-0" not in node.device_names(), 20, "the republish without the GPU")
    assert GPU in node.device_names()
    assert process.proc.poll() is None


def _nic_taints(node: RunNode) -> list[dict[str, Any]]:
    for obj in node.slices():
        for device in obj["spec"].get("devices", []):
            if device["name"] == NIC:
                return list(device.get("taints", []))
    return []


def test_unhealthy_nic_is_tainted_and_healed_in_the_slices(node: RunNode) -> None:
    """Carrier down on the host: taint within 5 s (one model feeds taints); removed after recovery."""
    process = node.spawn("--taint-unhealthy", "NoExecute")
    _registered(node, process)
    wait_for(lambda: NIC in node.device_names(), 20, "the first publish")
    assert _nic_taints(node) == []
    carrier = node.host / "sys" / "class" / "net" / "eno1" / "carrier"
    carrier.write_text("0\n")
    taints = wait_for(lambda: _nic_taints(node), 5 * load_slack(), "the taint on the NIC")
    assert [(t["key"], t["value"], t["effect"]) for t in taints] == [
        ("numadra.dev/unhealthy", "NoCarrier", "NoExecute")
    ]
    carrier.write_text("1\n")
    wait_for(lambda: not _nic_taints(node), 10 * load_slack(), "the taint to be removed")
    url = process.metrics_url()
    for action in ("added", "removed"):
        wait_for(
            lambda action=action: (
                f'numadra_taint_transitions_total{{action="{action}"}} 1.0' in http_get(f"{url}/metrics")[1]
            ),
            10 * load_slack(),
            f"the taint {action} in the metrics",
        )


def test_nri_backend_pins_containers_of_prepared_claims(node: RunNode) -> None:
    """--pinning nri: the plugin registers with the runtime and pins a claim container to its CPUs."""
    runtime = FakeNriRuntime(node.root / "nri.sock")
    try:
        process = node.spawn("--pinning", "nri", "--nri-socket", str(node.root / "nri.sock"))
        _registered(node, process)
        ref = _put_claim(node, "pinned", cpus=4, pod_uid=NRI_POD.uid)
        assert _prepare(node, ref).error == ""
        spec = json.loads(_spec_file(node, ref.uid).read_text())
        env = next(
            item
            for device in spec["devices"]
            for item in [device["containerEdits"].get("env", [])]
            if any(e.startswith(f"{ENV_CPUS}=") for e in item)
        )
        conn = runtime.accept(timeout=10 * load_slack())
        try:
            conn.configure()
            conn.synchronize([])
            resp = conn.create_container(nri_container("c1", "app", env=list(env)))
            cpus = resp.adjust.linux.resources.cpu.cpus
            assert parse_cpulist(cpus) == _claim_cpus(node, ref.uid)
            forged = [e for e in env if not e.startswith("NUMADRA_CLAIM_UID=")]
            forged.append("NUMADRA_CLAIM_UID=00000000-0000-0000-0000-000000000000")
            with pytest.raises(RuntimeError, match="has not prepared"):
                conn.create_container(nri_container("c2", "intruder", env=forged))
            # the claim's own env, copied by a pod the claim is not reserved for: refused
            evil = nri_pod("pod-evil", "pod-uid-evil", name="evil")
            with pytest.raises(
                RuntimeError, match=f"claim default/pinned \\(uid {ref.uid}\\).*not for this pod"
            ):
                conn.create_container(
                    nri_container("c3", "intruder", env=list(env), sandbox=evil.id), pod=evil
                )
            assert process.stop() == 0  # the NRI connection does not hold up the shutdown
        finally:
            conn.close()
    finally:
        runtime.close()


def test_hook_backend_puts_the_create_runtime_hook_in_claim_specs(node: RunNode) -> None:
    """--pinning hook: the claim's CDI spec runs `numadra hook create-runtime` with the claim's CPUs."""
    process = node.spawn("--pinning", "hook", "--hook-path", "/opt/test/numadra")
    _registered(node, process)
    ref = _put_claim(node, "hooked", cpus=2)
    assert _prepare(node, ref).error == ""
    spec = json.loads(_spec_file(node, ref.uid).read_text())
    hooks = [h for device in spec["devices"] for h in device["containerEdits"].get("hooks", [])]
    assert len(hooks) == 1
    assert hooks[0]["hookName"] == "createRuntime"
    assert hooks[0]["path"] == "/opt/test/numadra"
    args = hooks[0]["args"]
    assert args[:3] == ["numadra", "hook", "create-runtime"]
    assert parse_cpulist(args[args.index("--cpus") + 1]) == _claim_cpus(node, ref.uid)


def test_rolling_update_two_pods_share_state_and_keep_their_own_sockets(node: RunNode) -> None:
    """POD_UID set: old and new pod serve side by side; a claim prepared by one is unprepared by the other."""
    old = node.spawn(env={"POD_UID": "pod-old"})
    new = node.spawn(env={"POD_UID": "pod-new"})
    sockets = {
        uid: wait_for(
            lambda uid=uid: next(iter(node.registrar_dir.glob(f"{DRIVER}-{uid}-reg.sock")), None),
            15,
            f"the registration socket of {uid}",
        )
        for uid in ("pod-old", "pod-new")
    }
    endpoints = {uid: node.kubelet.register(sock).info.endpoint for uid, sock in sockets.items()}
    assert endpoints == {
        "pod-old": str(node.plugin_dir / "dra-pod-old.sock"),
        "pod-new": str(node.plugin_dir / "dra-pod-new.sock"),
    }
    ref = _put_claim(node, "rolled", cpus=2)
    out = node.kubelet.prepare(endpoints["pod-old"], [ref])
    assert out.claims[ref.uid].error == ""
    assert _spec_file(node, ref.uid).exists()
    again = node.kubelet.prepare(endpoints["pod-new"], [ref])
    assert _cdi_ids(again.claims[ref.uid]) == _cdi_ids(out.claims[ref.uid])

    assert old.stop() == 0
    assert not sockets["pod-old"].exists()
    assert sockets["pod-new"].exists()
    assert node.kubelet.unprepare(endpoints["pod-new"], [ref]).claims[ref.uid].error == ""
    assert not _spec_file(node, ref.uid).exists()
    assert new.stop() == 0


def test_failed_start_after_registration_removes_the_sockets(node: RunNode) -> None:
    """A metrics port in use fails the start late (exit 2): what had started is stopped, sockets gone."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        process = node.spawn("--metrics-address", f"127.0.0.1:{port}")
        assert process.wait() == 2
    last = process.log_text().strip().splitlines()[-1]
    assert last.startswith("numadra: metrics address")
    assert str(port) in last
    assert not node.registration_socket.exists()
    assert not node.dra_socket.exists()


def test_broken_kubeconfig_exits_2_with_one_line(node: RunNode) -> None:
    """A kubeconfig that cannot be loaded stops the start (exit 2, one line), not a background thread."""
    broken = node.root / "broken.kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    process = node.spawn("--kubeconfig", str(broken))
    assert process.wait() == 2
    text = process.log_text()
    assert "Traceback" not in text
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"numadra: cannot load the kubeconfig {broken}")
    assert not node.registration_socket.exists()
