"""Prepare latency of the whole node path, side by side with the upstream example driver and a Go helper.

Seven plugins serve the same claims from the same apiserver, each in its own process with its own
plugin, registration and CDI dirs, and this process plays the kubelet (gRPC over unix sockets):

* ``numadra``: the prepare path of ``numadra run --claim-status=false`` (``KubeletPluginServer``
  + ``ClaimsDriver`` + ``KubeClient`` + ``CpuPlanner``) on an inventory discovered from a generated
  DGX-class host tree; the server holds the cross-process flock around each whole call (``numadra
  run`` lets ``ClaimsDriver`` hold it around its journal sections only: one flock per call
  either way, as these calls come one at a time);
* ``numadra_status``: the same with the asynchronous claim status writer that ``numadra run``
  turns on by default (``--claim-status``): one server-side apply of ``status.devices`` per
  prepared claim and one per unprepared claim, off the kubelet's path;
* ``go``: bench/goprep, a minimal driver on ``k8s.io/dynamic-resource-allocation/kubeletplugin``
  v0.37.2 (built into a cache dir by bench/_gopeer.py) doing the same file work per claim: one CDI
  spec, the helper's metadata file and metadata CDI spec per request, one checkpoint write per call;
* ``example``: the upstream example driver's kubelet plugin (``sigs.k8s.io/dra-example-driver``
  ``cmd/dra-example-kubeletplugin``, the version in bench/_gopeer.py, built from its own module),
  the reference users compare with, as its chart runs it but for its client-go rate limiter (off,
  as the ``go`` peer's): its own claims, one of its fake ``gpu-<i>`` devices each (it publishes
  them in its own ResourceSlice, so the real apiserver holds a Node for its owner reference); per
  claim it GETs the claim, reads its checkpoint, writes a YAML CDI spec and rewrites the fsynced
  checkpoint. After the warm-up the bench checks that its spec file and checkpoint entry appear and
  go again, and any claim's error ends the run;
* ``floor``: numadra's claim reads alone (same fetcher, prepares nothing): what gRPC and the claim
  reads cost on this machine before any driver work;
* ``floor_io``: the floor plus the files and the synced journal record numadra writes for a claim,
  as opaque bytes of numadra's sizes (measured at its start), with no Python logic: what a
  crash-safe Python plugin on this gRPC server pays before it decides anything.

Each claim holds one NIC VF and a 2-CPU share of a ``cpu-numa<N>`` device, so every numadra prepare
does a GET, config resolution, CPU planning, one CDI spec (mounting the metadata files), a metadata
file per request and one journal write; ``new_inodes_per_claim`` counts the files and directories
one prepared claim adds below each peer's plugin and CDI dirs. The calls are interleaved: every
round makes the same call on each plugin in turn (in a shuffled order), so load on the shared machine
hits all of them alike. The figures of each plugin are in ``peers``; ``ratios_vs_example`` divides
numadra's by the example driver's, with this layout's targets (``floor_vs_example`` and
``floor_io_vs_example``: the floors');
``ratios_vs_go`` divides numadra's by the Go peer's and gives the issue's target for each
(``claim_status_cpu_per_claim`` is numadra with the status writer over numadra without it; RSS and
start-to-registered are numadra's own, with the ratio to Go beside). ``cpu_ms_per_claim`` is the
process's CPU time over the 1-claim rounds (a prepare and an unprepare each) once it went quiet,
per claim. ``start_to_registered_s`` is the median over ``--starts`` cold starts of each plugin
child: spawn until GetInfo and NotifyRegistrationStatus succeeded (the numadra child imports the
prepare path and discovers the host tree first; the ``run_*`` figures are the whole ``numadra run``
process, from bench/startup.py). The Python children run from a bytecode cache, as the image does
(the first start fills it).

With the real kube-apiserver the numadra children connect as a DaemonSet pod does (service address,
CA file, token file: ``driver.kube.incluster``, no official client), the Go peer through a
kubeconfig holding the same token.

Two more figures show where numadra's time goes: ``driver_only_*``, the same prepares through
``ClaimsDriver`` in this process (no gRPC, no HTTP), and ``floor_*``.

Directories follow a node's layout by default: the plugin dirs (journal, metadata files, lock,
the Go peer's checkpoint) on disk under ``--base`` (/tmp here, /var/lib/kubelet/plugins on a node)
and the CDI dirs on tmpfs under ``--cdi-base`` (/dev/shm here, /var/run/cdi on a node);
``--cdi-base /tmp`` puts both on disk, ``--base /dev/shm`` both on tmpfs. ``--claim-reads get``
hides numadra's LIST, as the default RBAC (get only) does, so 32 claims are 32 GETs (the Go helper
always GETs each claim). ``--background N`` keeps N other claims (one exclusive CPU each) prepared
in every plugin during the measurement, as on a busy node. ``--peers`` runs a subset;
``--tree LABEL=PATH`` adds numadra served from another source tree (an older commit), to bisect a
change against the same peers in one run (``trees_vs_example``).

``--node`` is the host the claims are prepared on. ``nvidia`` (the default) is a GPU node as one
runs: the DGX tree's 8 GPUs with UUIDs and DRM nodes, the NVIDIA driver's files and the NVIDIA
container toolkit's CDI spec (``/etc/cdi/nvidia.yaml``, about 22 KB), which numadra reads ahead of
every prepare on a node with NVIDIA GPUs; the numadra children wire the host's edits as ``numadra
run`` does. ``bare`` has no GPU; ``no-userspace`` has the GPUs and no NVIDIA user space. The
measured claims hold no GPU, so a node's kind changes what numadra reads per prepare, not what it
writes; the warning and Event a GPU claim gets on a ``no-userspace`` node are measured by
``bench/gpu_userspace.py --events``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
#: the caller's own grpc experiments, read before ``driver`` is imported (which sets its default):
#: each child starts from these, so a ``--tree`` child runs with the settings of its own tree
CALLER_GRPC_EXPERIMENTS = os.environ.get("GRPC_EXPERIMENTS")

from bench._common import (  # noqa: E402 (needs REPO on sys.path)
    NODE_KINDS,
    claimed_vfs,
    cpu_claim,
    gpu_claim,
    host_edits,
    in_memory_driver,
    nic_cpu_claim,
    nvidia_node,
    rss_mib,
)

DRIVER = "numadra.dev"
NODE = "bench-node"
#: the upstream example driver's name with its default ``gpu`` device profile
EXAMPLE_DRIVER = "gpu.example.com"


class _GetOnly:
    """The client without its LIST: what the driver sees under the default (get-only) RBAC."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> Any:
        return self._client.get_resource_claim(namespace, name)


class _ReadsOnly:
    """The floor: prepares nothing; the kubelet layer still reads and checks every claim.

    Served in place of the driver, it measures the kubelet's gRPC call plus the claim reads alone;
    a latency target minus this floor is what is left for the driver's own work.
    """

    def prepare_claims(self, claims: Any) -> dict[str, Any]:
        from driver.plugin import PrepareResult

        return {claim.ref.uid: PrepareResult() for claim in claims}

    def unprepare_claims(self, claims: Any) -> dict[str, str]:
        return {claim.uid: "" for claim in claims}

    def handle_error(self, err: BaseException, msg: str) -> None:
        raise err


@dataclass(frozen=True)
class _Writes:
    """What numadra writes for one bench claim: file sizes and journal record sizes, in bytes."""

    specs: tuple[int, ...]
    metadata: tuple[int, ...]
    put: int
    remove: int


def _numadra_writes(inventory: Any, scratch: Path) -> _Writes:
    """Prepare and unprepare one bench claim in memory under ``scratch`` and measure what landed."""
    from driver.claims.metadata import metadata_dir, metadata_file_glob
    from driver.kubelet import claims as claim_layer
    from driver.plugin import ClaimRef
    from driver.state.journal import journal_path

    vf, numa = claimed_vfs(inventory, 1)[0]
    uid = str(uuid.uuid4())
    claim = nic_cpu_claim(uid, "probe", vf, numa, driver=DRIVER, node=NODE)
    cdi, plugin = scratch / "cdi", scratch / "plugin"
    driver, fetcher = in_memory_driver(
        inventory, {("bench", "probe"): claim}, driver=DRIVER, node=NODE, cdi_dir=cdi, plugin_dir=plugin
    )
    try:
        driver.reconcile()
        ref = ClaimRef("bench", "probe", uid)
        journal = journal_path(plugin)
        before = journal.stat().st_size if journal.exists() else 0
        result = claim_layer.prepare(driver, fetcher, None, [ref])[uid]
        if result.error:
            raise SystemExit(f"floor_io: the probe claim failed: {result.error}")
        prepared = journal.stat().st_size
        specs = tuple(p.stat().st_size for p in cdi.iterdir())
        metadata = tuple(p.stat().st_size for p in Path(metadata_dir(plugin)).glob(metadata_file_glob(uid)))
        driver.unprepare_claims([ref])
        remove = journal.stat().st_size - prepared
    finally:
        driver.close()
        fetcher.close()
    return _Writes(specs, metadata, prepared - before, remove)


class _WritesOnly(_ReadsOnly):
    """The I/O floor: the claim reads, plus the writes a crash-safe prepare cannot skip.

    Per claim it writes what numadra writes for the bench's claim (``_numadra_writes``: the CDI
    spec in the CDI dir, the metadata files in the plugin dir) as opaque bytes of the same sizes,
    each atomically (a new temp file, then a rename; unsynced, as numadra writes them), then one
    journal record per call of numadra's size a claim, appended and ``fdatasync``ed. Unprepare
    removes the files and appends a synced record of numadra's remove size. No planning,
    rendering, checks or logging: a latency target minus this floor is what is left for a
    driver's Python, whatever it is.
    """

    def __init__(self, cdi_dir: Path, plugin_dir: Path, writes: _Writes) -> None:
        self._writes = writes
        self._cdi = cdi_dir
        self._meta = plugin_dir / "metadata"
        for directory in (self._cdi, self._meta):
            directory.mkdir(parents=True, exist_ok=True)
        self._log = os.open(plugin_dir / "journal.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _paths(self, uid: str) -> list[tuple[Path, int]]:
        specs = [(self._cdi / f"floor_{uid}_{i}.json", size) for i, size in enumerate(self._writes.specs)]
        metas = [(self._meta / f"{uid}_{i}.json", size) for i, size in enumerate(self._writes.metadata)]
        return specs + metas

    @staticmethod
    def _write(path: Path, size: int) -> None:
        temp = path.with_name(f".{path.name}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, b"x" * size)
        finally:
            os.close(fd)
        temp.rename(path)

    def _append(self, size: int) -> None:
        os.write(self._log, b"r" * (size - 1) + b"\n")
        os.fdatasync(self._log)

    def prepare_claims(self, claims: Any) -> dict[str, Any]:
        for claim in claims:
            for path, size in self._paths(claim.ref.uid):
                self._write(path, size)
        self._append(self._writes.put * len(claims))
        return super().prepare_claims(claims)

    def unprepare_claims(self, claims: Any) -> dict[str, str]:
        for claim in claims:
            for path, _ in self._paths(claim.uid):
                path.unlink(missing_ok=True)
        self._append(self._writes.remove)
        return super().unprepare_claims(claims)


def _client(connection: str) -> Any:
    """The child's apiserver client: a kubeconfig path, or (JSON) the in-cluster settings of a pod.

    With the real kube-apiserver numadra connects as a DaemonSet pod does (service address, CA
    file, token file), so RSS and CPU are those of a node; the fake apiserver speaks plain HTTP
    and takes a kubeconfig.
    """
    from driver.kube.client import KubeClient
    from driver.kube.incluster import InCluster

    if not connection.startswith("{"):
        return KubeClient(connection)
    pod = json.loads(connection)
    return KubeClient(in_cluster=InCluster(pod["env"], token_file=pod["token_file"], ca_file=pod["ca_file"]))


def _serve(host: Path, root: Path, cdi_dir: Path, connection: str, claim_reads: str, plugin: str) -> None:
    """Child: the driver's prepare path until stdin closes.

    ``plugin`` is ``driver`` (as ``numadra run --claim-status=false`` wires it), ``status`` (the
    same with the asynchronous claim status writer that ``numadra run`` turns on by default) or
    ``floor`` (only the claim reads).
    """
    import logging

    from driver.claims import ClaimsDriver, claims_journal
    from driver.heap import freeze_startup_heap
    from driver.inventory.discovery import discover
    from driver.kubelet.server import KubeletPluginServer
    from driver.log import configure_logging
    from driver.pinning.planner import CpuPlanner

    configure_logging("json", logging.INFO, cache=True)  # as `numadra run`
    inventory = discover(host, use_nvml=False)
    client = _client(connection)
    claims = client if claim_reads == "list" else _GetOnly(client)
    served: Any
    if plugin == "floor":
        served = _ReadsOnly()
    elif plugin == "floor_io":
        with tempfile.TemporaryDirectory(dir=root) as scratch:
            writes = _numadra_writes(inventory, Path(scratch))
        served = _WritesOnly(cdi_dir, root / "plugin", writes)
    else:
        from driver.claims.parts import NO_STATUS, StatusWriter

        status: StatusWriter = NO_STATUS  # the null part, as numadra run --claim-status=false builds it
        if plugin == "status":
            from driver.claims.status import ClaimStatusWriter
            from driver.claims.statusqueue import AsyncStatusWriter

            def writer() -> ClaimStatusWriter:
                return ClaimStatusWriter(client, driver_name=DRIVER, inventory=inventory, host_root=str(host))

            status = AsyncStatusWriter(writer)
        served = ClaimsDriver(
            driver_name=DRIVER,
            node_name=NODE,
            inventory=lambda: inventory,
            cdi_dir=cdi_dir,
            plugin_dir=root / "plugin",
            journal=claims_journal(
                cdi_dir=cdi_dir, plugin_dir=root / "plugin", driver_name=DRIVER, pool=NODE
            ),
            planner=CpuPlanner(lambda: inventory),
            status=status,
            host_edits=host_edits(host, cdi_dir, DRIVER),  # as numadra run: the node's NVIDIA side
        )
        served.reconcile()
    server = KubeletPluginServer(
        driver_name=DRIVER,
        node_name=NODE,
        registrar_dir=root / "reg",
        plugin_dir=root / "plugin",
        plugin=served,
        claim_source=claims,
    )
    server.start()
    freeze_startup_heap()  # as ``numadra run`` does once started
    sys.stdin.read()  # the parent closes stdin to stop us
    server.stop(grace=0)


def _in_process(
    host: Path, root: Path, cdi_dir: Path, claims: dict[tuple[str, str], Any], refs: list[Any], rounds: int
) -> dict[str, float]:
    """The driver logic alone (no gRPC, no HTTP): the kubelet layer's claim reads from an in-memory
    source, then ClaimsDriver, as the server calls them (``driver.kubelet.claims.prepare``)."""
    import logging

    from driver.inventory.discovery import discover
    from driver.kubelet import claims as claim_layer
    from driver.log import configure_logging

    configure_logging("json", logging.WARNING)
    inventory = discover(host, use_nvml=False)
    driver, fetcher = in_memory_driver(
        inventory, claims, driver=DRIVER, node=NODE, cdi_dir=cdi_dir, plugin_dir=root / "plugin"
    )

    def cycle(batch: list[Any]) -> float:
        t0 = time.perf_counter()
        claim_layer.prepare(driver, fetcher, None, batch)
        dt = (time.perf_counter() - t0) * 1000
        driver.unprepare_claims(batch)
        return dt

    for _ in range(10):
        cycle(refs[:1])
    single = [cycle([refs[i % len(refs)]]) for i in range(rounds * 5)]
    batch = [cycle(refs[1:33]) for _ in range(rounds)]
    driver.close()
    fetcher.close()
    return {
        "driver_only_1_claim_p50_ms": round(statistics.median(single), 2),
        "driver_only_32_claims_p50_ms": round(statistics.median(batch), 2),
    }


#: the peers, in the order they start (each interleaved round shuffles them: ``_round_order``)
PEERS = ("numadra", "numadra_run", "numadra_status", "go", "example", "floor", "floor_io")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its threads so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class _Child:
    """One serving peer: its process, registration and samples."""

    name: str
    argv: list[str]
    reg_sock: Path
    #: the claims this peer prepares (its driver's), and those it keeps prepared meanwhile
    refs: list[Any]
    background: list[Any]
    env: dict[str, str] | None = None  # None: this process's
    cwd: Path | None = None  # None: this process's
    #: how it is stopped: stdin closed (the bench's own children, the Go peers), or this signal
    stop_signal: int | None = None
    #: what must be on disk for a prepared claim UID (``prepared``), or gone once unprepared:
    #: "" when it is so, else what is wrong; None: the peer's own errors are the check
    evidence: Callable[[str, bool], str] | None = None
    proc: subprocess.Popen[bytes] | None = None
    kubelet: Any = None  # its own kubelet client: closed with the process, its sockets go too
    endpoint: str = ""
    registered_s: list[float] = field(default_factory=list)
    prepare_1: list[float] = field(default_factory=list)
    unprepare_1: list[float] = field(default_factory=list)
    prepare_32: list[float] = field(default_factory=list)
    unprepare_32: list[float] = field(default_factory=list)
    cpu_single_s: float = 0.0
    rss_mib: float = float("nan")
    #: the directories the peer writes claims into (plugin dir, CDI dir), for new_inodes_per_claim
    dirs: tuple[Path, ...] = ()
    new_inodes_per_claim: float = float("nan")

    def inodes(self) -> int:
        """Files and directories below the peer's claim directories (sockets and locks included:
        they are there before and after, so a difference counts what the claims made)."""
        return sum(len(dirs) + len(files) for d in self.dirs for _, dirs, files in os.walk(d))

    def start(self) -> None:
        """Spawn and register (GetInfo polled as the kubelet does once the socket is there)."""
        from harness.kubeletclient import KubeletClient

        self.reg_sock.unlink(missing_ok=True)
        self.kubelet = kubelet = KubeletClient()
        started = time.monotonic()
        logs = os.environ.get("NUMADRA_BENCH_LOGS")  # a dir: keep each child's stderr there
        sink = (Path(logs) / f"{self.name}.log").open("ab") if logs else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stderr=sink, env=self.env, cwd=self.cwd
        )
        if logs:
            assert not isinstance(sink, int)
            sink.close()  # the child holds its own copy
        while True:
            if self.reg_sock.exists():
                try:
                    reg = kubelet.register(self.reg_sock)
                    break
                except Exception:  # listening but not answering yet: poll again
                    pass
            if self.proc.poll() is not None:
                raise SystemExit(f"peer {self.name} exited with {self.proc.returncode}")
            time.sleep(0.002)
        self.registered_s.append(time.monotonic() - started)
        self.endpoint = reg.info.endpoint

    def stop(self) -> None:
        if self.proc is None:
            return
        self.kubelet.close()
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        if self.stop_signal is not None:
            self.proc.send_signal(self.stop_signal)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def cycle(
        self,
        batch: list[Any],
        prepared: list[float],
        unprepared: list[float],
        after_prepare: Callable[[_Child], None] | None = None,
    ) -> None:
        """One timed prepare of ``batch`` and one timed unprepare of it; any claim's error ends
        the bench (a peer that fails a claim does less work than one that prepares it)."""
        kubelet = self.kubelet
        t0 = time.perf_counter()
        out = kubelet.prepare(self.endpoint, batch)
        t1 = time.perf_counter()
        errors = [c.error for c in out.claims.values() if c.error]
        if errors or len(out.claims) != len(batch):
            raise SystemExit(f"{self.name}: prepare failed: {errors[:3]}")
        if after_prepare is not None:
            after_prepare(self)
        t2 = time.perf_counter()
        undone = kubelet.unprepare(self.endpoint, batch)
        t3 = time.perf_counter()
        errors = [c.error for c in undone.claims.values() if c.error]
        if errors:
            raise SystemExit(f"{self.name}: unprepare failed: {errors[:3]}")
        prepared.append((t1 - t0) * 1000)
        unprepared.append((t3 - t2) * 1000)


def _after_prepare(child: _Child, inodes_before: int) -> None:
    """Between the untimed prepare and unprepare of ``child.refs[0]``: count the inodes it made,
    and check the peer really wrote the claim (its evidence), so no ratio rests on a no-op."""
    child.new_inodes_per_claim = child.inodes() - inodes_before
    if child.evidence is not None and (problem := child.evidence(child.refs[0].uid, True)):
        raise SystemExit(f"{child.name}: prepare reported success without its files: {problem}")


def _example_evidence(cdi_dir: Path, plugin_dir: Path) -> Callable[[str, bool], str]:
    """The example driver's files of a claim: its CDI spec (``k8s.<driver>-gpu_<uid>.yaml``) and
    the UID in its checkpoint (``<plugins dir>/<driver>/checkpoint.json``)."""
    checkpoint = plugin_dir / EXAMPLE_DRIVER / "checkpoint.json"

    def evidence(uid: str, prepared: bool) -> str:
        specs = list(cdi_dir.glob(f"*{uid}*"))
        try:
            journaled = uid in checkpoint.read_text()
        except OSError as exc:
            return f"cannot read {checkpoint}: {exc}"
        if prepared and not specs:
            return f"no CDI spec naming {uid} in {cdi_dir}"
        if prepared and not journaled:
            return f"{uid} is not in {checkpoint}"
        if not prepared and (specs or journaled):
            return f"{uid} still has {[p.name for p in specs]} or an entry in {checkpoint}"
        return ""

    return evidence


def _settle(children: list[_Child], quiet_s: float = 0.3, cap_s: float = 20.0) -> None:
    """Wait until no child used CPU for ``quiet_s`` (queued claim status writes are done)."""
    deadline = time.monotonic() + cap_s
    last = [_cpu_s(c.proc.pid) for c in children if c.proc]
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = [_cpu_s(c.proc.pid) for c in children if c.proc]
        if all(b - a < 0.005 for a, b in zip(last, now, strict=True)):
            return
        last = now


def _round_order(children: list[_Child], round_no: int) -> list[_Child]:
    """The peers in round ``round_no``'s order: shuffled, the same for the same round in every run.

    A rotation keeps the cyclic order, so each peer always follows the same neighbour; measured
    with two copies of one tree, the copy right after the Go example driver spent 2-4% more CPU
    per claim than the other (its caches are the coldest). Shuffled, each peer follows each other
    alike, and none is always first after another's burst of work.
    """
    order = list(children)
    random.Random(round_no).shuffle(order)
    return order


def _measure(children: list[_Child], n_single: int, n_batch: int, starts: int) -> None:
    """Time every peer against the same apiserver, interleaved call by call.

    First one start of every Python child that only fills the bytecode cache and is not counted:
    the image runs from bytecode, and the child that compiles the standard library and
    site-packages into an empty cache keeps that compile in its start time and about 6 MiB of
    steady RSS (the first peer started paid it, whichever it was). Then ``starts - 1`` extra
    cold starts per peer (interleaved), then one start that stays up
    for the calls: background prepares, warm-up, ``n_single`` rounds of a 1-claim prepare and
    unprepare per peer, then ``n_batch`` rounds of 32 claims, each round in an order of its own
    (:func:`_round_order`). CPU per claim is the child's
    CPU time over the 1-claim rounds, read after it went quiet (so the claim status writes that
    were queued are counted), divided by the claims prepared.
    """
    for child in children:
        if child.argv[0] == sys.executable:
            child.start()
            child.stop()
            child.registered_s.clear()
    for _ in range(starts - 1):
        for child in children:
            child.start()
            child.stop()
    try:
        for child in children:
            child.start()
        for child in children:
            background = child.background
            for start in range(0, len(background), 32):
                out = child.kubelet.prepare(child.endpoint, background[start : start + 32])
                errors = [c.error for c in out.claims.values() if c.error]
                if errors:
                    raise SystemExit(f"{child.name}: background prepare failed: {errors[:3]}")
            for _ in range(20):  # warm-up: connections, imports, caches
                child.cycle(child.refs[:1], [], [])
            # what one prepared claim leaves on disk, beyond what the peer had before
            before = child.inodes()
            child.cycle(child.refs[:1], [], [], after_prepare=partial(_after_prepare, inodes_before=before))
            if child.evidence is not None and (problem := child.evidence(child.refs[0].uid, False)):
                raise SystemExit(f"{child.name}: unprepare left its files: {problem}")
        _settle(children)
        cpu0 = {c.name: _cpu_s(c.proc.pid) for c in children if c.proc}
        for i in range(n_single):
            for child in _round_order(children, i):
                child.cycle([child.refs[i % len(child.refs)]], child.prepare_1, child.unprepare_1)
        _settle(children)
        for child in children:
            assert child.proc is not None
            child.cpu_single_s = _cpu_s(child.proc.pid) - cpu0[child.name]
        for i in range(n_batch):
            for child in _round_order(children, n_single + i):
                child.cycle(child.refs[1:33], child.prepare_32, child.unprepare_32)
        _settle(children)
        for child in children:
            assert child.proc is not None
            child.rss_mib = rss_mib(child.proc.pid)
    finally:
        for child in children:
            child.stop()


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextlib.contextmanager
def _apiserver(
    kind: str, workdir: Path
) -> Iterator[tuple[str, str, Callable[[dict[str, Any]], str], Callable[[str], None] | None]]:
    """Yield (kubeconfig path, numadra's connection, put_claim, put_node) for the fake apiserver or
    the real kube-apiserver (numadra's connection: see :func:`_client`).

    ``put_claim`` stores an allocated claim and returns its UID; ``put_node`` (real one only)
    creates a Node, which the example driver's slice publisher needs as its slices' owner. The
    real one (etcd + kube-apiserver v1.37.2 from tests/e2e/build-bins.sh) makes the claim GET what
    it is in a cluster: a Go server on loopback; the fake one is Python in this process, so its GETs also
    compete with the bench's own gRPC client for the GIL.
    """
    if kind == "fake":
        from harness.fakeapiserver import FakeApiServer

        with FakeApiServer() as api:

            def put_fake(obj: dict[str, Any]) -> str:
                api.put_object(obj)
                return str(obj["metadata"]["uid"])

            yield api.kubeconfig_path, api.kubeconfig_path, put_fake, None
        return

    from harness.controlplane import ControlPlane, binary_dir, missing_binaries, write_kubeconfig

    bins = binary_dir()
    if missing_binaries(bins):
        raise SystemExit(f"--apiserver real needs {bins} (run tests/e2e/build-bins.sh)")
    plane = ControlPlane(bin_dir=bins, root=workdir / "cp", node_name=NODE)
    plane.root.mkdir()
    try:
        plane.start()
        admin = plane.admin
        assert admin is not None
        token = admin.token
        kubeconfig = write_kubeconfig(
            plane.root / "bench.kubeconfig", plane.server, plane.ca_file, token, "admin"
        )
        namespaces: set[str] = set()

        def put_real(obj: dict[str, Any]) -> str:
            namespace = obj["metadata"]["namespace"]
            if namespace not in namespaces:
                admin.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
                namespaces.add(namespace)
            base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
            body = {k: v for k, v in obj.items() if k != "status"}
            body["metadata"] = {"name": obj["metadata"]["name"], "namespace": namespace}
            admin.create(base, body)
            # a merge patch, not a PUT: the apiserver keeps a PUT's opaque parameters byte for
            # byte (json.dumps' spaces), and then refuses every server-side apply of the status
            stored = admin.patch(f"{base}/{obj['metadata']['name']}/status", {"status": obj["status"]})
            return str(stored["metadata"]["uid"])

        token_file = plane.root / "bench.token"
        token_file.write_text(token)
        server = urlsplit(plane.server)
        pod = {
            "env": {"KUBERNETES_SERVICE_HOST": server.hostname, "KUBERNETES_SERVICE_PORT": str(server.port)},
            "token_file": str(token_file),
            "ca_file": str(plane.ca_file),
        }

        def put_node(name: str) -> None:
            admin.create("/api/v1/nodes", {"metadata": {"name": name}})

        yield str(kubeconfig), json.dumps(pod), put_real, put_node
    finally:
        plane.stop()


def _real_process(base: str) -> dict[str, Any]:
    """The same two figures for the whole ``numadra run`` process (bench/startup.py)."""
    from bench.startup import measure

    run = measure(base, starts=3, prepares=100)
    return {
        "run_start_to_registered_s": run["start_to_registered_s_median"],
        "run_steady_rss_mib": run["steady_rss_mib"],
    }


#: the issue's targets: numadra's figure over the Go peer's (or, where no ratio, the bound itself)
TARGETS: dict[str, tuple[str, float]] = {
    "prepare_1_claim_p50": ("ratio <=", 0.8),
    "prepare_32_claims_p50": ("ratio <=", 0.25),
    "unprepare_1_claim_p50": ("ratio <=", 1.0),
    "cpu_per_claim": ("ratio <=", 1.0),
    "claim_status_cpu_per_claim": ("status on / off <=", 1.25),
    "steady_rss_mib": ("MiB <=", 64.0),
    "start_to_registered_s": ("s <=", 0.1),
}


#: the targets against the upstream example driver (numadra's figure over its), per layout
EXAMPLE_TARGETS: dict[str, dict[str, float]] = {
    "tmpfs": {
        "prepare_1_claim_p50": 1.0,
        "cpu_per_claim": 1.1,
        "unprepare_1_claim_p50": 1.2,
        "prepare_32_claims_p50": 0.25,
    },
    "node": {
        "prepare_1_claim_p50": 0.8,
        "cpu_per_claim": 0.8,
        "unprepare_1_claim_p50": 0.8,
        "prepare_32_claims_p50": 0.8,
    },
}

#: each ratio's figure in ``peers``
_RATIO_FIGURES = {
    "prepare_1_claim_p50": "prepare_1_claim_p50_ms",
    "cpu_per_claim": "cpu_ms_per_claim",
    "unprepare_1_claim_p50": "unprepare_1_claim_p50_ms",
    "prepare_32_claims_p50": "prepare_32_claims_p50_ms",
}


def _ratios_vs(
    peers: dict[str, dict[str, float]], peer: str, targets: dict[str, float], ours: str = "numadra"
) -> dict[str, Any] | None:
    """``ours`` over ``peer`` for each targeted figure, with the target and whether it is met
    (None when either peer did not run)."""
    if ours not in peers or peer not in peers:
        return None
    out: dict[str, Any] = {}
    for key, bound in targets.items():
        figure = _RATIO_FIGURES[key]
        value = peers[ours][figure] / peers[peer][figure]
        out[key] = {"value": round(value, 3), "target": f"ratio <= {bound}", "met": value <= bound}
    return out


def _tree(spec: str) -> tuple[str, Path]:
    """``[run:]LABEL=PATH`` of ``--tree`` -> (peer name, tree), checked to hold a bench child."""
    label, _, path = spec.partition("=")
    kind, _, label = label.rpartition(":")
    tree = Path(path).resolve()
    if kind not in ("", "run") or not label or not (tree / "bench" / "prepare.py").is_file():
        raise SystemExit(f"--tree {spec!r}: want [run:]LABEL=PATH, PATH a source tree with bench/prepare.py")
    if kind and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?", label):
        raise SystemExit(f"--tree {spec!r}: a run tree's LABEL names its driver: a DNS label, say `old`")
    return f"numadra{'_run' if kind else ''}@{label}", tree


def _on_tmpfs(path: Path) -> bool:
    """Whether ``path`` lies on a tmpfs (the longest mount point above it, /proc/self/mountinfo)."""
    best, fstype = "", ""
    resolved = str(path.resolve())
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mount = fields[4]
        kind = fields[fields.index("-") + 1]
        inside = resolved == mount or resolved.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, fstype = mount, kind
    return fstype == "tmpfs"


def _run_argv(
    host: Path,
    reg: Path,
    plugin_dir: Path,
    cdi: Path,
    kubeconfig: str,
    driver: str = DRIVER,
    node: str = NODE,
) -> list[str]:
    """``numadra run`` as deploy/ runs it (metrics served, so the per-call metrics and the
    housekeeping round after every call are measured), on the bench's dirs and host tree.

    It takes the kubeconfig (the in-cluster token path is fixed) and keeps its own settings but
    three: claim status off (its cost is ``numadra_status``'s figure), no hot-plug watch, and one
    health poll an hour, so that CPU per claim counts the calls and not the idle loop.
    """
    return [
        sys.executable,
        "-m",
        "driver.cli",
        "run",
        f"--node-name={node}",
        f"--host-root={host}",
        f"--kubeconfig={kubeconfig}",
        f"--registrar-dir={reg}",
        f"--plugin-dir={plugin_dir}",
        f"--cdi-dir={cdi}",
        "--metrics-address=127.0.0.1:0",
        "--log-format=json",
        "--hotplug=off",
        "--health-interval=3600",
        "--no-claim-status",
        f"--driver-name={driver}",
    ]


def run_tree_driver(peer: str) -> str:
    """The driver name of a ``numadra_run@LABEL`` peer: ``LABEL.numadra.dev``, its claims its own."""
    return f"{peer.partition('@')[2]}.{DRIVER}"


def run_tree_node(driver: str) -> str:
    """The node a ``numadra_run@LABEL`` peer serves: one of its own. On one node, each `numadra
    run` would see the other's slices as another DRA driver's devices on its node, withhold
    them, and refuse every claim as held by the other (what it must do on a real node)."""
    return f"{NODE}-{driver.partition('.')[0]}"


def _example_argv(
    binary: Path, kubeconfig: str, reg: Path, plugins: Path, cdi: Path, devices: int
) -> list[str]:
    """The example driver's kubelet plugin as its chart runs it, on the bench's dirs.

    Its plugin data dir is ``<plugins>/gpu.example.com`` (DRA socket, checkpoint); it publishes
    ``devices`` fake GPUs ``gpu-<i>`` in pool ``bench-node``, so each claim gets a device of its
    own. Its client-go rate limiter is off as the goprep peer's is (at the default 5 QPS the
    interleaved 1-claim rounds alone would wait for tokens).
    """
    return [
        str(binary),
        f"--node-name={NODE}",
        f"--cdi-root={cdi}",
        f"--kubelet-registrar-directory-path={reg}",
        f"--kubelet-plugins-directory-path={plugins}",
        f"--kubeconfig={kubeconfig}",
        "--kube-api-qps=-1",
        "--device-profile=gpu",
        f"--num-devices={devices}",
    ]


def _figures(child: _Child, n_single: int) -> dict[str, float]:
    med = statistics.median
    return {
        "prepare_1_claim_p50_ms": round(med(child.prepare_1), 2),
        "prepare_1_claim_p99_ms": round(_pct(child.prepare_1, 0.99), 2),
        "unprepare_1_claim_p50_ms": round(med(child.unprepare_1), 2),
        "prepare_32_claims_p50_ms": round(med(child.prepare_32), 2),
        "prepare_32_claims_p99_ms": round(_pct(child.prepare_32, 0.99), 2),
        "unprepare_32_claims_p50_ms": round(med(child.unprepare_32), 2),
        "cpu_ms_per_claim": round(child.cpu_single_s * 1000 / n_single, 3),
        "steady_rss_mib": round(child.rss_mib, 1),
        "start_to_registered_s": round(med(child.registered_s), 3),
        "new_inodes_per_claim": child.new_inodes_per_claim,
    }


def _ratios(peers: dict[str, dict[str, float]]) -> dict[str, Any]:
    """numadra over the Go peer for each figure, with the issue's target and whether it is met."""
    ours, go, status = peers["numadra"], peers["go"], peers["numadra_status"]
    measured = {
        "prepare_1_claim_p50": ours["prepare_1_claim_p50_ms"] / go["prepare_1_claim_p50_ms"],
        "prepare_32_claims_p50": ours["prepare_32_claims_p50_ms"] / go["prepare_32_claims_p50_ms"],
        "unprepare_1_claim_p50": ours["unprepare_1_claim_p50_ms"] / go["unprepare_1_claim_p50_ms"],
        "cpu_per_claim": ours["cpu_ms_per_claim"] / go["cpu_ms_per_claim"],
        "claim_status_cpu_per_claim": status["cpu_ms_per_claim"] / ours["cpu_ms_per_claim"],
        "steady_rss_mib": ours["steady_rss_mib"],
        "start_to_registered_s": ours["start_to_registered_s"],
    }
    out: dict[str, Any] = {}
    for key, value in measured.items():
        unit, bound = TARGETS[key]
        out[key] = {"value": round(value, 3), "target": f"{unit} {bound}", "met": value <= bound}
    out["steady_rss_vs_go"] = {"value": round(ours["steady_rss_mib"] / go["steady_rss_mib"], 3)}
    out["new_inodes_per_claim"] = {"numadra": ours["new_inodes_per_claim"], "go": go["new_inodes_per_claim"]}
    out["start_to_registered_vs_go"] = {
        "value": round(ours["start_to_registered_s"] / go["start_to_registered_s"], 3)
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--serve",
        nargs=6,
        metavar=("HOST", "ROOT", "CDI", "CONNECTION", "READS", "PLUGIN"),
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--single", type=int, default=300, help="1-claim rounds (each peer, each round)")
    parser.add_argument("--batch", type=int, default=40, help="32-claim rounds (each peer, each round)")
    parser.add_argument("--starts", type=int, default=5, help="cold starts of each peer (median reported)")
    parser.add_argument("--base", default="/tmp", help="where the plugin dirs (journal, metadata) live")
    parser.add_argument("--cdi-base", default="/dev/shm", help="where the CDI dirs live (tmpfs on a node)")
    parser.add_argument(
        "--claim-reads",
        choices=("list", "get"),
        default="list",
        help="list: the client may LIST claims (rbac.listClaims); get: GETs only (default RBAC)",
    )
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help=f"comma-separated peers to run (numadra always; default: all of {','.join(PEERS)})",
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="one more numadra peer, `numadra@LABEL`, served from the source tree at PATH (say "
        "`git archive COMMIT | tar -x -C PATH`): bisect a change against the same peers in one run; "
        "run:LABEL=PATH runs that tree's `numadra run` (`numadra_run@LABEL`)",
    )
    parser.add_argument("--background", type=int, default=0, help="other claims kept prepared meanwhile")
    parser.add_argument(
        "--node",
        choices=NODE_KINDS,
        default="nvidia",
        help="the node the claims are prepared on (bench/_common.py's nvidia_node): nvidia (its 8 GPUs "
        "with their driver's files and the NVIDIA toolkit's CDI spec in /etc/cdi, as a GPU node), "
        "bare (no GPU), no-userspace (the GPUs without any NVIDIA user space)",
    )
    parser.add_argument(
        "--apiserver",
        choices=("auto", "real", "fake"),
        default="auto",
        help="where claims are fetched from: the real kube-apiserver (auto: when its binaries exist)",
    )
    parser.add_argument(
        "--no-run-process",
        action="store_true",
        help="skip the run_* figures of the whole `numadra run` process (bench/startup.py)",
    )
    args = parser.parse_args()
    if args.serve:
        host, root_, cdi, connection_, reads, plugin = args.serve
        _serve(Path(host), Path(root_), Path(cdi), connection_, reads, plugin)
        return

    import logging

    from bench._gopeer import GoPeerError, example_peer_binary, go_peer_binary
    from driver.log import configure_logging
    from driver.plugin import ClaimRef
    from harness.topologies import TOPOLOGIES

    configure_logging("console", logging.WARNING)  # stdout is the JSON figures, nothing else
    wanted = tuple(p for p in PEERS if p in args.peers.split(","))
    trees = dict(_tree(spec) for spec in args.tree)
    if "numadra" not in wanted or len(wanted) < 2:
        raise SystemExit(f"--peers must name numadra and at least one of {PEERS[1:]}")
    try:
        go_binary = go_peer_binary() if "go" in wanted else None
        example_binary = example_peer_binary() if "example" in wanted else None
    except GoPeerError as exc:
        raise SystemExit(f"bench/prepare.py: {exc}") from exc
    root = Path(tempfile.mkdtemp(prefix="bp", dir=args.base))
    cdi_root = Path(tempfile.mkdtemp(prefix="bp", dir=args.cdi_base))
    try:
        for name in (*PEERS, *trees, "inproc"):
            for sub in ("reg", "plugin"):
                (root / name / sub).mkdir(parents=True)
            (cdi_root / name).mkdir()
        host = root / "host"
        nvidia_node(host, TOPOLOGIES["dgx"], args.node)
        from driver.inventory.discovery import discover

        inventory = discover(host, use_nvml=False)
        vfs = claimed_vfs(inventory, 33)
        # CPUs left per NUMA node once the measured claims (2 CPUs each) hold theirs: the
        # background claims (1 CPU each) go to the node with the most left
        room = {node.id: 0 for node in inventory.numa_nodes}
        for cpu in inventory.cpus:
            room[cpu.numa_node] = room.get(cpu.numa_node, 0) + 1
        for _, node_id in vfs:
            room[node_id] = room.get(node_id, 0) - 2

        apiserver = args.apiserver
        if apiserver == "auto":
            from harness.controlplane import binary_dir, missing_binaries

            apiserver = "fake" if missing_binaries(binary_dir()) else "real"
        if apiserver != "real":  # these publish slices: the real apiserver only
            wanted = tuple(p for p in wanted if p not in ("example", "numadra_run"))
        with _apiserver(apiserver, root) as (kubeconfig, connection, put_claim, put_node):
            background_numa: list[int] = []
            for _ in range(args.background):
                numa = max(room, key=lambda n: room[n])
                room[numa] -= 1
                background_numa.append(numa)
            objects: dict[tuple[str, str], Any] = {}

            def numadra_claims(
                driver: str, namespace: str, node_name: str = NODE
            ) -> tuple[list[ClaimRef], list[ClaimRef]]:
                """The measured claims of ``driver`` in ``namespace``, and its background claims."""
                refs: list[ClaimRef] = []
                for i, (vf, node) in enumerate(vfs):
                    name = f"claim-{i}"
                    seed = f"bench-{i}" if namespace == "bench" else f"{namespace}-{i}"
                    claim_uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, seed))
                    obj = nic_cpu_claim(claim_uid, name, vf, node, driver=driver, node=node_name)
                    obj["metadata"]["namespace"] = namespace
                    uid = put_claim(obj)
                    obj["metadata"]["uid"] = uid
                    objects[(namespace, name)] = obj
                    refs.append(ClaimRef(namespace, name, uid))
                background: list[ClaimRef] = []
                for i, numa in enumerate(background_numa):
                    name = f"{namespace}-{i}"
                    obj = cpu_claim(str(uuid.uuid4()), name, numa, driver=driver, node=node_name)
                    obj["metadata"]["namespace"] = "background"  # other pods' claims, not in the LIST
                    uid = put_claim(obj)
                    background.append(ClaimRef("background", name, uid))
                return refs, background

            refs, background = numadra_claims(DRIVER, "bench")
            # each further `numadra run` publishes slices under a driver name of its own: two
            # publishers of one driver and node would rewrite each other's slices all the while
            run_trees = {name: run_tree_driver(name) for name in trees if name.startswith("numadra_run@")}
            run_claims = {
                name: numadra_claims(driver, f"run-{driver.partition('.')[0]}", run_tree_node(driver))
                for name, driver in run_trees.items()
            }
            # the example driver's own claims: one fake GPU each (its slices publish gpu-0..N-1)
            example_refs: list[ClaimRef] = []
            example_background: list[ClaimRef] = []
            if put_node is not None and ({"example", "numadra_run"} & set(wanted) or run_trees):
                put_node(NODE)  # the slices' owner
                for driver in run_trees.values():
                    put_node(run_tree_node(driver))
            if "example" in wanted:
                for i in range(len(refs) + args.background):
                    name = f"example-{i}"
                    obj = gpu_claim(str(uuid.uuid4()), name, f"gpu-{i}", driver=EXAMPLE_DRIVER, node=NODE)
                    # a namespace of its own: numadra's LIST of "bench" reads numadra's claims only
                    obj["metadata"]["namespace"] = "background" if i >= len(refs) else "example"
                    uid = put_claim(obj)
                    namespace = obj["metadata"]["namespace"]
                    (example_refs if i < len(refs) else example_background).append(
                        ClaimRef(namespace, name, uid)
                    )
            children: list[_Child] = []
            # the Python children run from bytecode, as in the image (bench/startup.py); the first
            # start of each fills the cache
            from bench.startup import child_env

            bytecode_env = child_env(root / "pycache")
            bytecode_env.pop("GRPC_EXPERIMENTS", None)
            if CALLER_GRPC_EXPERIMENTS is not None:
                bytecode_env["GRPC_EXPERIMENTS"] = CALLER_GRPC_EXPERIMENTS
            for name in (*wanted, *trees):
                peer_root, peer_cdi = root / name, cdi_root / name
                reg, plugin_dir = peer_root / "reg", peer_root / "plugin"
                child = _Child(
                    name,
                    [],
                    reg / f"{DRIVER}-reg.sock",
                    refs,
                    background,
                    env=bytecode_env,
                    dirs=(plugin_dir, peer_cdi),
                )
                if name == "go":
                    assert go_binary is not None
                    child.argv = [
                        str(go_binary),
                        f"--kubeconfig={kubeconfig}",
                        f"--registrar-dir={reg}",
                        f"--plugin-dir={plugin_dir}",
                        f"--cdi-dir={peer_cdi}",
                    ]
                elif name == "example":
                    assert example_binary is not None
                    child.argv = _example_argv(
                        example_binary, kubeconfig, reg, plugin_dir, peer_cdi, len(refs) + args.background
                    )
                    child.reg_sock = reg / f"{EXAMPLE_DRIVER}-reg.sock"
                    child.refs, child.background = example_refs, example_background
                    child.env = {**os.environ, "NODE_NAME": NODE}
                    child.evidence = _example_evidence(peer_cdi, plugin_dir)
                elif name == "numadra_run":
                    child.argv = _run_argv(host, reg, plugin_dir, peer_cdi, kubeconfig)
                    child.stop_signal = signal.SIGTERM
                elif name in run_trees:
                    driver = run_trees[name]
                    child.argv = _run_argv(
                        host, reg, plugin_dir, peer_cdi, kubeconfig, driver, run_tree_node(driver)
                    )
                    child.reg_sock = reg / f"{run_trees[name]}-reg.sock"
                    child.refs, child.background = run_claims[name]
                    child.cwd = trees[name]  # ``-m driver.cli`` imports from the working directory first
                    child.stop_signal = signal.SIGTERM
                elif name in trees:
                    script = trees[name] / "bench" / "prepare.py"
                    # before the pod connection, a tree's child took a kubeconfig
                    takes_pod = "CONNECTION" in script.read_text()
                    child.argv = [sys.executable, str(script), "--serve", str(host), str(peer_root)]
                    child.argv += [str(peer_cdi), connection if takes_pod else kubeconfig]
                    child.argv += [args.claim_reads, "driver"]
                else:
                    plugin = {"numadra": "driver", "numadra_status": "status"}.get(name, name)
                    child.argv = [sys.executable, __file__, "--serve", str(host), str(peer_root)]
                    child.argv += [str(peer_cdi), connection, args.claim_reads, plugin]
                children.append(child)
            _measure(children, args.single, args.batch, max(1, args.starts))
        peers = {child.name: _figures(child, args.single) for child in children}
        ours = peers["numadra"]
        floor = peers.get("floor")
        layout = "tmpfs" if _on_tmpfs(root) and _on_tmpfs(cdi_root) else "node"
        result: dict[str, Any] = {
            "claims_per_batch": 32,
            "single_rounds": args.single,
            "batch_rounds": args.batch,
            "layout": layout,
            "ratios_vs_example": _ratios_vs(peers, "example", EXAMPLE_TARGETS[layout]),
            "run_vs_example": _ratios_vs(peers, "example", EXAMPLE_TARGETS[layout], ours="numadra_run"),
            "floor_vs_example": _ratios_vs(peers, "example", EXAMPLE_TARGETS[layout], ours="floor"),
            "floor_io_vs_example": _ratios_vs(peers, "example", EXAMPLE_TARGETS[layout], ours="floor_io"),
            "ratios_vs_go": _ratios(peers) if {"go", "numadra_status", "floor"} <= peers.keys() else None,
            "trees_vs_example": {
                name: _ratios_vs(peers, "example", EXAMPLE_TARGETS[layout], ours=name) for name in trees
            },
            "peers": peers,
            # numadra's own figures, under the names earlier runs printed
            "prepare_1_claim_p50_ms": ours["prepare_1_claim_p50_ms"],
            "prepare_1_claim_p99_ms": ours["prepare_1_claim_p99_ms"],
            "prepare_32_claims_p50_ms": ours["prepare_32_claims_p50_ms"],
            "prepare_32_claims_p99_ms": ours["prepare_32_claims_p99_ms"],
            "ratio_32_to_1_p50": round(ours["prepare_32_claims_p50_ms"] / ours["prepare_1_claim_p50_ms"], 2),
            "start_to_registered_s": ours["start_to_registered_s"],
            "driver_steady_rss_mib": ours["steady_rss_mib"],
            **({} if args.no_run_process else _real_process(args.base)),
            **_in_process(host, root / "inproc", cdi_root / "inproc", objects, refs, max(10, args.batch)),
            "floor_1_claim_p50_ms": floor["prepare_1_claim_p50_ms"] if floor else None,
            "floor_32_claims_p50_ms": floor["prepare_32_claims_p50_ms"] if floor else None,
            "plugin_dir_on": args.base,
            "cdi_dir_on": args.cdi_base,
            "claim_reads": args.claim_reads,
            "background_claims": args.background,
            "apiserver": apiserver,
            "node": args.node,
            "go_peer": go_binary.name if go_binary else None,
            "example_peer": example_binary.name if "example" in wanted and example_binary else None,
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(cdi_root, ignore_errors=True)


if __name__ == "__main__":
    main()
