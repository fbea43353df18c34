"""A real CDI consumer: podman (Debian's, ``--runtime runc``) runs a container with numadra's CDI devices.

The claim is prepared by the real ClaimsDriver (only the claim source is a fake: no apiserver is
needed for this), whose GPU device node is a real character device (1:3, like /dev/null) made with
mknod at a temp path. Its CDI specs go where this podman reads them (``/var/run/cdi``; podman 4.3
has no option for another directory) under names unique to the claim, and are removed afterwards.
The assertions run INSIDE the container: the device node, the env vars, and the KEP-5304 metadata
file at its well-known path.

A second test closes the chain with the real cluster of the e2e tier: a claim allocated by the real
scheduler and prepared through kubelet's DRA manager by ``numadra run`` is run by podman with the
CDI IDs kubelet reported.

Podman keeps its storage, run and temp dirs under the test's temp dir, so it shares nothing with
other podman users on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from driver.claims import ClaimsDriver, claims_journal
from driver.claims.hostedits import HostEdits
from driver.claims.metadata import CONTAINER_DIR
from driver.kubelet.claims import ClaimFetcher
from driver.pinning.planner import CpuPlanner
from driver.pinning.types import ENV_CPUS, parse_cpulist
from tests.e2e.conftest import NODE as NODE_E2E
from tests.e2e.conftest import RESOURCE, Cluster
from tests.e2e.test_claims import generated_claim
from tests.integration.claims._world import (
    CPU0,
    DRIVER,
    GPU0,
    NODE,
    FakeClaimGetter,
    ServedDriver,
    claim,
    cpu_result,
    make_inventory,
    ref_of,
    result,
)

pytestmark = pytest.mark.podman

CDI_DIR = Path("/var/run/cdi")  # podman 4.3 reads /etc/cdi and /var/run/cdi only
IMAGE = "localhost/numadra-cdi-e2e:1"
BUSYBOX_APPLETS = ("sh", "env", "cat", "stat", "ls", "test", "echo")
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{tmp}"
"""


@dataclass
class Podman:
    """podman with its own storage/run/temp dirs and a containers.conf that works on this host."""

    root: Path

    def run(
        self, *args: str, timeout: float = 120.0, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        cmd = [
            "podman",
            "--root", str(self.root / "storage"),
            "--runroot", str(self.root / "runroot"),
            "--storage-driver", "vfs",
            *args,
        ]  # fmt: skip
        env = {**os.environ, "CONTAINERS_CONF": str(self.root / "containers.conf")}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=check)


def _busybox_rootfs(tar_path: Path, busybox: str) -> None:
    """A rootfs tar: busybox-static, applet links, and the empty dirs a container expects."""
    with tarfile.open(tar_path, "w") as tar:
        for name in ("bin", "dev", "proc", "sys", "etc", "tmp", "var", "var/run", "mnt"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(busybox, arcname="bin/busybox")
        for applet in BUSYBOX_APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)


@pytest.fixture(scope="module")
def podman() -> Iterator[Podman]:
    """podman ready to run the busybox image, or a skip that says what is missing."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found: apt-get install podman runc busybox-static (see .ci/run)")
    busybox = shutil.which("busybox") or ("/bin/busybox" if Path("/bin/busybox").exists() else None)
    if busybox is None:
        pytest.skip("busybox not found: apt-get install busybox-static (the test image is made from it)")
    root = Path(tempfile.mkdtemp(prefix="npod", dir="/var/tmp"))
    try:
        (root / "tmp").mkdir()
        (root / "containers.conf").write_text(CONTAINERS_CONF.format(tmp=root / "tmp"))
        pm = Podman(root)
        _busybox_rootfs(root / "rootfs.tar", busybox)
        imported = pm.run(
            "import",
            "--change",
            'CMD ["/bin/sh"]',
            "--change",
            "ENV PATH=/bin",
            str(root / "rootfs.tar"),
            IMAGE,
        )
        if imported.returncode != 0:
            pytest.skip(f"podman cannot import an image here: {imported.stderr.strip()[-500:]}")
        probe = pm.run("run", "--rm", IMAGE, "echo", "probe-ok")
        if probe.returncode != 0 or "probe-ok" not in probe.stdout:
            pytest.skip(f"podman cannot run a plain container here: {probe.stderr.strip()[-500:]}")
        yield pm
    finally:
        with contextlib.suppress(Exception):
            Podman(root).run("rmi", "-f", IMAGE, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cdi_dir() -> Iterator[Path]:
    """/var/run/cdi, created if needed; the files the test adds are removed by the test itself."""
    created = not CDI_DIR.exists()
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    yield CDI_DIR
    if created:
        with contextlib.suppress(OSError):
            CDI_DIR.rmdir()


def _char_device(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError as err:
        pytest.skip(f"cannot mknod a character device here ({err}): the CDI device node needs one")


def _env_of(spec_paths: list[Path]) -> dict[str, str]:
    """Every env var the claim's CDI specs set (spec and device level)."""
    env: dict[str, str] = {}
    for path in spec_paths:
        spec = json.loads(path.read_text())
        edits = [spec.get("containerEdits", {})] + [d["containerEdits"] for d in spec["devices"]]
        for edit in edits:
            for item in edit.get("env", []):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def test_podman_injects_numadra_cdi_devices(podman: Podman, cdi_dir: Path, tmp_path: Path) -> None:
    """Device node (1:3), env vars and the metadata file all appear inside a real container."""
    dev_node = tmp_path / "dev" / f"nvidia-e2e-{uuid.uuid4().hex[:6]}"
    _char_device(dev_node)
    base = make_inventory(with_gpu1=False)
    gpu = replace(base.gpus[0], device_nodes=(str(dev_node),))
    inventory = replace(base, gpus=(gpu,))
    getter = FakeClaimGetter()
    uid = str(uuid.uuid4())
    obj = claim(uid, name="cdi-e2e", results=[result("gpu", GPU0), cpu_result("cpus", 2, node=0)])
    ref = getter.add(obj)
    driver = ServedDriver(  # the kubelet layer's claim path in front of the real driver
        ClaimsDriver(
            driver_name=DRIVER,
            node_name=NODE,
            inventory=lambda: inventory,
            cdi_dir=cdi_dir,
            plugin_dir=tmp_path / "plugin",
            journal=claims_journal(
                cdi_dir=cdi_dir, plugin_dir=tmp_path / "plugin", driver_name=DRIVER, pool=NODE
            ),
            planner=CpuPlanner(lambda: inventory),
            # the GPU's device node comes from the host's edits, checked as a host path the
            # runtime will resolve (root's all the way down, under this machine's /)
            host_edits=HostEdits(
                host_root="/", driver_root="/", cdi_dir=str(cdi_dir), claim_kind=f"{DRIVER}/claim"
            ),
        ),
        ClaimFetcher(getter),
    )
    try:
        prepared = driver.prepare_claims([ref])[uid]
        assert not prepared.error, prepared.error
        ids = [i for d in prepared.devices for i in d.cdi_device_ids]
        spec_paths = sorted(p for p in cdi_dir.iterdir() if uid in p.name)
        assert spec_paths, f"no CDI spec for claim {uid} in {cdi_dir}"
        versions = {json.loads(p.read_text())["cdiVersion"] for p in spec_paths}
        assert all(tuple(map(int, v.split("."))) <= (0, 5, 0) for v in versions), versions
        want_env = _env_of(spec_paths)
        assert {"NVIDIA_VISIBLE_DEVICES", "NUMADRA_CPUS"} <= set(want_env), want_env
        metadata_path = f"{CONTAINER_DIR}/resourceclaims/cdi-e2e/gpu/{DRIVER}-metadata.json"

        script = f"stat -c '%F %t:%T' {dev_node}; echo ---; env; echo ---; cat {metadata_path}"
        args = [a for i in ids for a in ("--device", i)]
        run = podman.run("run", "--rm", *args, IMAGE, "sh", "-c", script)
        assert run.returncode == 0, f"podman run {' '.join(args)} failed:\n{run.stderr}"
        print(f"podman run {' '.join(args)} -> inside the container:\n{run.stdout}")
        device_line, env_text, metadata_text = run.stdout.split("---\n")
        assert device_line.strip() == "character special file 1:3", device_line
        inside = dict(line.partition("=")[::2] for line in env_text.splitlines() if "=" in line)
        missing = {k: v for k, v in want_env.items() if inside.get(k) != v}
        assert not missing, f"env not injected: {missing}"
        first_doc = json.loads(metadata_text.splitlines()[0])
        assert first_doc["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
        assert GPU0 in metadata_text and CPU0 not in metadata_text
    finally:
        driver.unprepare_claims([ref_of(obj)])
        driver.close()
    assert not [p for p in cdi_dir.iterdir() if uid in p.name], "unprepare left CDI specs behind"


@pytest.mark.e2e
def test_podman_runs_a_claim_prepared_through_the_real_cluster(
    podman: Podman, cdi_dir: Path, cluster: Cluster
) -> None:
    """Scheduler -> kubelet's DRA manager -> numadra run -> podman: the pinned cpuset and metadata inside.

    Only a cpus share is claimed: GPU and NIC specs name the real host's /dev nodes, which this
    host does not have (the first test covers device nodes).
    """
    ns = cluster.new_namespace("cdi")
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "cpus"},
        "spec": {"spec": {"devices": {"requests": [{"name": "cpus", "exactly": {
            "deviceClassName": "cpu.numadra.dev", "capacity": {"requests": {"cpus": "4"}}}}]}}},
    }  # fmt: skip
    cluster.admin.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template)
    cluster.create_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app"},
            "spec": {
                "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": "cpus"}],
                "containers": [
                    {"name": "app", "image": IMAGE, "resources": {"claims": [{"name": "devices"}]}}
                ],
            },
        },
    )
    pod = cluster.wait_bound(ns, "app")
    ids = cluster.prepared(pod)["app"]
    uid = generated_claim(cluster, pod)["metadata"]["uid"]
    cpus = cluster.claim_cpus(uid)
    assert len(cpus) == 4
    copied = [cdi_dir / path.name for path in cluster.claim_files(uid)]
    try:
        for path in cluster.claim_files(uid):
            shutil.copyfile(path, cdi_dir / path.name)
        metadata_path = f"{CONTAINER_DIR}/resourceclaimtemplates/devices/cpus/{DRIVER}-metadata.json"
        args = [a for i in ids for a in ("--device", i)]
        run = podman.run("run", "--rm", *args, IMAGE, "sh", "-c", f"env; echo ---; cat {metadata_path}")
        assert run.returncode == 0, f"podman run {' '.join(args)} failed:\n{run.stderr}"
        print(f"podman run {' '.join(args)} -> inside the container:\n{run.stdout}")
        env_text, metadata_text = run.stdout.split("---\n")
        inside = dict(line.partition("=")[::2] for line in env_text.splitlines() if "=" in line)
        assert parse_cpulist(inside[ENV_CPUS]) == cpus
        assert inside["NUMADRA_CLAIM_UID"] == uid
        device = json.loads(metadata_text.splitlines()[0])["requests"][0]["devices"][0]
        assert (device["driver"], device["pool"]) == (DRIVER, NODE_E2E)
        assert device["name"].startswith("cpu-numa")
    finally:
        for path in copied:
            path.unlink(missing_ok=True)
        cluster.delete_pod(ns, "app")
    assert uid not in cluster.journal_uids()
