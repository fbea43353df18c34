"""Safe starts (issue 13): a live instance is never replaced, modes ignore the umask, and a low
fd limit is one line. Every test runs real ``numadra run`` processes on real sockets."""

from __future__ import annotations

import os
import resource
import stat
import subprocess

import pytest

from driver.plugin import ClaimRef
from tests.integration.run.conftest import NODE, REPO, RunNode, gpu_cpu_claim

pytestmark = pytest.mark.fault


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert "Traceback" not in text, text[-3000:]
    return lines[-1]


def test_a_second_run_on_the_same_dirs_refuses_and_leaves_the_first_serving(node: RunNode) -> None:
    """No POD_UID, same dirs: the second process probes the sockets, finds them answering and
    exits 2 with one line; before, it unlinked the first one's live sockets."""
    first = node.spawn()
    registration, _ = node.register(first)
    before = {p: p.lstat().st_ino for p in (node.registration_socket, node.dra_socket)}
    second = node.spawn()
    assert second.wait() == 2
    line = _one_line(second.log_text())
    assert line.startswith("numadra: socket ")
    assert "is served by another running process" in line
    assert str(node.registration_socket) in line or str(node.dra_socket) in line
    assert {p: p.lstat().st_ino for p in before} == before  # the same socket files, not replaced
    # the first instance still answers the kubelet on both sockets
    again = node.kubelet.register(node.registration_socket)
    assert again.info.endpoint == registration.info.endpoint
    uid = "5f2c8a9e-0d1b-4c3a-9e8f-0000000000f1"
    node.api.put_object(gpu_cpu_claim(uid, "after"))
    out = node.kubelet.prepare(str(node.dra_socket), [ClaimRef("default", "after", uid)])
    assert out.claims[uid].error == ""
    assert first.stop() == 0


def test_modes_are_explicit_under_umask_000(node: RunNode) -> None:
    """Sockets 0660, journal 0600, state/ 0700, metadata dirs 0755, files 0644 under umask 000."""
    old = os.umask(0)
    try:
        process = node.spawn()
    finally:
        os.umask(old)
    node.register(process)
    uid = "5f2c8a9e-0d1b-4c3a-9e8f-0000000000f2"
    node.api.put_object(gpu_cpu_claim(uid, "modes"))
    out = node.kubelet.prepare(str(node.dra_socket), [ClaimRef("default", "modes", uid)])
    assert out.claims[uid].error == ""

    def mode(path: object) -> int:
        return stat.S_IMODE(os.lstat(path).st_mode)  # type: ignore[arg-type]

    assert mode(node.registration_socket) == 0o660
    assert mode(node.dra_socket) == 0o660
    assert mode(node.plugin_dir / "state") == 0o700
    assert mode(node.plugin_dir / "state" / "journal.log") == 0o600
    assert mode(node.plugin_dir / "serialize.lock") == 0o600
    meta = node.plugin_dir / "dra-device-metadata"
    assert mode(meta) == 0o755
    assert {mode(p) for p in meta.iterdir()} == {0o644}
    assert sorted(p.name for p in meta.iterdir()) == [f"{uid}_cpus.json", f"{uid}_gpu.json"]
    assert {mode(p) for p in node.cdi_dir.iterdir()} == {0o644}
    assert process.stop() == 0


@pytest.mark.parametrize("limit", [8, 64])
def test_a_low_fd_limit_is_one_line_not_a_traceback(node: RunNode, limit: int) -> None:
    """RLIMIT_NOFILE too small to run: exit 2 with one line that names the limit."""

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    done = subprocess.run(
        node.argv(),
        cwd=REPO,
        env={**os.environ, "NODE_NAME": NODE, "NUMADRA_LOG_FORMAT": "json"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        preexec_fn=low_limit,
        timeout=60,
        check=False,
    )
    text = done.stderr.decode(errors="replace")
    assert done.returncode == 2, text[-3000:]
    line = _one_line(text)
    assert line.startswith("numadra: ")
    assert "open file" in line and str(limit) in line
    assert not node.registration_socket.exists()
