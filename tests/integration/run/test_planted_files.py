"""``numadra run`` with something planted at a path it reads: it starts and serves, or refuses by name.

Each planted kind (``tests/support/planted.py``: a FIFO, a unix socket, a directory, links to
``/dev/zero`` and to a FIFO, a sparse terabyte, a file over every cap) goes at each path the
driver reads, one list (:data:`READS`) spelled with the code's own path helpers. Within a
deadline the real process either registers and answers a prepare and an unprepare over the DRA
socket, or exits 1 with one line that names the path; which of the two is the contract per path:
only the journal, the serialize lock (not a regular file) and a lost claim's spec (a regular file
too large to be numadra's: its devices are unknown) may stop the start. Before the fix a FIFO at
``health-faults.json`` or under a claim's name in the CDI dir hung the start with nothing logged
(case 2 of issue 20).

The host tree is read by the same reader; every path discovery and the health reader open is
recorded from the code and planted at once per kind (:func:`test_every_host_path_planted_at_once`),
and two of them go through the real process as well.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import grpc
import pytest

from driver.claims.metadata import metadata_dir
from driver.claims.render import claim_spec_file_name
from driver.health.clear import clear_dir
from driver.health.signals import HEALTH_FAULTS_FILE, SignalReader
from driver.inventory import sysfs
from driver.inventory.discovery import discover
from driver.kubelet.paths import SERIALIZE_LOCK_NAME
from driver.plugin import ClaimRef
from driver.state.journal import RECOVERIES_FILE, journal_path
from harness.hosttree import TOPOLOGIES, write_host_tree
from harness.poll import wait_for
from tests.integration.run.conftest import (
    DRIVER,
    GPU,
    OTHER_GPU,
    DriverProcess,
    RunNode,
    gpu_cpu_claim,
    load_slack,
)
from tests.support.planted import PLANTS, plant

pytestmark = pytest.mark.fault

#: a claim UID no claim has: its spec and stream in the dirs mean "the journal lost it"
LOST_UID = "7b2e9c41-5d3a-4f6e-8a1b-00000000f00d"
KINDS = sorted(PLANTS)
OVERSIZED = frozenset({"sparse-1TiB", "huge"})
NOT_REGULAR = frozenset(KINDS) - OVERSIZED
ALL = frozenset(KINDS)
NONE: frozenset[str] = frozenset()
#: what "within seconds" means on an idle machine; scaled by the load (conftest.load_slack)
DEADLINE_S = 30.0


@dataclass(frozen=True)
class Read:
    """A path ``numadra run`` reads, and the kinds after which it must refuse to start."""

    path: Callable[[RunNode], Path]
    refuses: frozenset[str]


def _host_path(node: RunNode, prefix: str) -> Path:
    """The first file under ``prefix`` that the host readers open (recorded from the code)."""
    return next(p for p in host_reads(node.host) if p.relative_to(node.host).as_posix().startswith(prefix))


#: every path numadra run reads, by role; the paths come from the code's helpers. The NRI
#: pinner lock is opened only when the runtime creates a container: planted in
#: tests/integration/pinning/test_nri_untrusted.py, over the real NRI socket
READS: dict[str, Read] = {
    "journal": Read(lambda n: journal_path(n.plugin_dir), ALL),
    "recoveries-log": Read(lambda n: journal_path(n.plugin_dir).with_name(RECOVERIES_FILE), NONE),
    "serialize-lock": Read(lambda n: n.plugin_dir / SERIALIZE_LOCK_NAME, NOT_REGULAR),
    "health-faults": Read(lambda n: n.plugin_dir / HEALTH_FAULTS_FILE, NONE),
    "health-clear": Read(lambda n: Path(clear_dir(n.plugin_dir)) / f"{GPU}.json", NONE),
    "lost-claim-spec": Read(lambda n: n.cdi_dir / claim_spec_file_name(DRIVER, LOST_UID), OVERSIZED),
    "lost-claim-stream": Read(lambda n: Path(metadata_dir(n.plugin_dir)) / f"{LOST_UID}_gpu.json", NONE),
    "host-procfs": Read(lambda n: _host_path(n, "proc/"), NONE),
    "host-sysfs-cpu": Read(lambda n: _host_path(n, "sys/devices/system/cpu/"), NONE),
}


def host_reads(host: Path) -> list[Path]:
    """Every file discovery and the health reader open under ``host``, in order, recorded by
    wrapping the one reader they share (``driver.inventory.sysfs`` over ``read_file``)."""
    reader_of_sysfs = vars(sysfs)["read_file"]  # driver.untrusted.files.read_file
    with mock.patch.object(sysfs, "read_file", wraps=reader_of_sysfs) as recorder:  # passes through
        inventory = discover(host, use_nvml=False)
        reader = SignalReader(str(host), use_nvml=False)
        for _, device in inventory.devices():
            reader.read(device)
    seen = dict.fromkeys(Path(call.args[0]) for call in recorder.call_args_list)
    return [p for p in seen if p.is_relative_to(host)]


def _outcome(node: RunNode, process: DriverProcess, deadline: float) -> str:
    """ "served" once registered and a prepare and an unprepare answered; "refused" on an exit."""
    wait_for(
        lambda: node.registration_socket.exists() or process.proc.poll() is not None,
        deadline,
        "registration or exit (a hang is what the planted file used to cause)",
    )
    try:
        if process.proc.poll() is None:
            node.kubelet.register(node.registration_socket)
            uid = str(uuid.uuid4())
            ref = ClaimRef("default", f"c-{uid[:8]}", uid)
            node.api.put_object(gpu_cpu_claim(uid, ref.name))
            prepared = node.kubelet.prepare(node.dra_socket, [ref], timeout=deadline)
            assert prepared.claims[uid].error == "", prepared.claims[uid].error
            unprepared = node.kubelet.unprepare(node.dra_socket, [ref], timeout=deadline)
            assert unprepared.claims[uid].error == ""
            return "served"
    except grpc.RpcError as exc:
        # a start refused once the sockets serve ends the calls it held (UNAVAILABLE), then exits
        if exc.code() is not grpc.StatusCode.UNAVAILABLE and process.proc.poll() is None:
            raise
    assert process.wait(deadline) == 1, process.log_text()[-2000:]
    return "refused"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("role", sorted(READS))
def test_numadra_run_starts_or_refuses_by_name(node: RunNode, role: str, kind: str) -> None:
    read = READS[role]
    path = read.path(node)
    plant(kind, path)
    deadline = DEADLINE_S * load_slack()
    process = node.spawn()
    outcome = _outcome(node, process, deadline)
    want = "refused" if kind in read.refuses else "served"
    assert outcome == want, process.log_text()[-3000:]
    if outcome == "refused":
        last = process.log_text().strip().splitlines()[-1]
        assert last.startswith("numadra: ") and str(path) in last, last
        assert "Traceback" not in process.log_text()
    else:
        assert process.stop() == 0


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return write_host_tree(tmp_path / "host", TOPOLOGIES["workstation"])


@pytest.mark.parametrize("kind", sorted(NOT_REGULAR | {"sparse-1TiB"}))
def test_every_host_path_planted_at_once(host: Path, kind: str) -> None:
    """Every sysfs/procfs file the readers open, replaced by ``kind`` at once: discovery and a
    health reading finish (an odd attribute reads as absent) in a thread, within the deadline."""
    paths = host_reads(host)
    assert len(paths) > 50  # the recording saw the readers at work
    files = {os.path.realpath(p): p for p in paths}  # one file may be reached through two links
    for path in files.values():
        plant(kind, path)
    done = threading.Event()

    def scan() -> None:
        inventory = discover(host, use_nvml=False)
        reader = SignalReader(str(host), use_nvml=False)
        for _, device in inventory.devices():
            reader.read(device)
        done.set()

    thread = threading.Thread(target=scan, daemon=True)
    thread.start()
    thread.join(DEADLINE_S * load_slack())
    assert done.is_set(), "discovery did not finish"


@pytest.fixture
def fifo_in_cdi_dir(node: RunNode) -> Iterator[Path]:
    path = node.cdi_dir / claim_spec_file_name(DRIVER, LOST_UID)
    yield path
    if path.exists():
        path.unlink()


def test_a_fifo_and_a_lost_journal_while_running_block_no_call(node: RunNode, fifo_in_cdi_dir: Path) -> None:
    """Case 2 while running: a FIFO named like a claim spec plus a deleted journal. The old
    cross-check blocked in open() under the claims lock: prepares timed out at 20 s and unrelated
    unprepares at 10 s, forever. Now both answer, and the lost claim is rebuilt."""
    process = node.spawn()
    node.register(process)
    uids = [str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.root.name}-{i}")) for i in range(2)]
    refs = [ClaimRef("default", f"claim-{i}", uid) for i, uid in enumerate(uids)]
    node.api.put_object(gpu_cpu_claim(uids[0], "claim-0"))
    node.api.put_object(gpu_cpu_claim(uids[1], "claim-1", gpu=OTHER_GPU))
    for ref in refs:
        assert node.kubelet.prepare(node.dra_socket, [ref]).claims[ref.uid].error == ""
    plant("fifo", fifo_in_cdi_dir)
    journal_path(node.plugin_dir).unlink()
    deadline = 10.0 * load_slack()  # generous: main never answered at all
    out = node.kubelet.unprepare(node.dra_socket, [refs[1]], timeout=deadline)
    assert out.claims[refs[1].uid].error == ""
    again = node.kubelet.prepare(node.dra_socket, [refs[0]], timeout=deadline)  # rebuilt, repeated
    assert again.claims[refs[0].uid].error == ""
    events = process.log_events()
    assert any(e.get("event") == "not a claim's CDI spec: not a regular file" for e in events)
    assert any(e.get("event", "").startswith("state lost") for e in events)
    assert process.stop() == 0
