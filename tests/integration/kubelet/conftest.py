"""Fixtures: short temp dirs (AF_UNIX paths are limited to 107 bytes), servers and plugin processes."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from driver.kubelet.server import KubeletPluginServer
from driver.plugin import ClaimRef
from harness.kubeletclient import KubeletClient
from harness.poll import wait_for
from tests.support.fakeplugin import FAKE_DRIVER, FakePlugin, StubClaims

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Dirs:
    root: Path
    registrar: Path
    plugin: Path


@pytest.fixture
def dirs() -> Iterator[Dirs]:
    root = Path(tempfile.mkdtemp(prefix="kp", dir="/tmp"))
    (root / "reg").mkdir()
    try:
        yield Dirs(root, root / "reg", root / "plug")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fake() -> FakePlugin:
    return FakePlugin()


@pytest.fixture
def stub_claims() -> StubClaims:
    """The stand-in apiserver the in-process servers read claims from (see ``client``)."""
    return StubClaims()


@pytest.fixture
def make_server(dirs: Dirs, stub_claims: StubClaims) -> Iterator[Callable[..., KubeletPluginServer]]:
    """Build (not start) servers on the temp dirs; every one is stopped at teardown."""
    made: list[KubeletPluginServer] = []

    def make(plugin: FakePlugin, **kwargs: object) -> KubeletPluginServer:
        options: dict[str, object] = {
            "driver_name": FAKE_DRIVER,
            "node_name": "node-a",
            "registrar_dir": dirs.registrar,
            "plugin_dir": dirs.plugin,
            "plugin": plugin,
            "claim_source": stub_claims,
            "health": plugin,
        }
        options.update(kwargs)
        server = KubeletPluginServer(**options)  # type: ignore[arg-type]
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop(grace=0)


@pytest.fixture
def server(make_server: Callable[..., KubeletPluginServer], fake: FakePlugin) -> KubeletPluginServer:
    srv = make_server(fake, health_resend_interval=0.3)
    srv.start()
    return srv


@pytest.fixture
def client(stub_claims: StubClaims) -> Iterator[KubeletClient]:
    with KubeletClient(stub_claims) as c:
        yield c


@dataclass
class PluginProcess:
    proc: subprocess.Popen[bytes]
    registration_socket: Path
    dra_socket: Path
    log: Path

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def terminate(self, timeout: float = 10.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@pytest.fixture
def spawn(dirs: Dirs) -> Iterator[Callable[..., PluginProcess]]:
    """Start ``python -m tests.support.fakeplugin`` processes; kill leftovers at teardown."""
    started: list[PluginProcess] = []

    def start(
        *extra: str, pod_uid: str | None = None, wait: bool = True, claims: Sequence[ClaimRef] = ()
    ) -> PluginProcess:
        """``claims``: the claims its stand-in apiserver holds (``StubClaims``)."""
        claims_file = dirs.root / f"claims-{len(started)}.json"
        claims_file.write_text(
            json.dumps([{"namespace": c.namespace, "name": c.name, "uid": c.uid} for c in claims])
        )
        args = [
            sys.executable, "-m", "tests.support.fakeplugin",
            "--registrar-dir", str(dirs.registrar), "--plugin-dir", str(dirs.plugin),
            "--claims", str(claims_file), *extra,
        ]  # fmt: skip
        if pod_uid:
            args += ["--pod-uid", pod_uid]
        env = {k: v for k, v in os.environ.items() if k != "POD_UID"}
        log = dirs.root / f"plugin-{len(started)}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=sink)
        suffix = f"-{pod_uid}" if pod_uid else ""
        plugin = PluginProcess(
            proc,
            dirs.registrar / f"{FAKE_DRIVER}{suffix}-reg.sock",
            dirs.plugin / (f"dra-{pod_uid}.sock" if pod_uid else "dra.sock"),
            log,
        )
        started.append(plugin)
        if wait:
            wait_for(
                lambda: plugin.registration_socket.exists() or proc.poll() is not None,
                30,
                "the plugin's registration socket (or its exit)",
                interval=0.01,
            )
            assert proc.poll() is None, plugin.logs()
        return plugin

    yield start
    for plugin in started:
        if plugin.proc.poll() is None:
            plugin.proc.kill()
            plugin.proc.wait()


def assert_no_overlap(record: Path, expected_calls: int) -> list[dict[str, object]]:
    """Read the fake's call log and check that no two driver calls overlapped in time."""
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(calls) == expected_calls
    calls.sort(key=lambda c: c["enter"])
    for before, after in itertools.pairwise(calls):
        assert before["exit"] <= after["enter"], f"overlap: {before} and {after}"
    return calls
