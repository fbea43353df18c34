"""Rolling update: two plugin processes on one plugin dir, serialized by flock."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from driver.plugin import ClaimRef
from harness.kubeletclient import KubeletClient

from .conftest import Dirs, PluginProcess, assert_no_overlap

OLD_POD = "11111111-aaaa-4bbb-8ccc-000000000001"
NEW_POD = "22222222-aaaa-4bbb-8ccc-000000000002"


def test_two_processes_register_and_serialize(
    spawn: Callable[..., PluginProcess], client: KubeletClient, dirs: Dirs
) -> None:
    """Both pods register under unique names; concurrent prepares on both never overlap and share state."""
    record, state = dirs.root / "calls.jsonl", dirs.root / "state.json"
    extra = ("--delay", "0.03", "--record", str(record), "--state", str(state))
    known = [ClaimRef("default", f"c{i}", f"uid-{i}") for i in (*range(10), 99)]
    old = spawn(*extra, pod_uid=OLD_POD, claims=known)
    new = spawn(*extra, pod_uid=NEW_POD, claims=known)
    endpoints = {client.register(p.registration_socket).info.endpoint for p in (old, new)}
    assert endpoints == {str(dirs.plugin / f"dra-{OLD_POD}.sock"), str(dirs.plugin / f"dra-{NEW_POD}.sock")}
    assert sorted(p.name for p in dirs.registrar.iterdir()) == sorted(
        [old.registration_socket.name, new.registration_socket.name]
    )

    errors: list[BaseException] = []

    def work(plugin: PluginProcess, i: int) -> None:
        try:
            with KubeletClient() as own:
                response = own.prepare(plugin.dra_socket, [ClaimRef("default", f"c{i}", f"uid-{i}")])
                assert response.claims[f"uid-{i}"].error == ""
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=((old, new)[i % 2], i)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    calls = assert_no_overlap(record, expected_calls=10)
    assert len({c["pid"] for c in calls}) == 2, "both processes must have served prepares"
    assert json.loads(state.read_text()) == sorted(f"uid-{i}" for i in range(10)), "an update was lost"

    # the kubelet may unprepare through the other instance: state is shared through the plugin dir
    response = client.unprepare(new.dra_socket, [ClaimRef("default", "c1", "uid-1")])
    assert response.claims["uid-1"].error == ""
    assert "uid-1" not in json.loads(state.read_text())

    # the old pod goes away: only its sockets disappear, the new one keeps serving
    assert old.terminate() == 0, old.logs()
    assert [p.name for p in dirs.registrar.iterdir()] == [new.registration_socket.name]
    assert sorted(p.name for p in dirs.plugin.iterdir() if p.suffix == ".sock") == [new.dra_socket.name]
    response = client.prepare(new.dra_socket, [ClaimRef("default", "c99", "uid-99")])
    assert response.claims["uid-99"].error == ""
