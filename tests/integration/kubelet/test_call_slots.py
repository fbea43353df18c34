"""The call slots are one gRPC server interceptor: a kind's slots are shared by every version.

A real server on a unix socket, one slot per kind, and a driver that holds a call until the test
lets it go: while one call of a kind runs, the next one of that kind is refused at once with
``RESOURCE_EXHAUSTED`` in each version of the service (v1 and v1beta1 for DRA, v1 and v1alpha1
for health), and the slot is free again once the held call ends.
Who answered and how is asserted; the only bounds are generous deadlines.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import grpc
import pytest

from driver.kubelet.admission import CallKind
from driver.kubelet.server import KubeletPluginServer
from driver.plugin import Claim, ClaimRef, PrepareResult
from harness.kubeletclient import KubeletClient
from harness.poll import wait_for
from tests.support.fakeplugin import FakePlugin

WAIT = 30.0  # bound on what must happen; nothing is timed
DRA_VERSIONS = ("v1", "v1beta1")
HELD = ClaimRef("default", "hold-me", "a0000000-0000-4000-8000-000000000000")
OTHER = ClaimRef("default", "other", "b0000000-0000-4000-8000-000000000000")


class HoldingPlugin(FakePlugin):
    """A fake driver that keeps each call naming a ``hold-`` claim until :attr:`release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def _hold(self, refs: Sequence[ClaimRef]) -> None:
        if any(ref.name.startswith("hold-") for ref in refs):
            self.entered.set()
            assert self.release.wait(WAIT), "the test never let the held call go"

    def prepare_claims(self, fetched: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        self._hold([claim.ref for claim in fetched])
        return super().prepare_claims(fetched)

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        self._hold(claims)
        return super().unprepare_claims(claims)


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except grpc.RpcError as exc:
        return exc


def _refused(outcome: Any, words: str) -> bool:
    return (
        isinstance(outcome, grpc.RpcError)
        and outcome.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        and words in str(outcome.details())
    )


@pytest.mark.parametrize("held_version", DRA_VERSIONS)
@pytest.mark.parametrize(("call", "kind"), [("prepare", CallKind.PREPARE), ("unprepare", CallKind.UNPREPARE)])
def test_a_kind_s_slots_are_shared_by_both_dra_versions(
    make_server: Callable[..., KubeletPluginServer],
    client: KubeletClient,
    held_version: str,
    call: str,
    kind: CallKind,
) -> None:
    """One slot of ``kind``, held by a call of ``held_version``: the next call of that kind is
    refused in v1 and in v1beta1, and after the release both versions are admitted again."""
    plugin = HoldingPlugin()
    server = make_server(plugin, max_workers=1, unprepare_slots=1)
    server.start()
    other_kind = CallKind.UNPREPARE if kind is CallKind.PREPARE else CallKind.PREPARE
    socket = server.dra_socket
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(getattr(client, call), socket, [HELD], held_version, timeout=WAIT)
        assert plugin.entered.wait(WAIT), "the held call never reached the driver"
        outcomes = {
            version: _outcome(partial(getattr(client, call), socket, [OTHER], version, timeout=WAIT))
            for version in DRA_VERSIONS
        }
        # the other kind's slot is its own (its call would wait for the driver's lock held here)
        assert server.slots.free(other_kind) == 1
        plugin.release.set()
        assert held.result(WAIT).claims[HELD.uid].error == ""
    for version, outcome in outcomes.items():
        assert _refused(outcome, f"1 {kind} calls are already running"), (version, outcome)
    assert server.slots.refused[kind] == len(DRA_VERSIONS)
    assert server.slots.free(kind) == 1
    for version in DRA_VERSIONS:  # the slot came back
        assert getattr(client, call)(socket, [OTHER], version, timeout=WAIT).claims[OTHER.uid].error == ""


def test_a_health_stream_slot_is_shared_by_both_health_versions(
    make_server: Callable[..., KubeletPluginServer], client: KubeletClient
) -> None:
    """One health stream slot: an open v1 stream makes a v1alpha1 stream be refused, and the
    reverse; a prepare still answers meanwhile."""
    server = make_server(FakePlugin(), health_streams=1, health_resend_interval=60)
    server.start()
    for first, second in (("v1", "v1alpha1"), ("v1alpha1", "v1")):
        stream = client.watch_health(server.dra_socket, first)
        try:
            next(stream)  # admitted: it holds the one slot
            refused = _outcome(partial(next, client.watch_health(server.dra_socket, second)))
            assert _refused(refused, "1 health stream calls are already running"), refused
            assert client.prepare(server.dra_socket, [OTHER], timeout=WAIT).claims[OTHER.uid].error == ""
        finally:
            stream.cancel()
        # the slot comes back when grpc reports the stream's end
        wait_for(lambda: server.slots.free(CallKind.HEALTH) == 1, WAIT, "the stream's slot back")
    assert server.slots.refused[CallKind.HEALTH] == 2
