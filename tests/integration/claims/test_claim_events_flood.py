"""A flood of claim warnings against an apiserver that never answers: bounded memory, no waiting.

Each prepare whose NVIDIA GPUs lack their user space warns (:class:`ClaimEvents`), one Event per
pod of the claim. The Events go through the driver's :class:`EventPoster` over the real client
to an apiserver that takes the connection and never sends a byte back
(tests/integration/kube/hostile_api.py), so the first Event's post hangs for the whole test.
What must hold meanwhile:

* the prepare path never waits: every ``warn()`` returns while the apiserver still holds the first
  post (a put that waited for room would wait for an apiserver that never answers);
* memory stays bounded: the poster holds its queue's bound of Events and drops the rest,
  counted; what the driver's code holds after four times the warnings is what it held after one
  (a ratio of the memory traced to driver/, measured in the same run, not a figure);
* once the apiserver goes away, the queued posts fail fast and the poster closes.
"""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import driver
from driver.claims.events import ClaimEvents
from driver.inventory.nvidia_source import UserspaceSource
from driver.kube.client import KubeClient
from driver.kube.events import EventPoster
from harness.fake_tls_api import write_kubeconfig
from harness.poll import wait_for
from tests.integration.kube.hostile_api import HostileApiServer

#: longer than the test: the apiserver sends nothing and the client waits as long
HUNG_S = 600.0
BOUND = 64
WARNINGS = 1000  # per round; each warning is two Events (two pods)
DRIVER_CODE = tracemalloc.Filter(True, str(Path(driver.__file__).parent / "*"))


def _claim(i: int, pods: int = 2) -> dict[str, Any]:
    reserved = [{"resource": "pods", "name": f"train-{i}-{n}", "uid": f"p-{i}-{n}"} for n in range(pods)]
    return {
        "metadata": {"namespace": "ml", "name": f"gpu-claim-{i}", "uid": f"u-{i}"},
        "status": {"reservedFor": reserved},
    }


def _held_by_driver_code() -> int:
    """Bytes still allocated from driver/'s code (the Events queued, the worker, the counters)."""
    snapshot = tracemalloc.take_snapshot().filter_traces([DRIVER_CODE])
    return sum(stat.size for stat in snapshot.statistics("filename"))


@pytest.fixture
def hung() -> Iterator[HostileApiServer]:
    server = HostileApiServer("trickle-head", interval=HUNG_S)
    yield server
    server.close()


def test_a_warning_flood_against_a_hung_apiserver_stays_bounded_and_never_blocks(
    hung: HostileApiServer, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", hung.url, cluster={}, user={"token": "t"})
    client = KubeClient(kubeconfig, timeout=HUNG_S, connect_timeout=1.0)
    client.configure()
    poster = EventPoster(client.create_event, max_queued=BOUND)
    events = ClaimEvents(poster, component="numadra.dev", node="node-a")
    warned = 0
    held: list[int] = []

    def flood() -> None:
        nonlocal warned
        for rounds in (1, 3):  # after one round, then after four
            for _ in range(rounds * WARNINGS):
                events.warn(_claim(warned), UserspaceSource.NONE, ["no toolkit spec", "no libcuda"])
                warned += 1
            held.append(_held_by_driver_code())

    try:
        events.warn(_claim(-1, pods=1), UserspaceSource.NONE, ["first"])
        wait_for(lambda: hung.connections, 10, "the first Event's post")  # in hand, hanging
        tracemalloc.start()
        try:
            caller = threading.Thread(target=flood, name="prepare-path")
            caller.start()
            caller.join(60)  # not a timing: a put that waited would wait for the hung apiserver
            assert not caller.is_alive(), "warn() waited for the apiserver"
        finally:
            tracemalloc.stop()
        assert warned == 4 * WARNINGS
        assert hung.connections == 1 and poster.posted == 0  # the apiserver answered nothing meanwhile
        assert poster.backlog == BOUND
        assert poster.dropped == 2 * warned - BOUND
        after_one, after_four = held
        assert after_four < 1.5 * after_one, f"driver code held {after_one} then {after_four}"
    finally:
        hung.close()  # the hung post fails, the queued ones find nobody listening
        closed = poster.close(30)
        client.close()
    assert closed
    assert (poster.posted, poster.dropped) == (0, 2 * warned + 1)
