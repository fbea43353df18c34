"""The Events of a node without NVIDIA user space are written after the prepares they are about.

On a GPU node with no NVIDIA user space at all (the workstation tree with an NVIDIA GPU added,
no driver files, no toolkit spec), every prepare of a claim holding the GPU warns, and ``numadra run`` posts
a Warning Event per claim. The apiserver may answer Events slowly, or not for a while; the kubelet
waits for each prepare, so the Event must not be on its path, nor on the path of the prepares
that follow.

The parts are the builder's (:func:`driver.app.build`, as ``numadra run`` wires them), the kubelet
is the test client over the real DRA socket, and the apiserver is the fake one over loopback HTTP
holding every Event POST at a barrier (:meth:`FakeApiServer.hold`) until the test lets it go. What
proves the order is that barrier, not a clock: both prepares are answered while the first Event
is still held at the apiserver, the poster has neither written nor failed one, and none is
stored; once released, the Events are written. (A poster that waited for its Event before the
prepare returned fails here at once: its post would have ended, by the client's read timeout,
before the answer.)
"""

from __future__ import annotations

import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from driver.app import build, build_front
from driver.claims.events import REASONS
from driver.config import RunConfig
from driver.inventory.nvidia_source import UserspaceSource
from driver.lifecycle import Lifecycle
from driver.plugin import ClaimRef
from harness.hostspec import GpuSpec
from harness.hosttree import TOPOLOGIES, write_host_tree
from tests.integration.run.conftest import NODE, RunNode, gpu_cpu_claim, wait_for

WAIT = 30.0  # generous bounds on what must happen; nothing is timed
#: the NVIDIA GPUs added to the workstation, by bus: one for each claim
NVIDIA_BUSES = ("0000:04:00.0", "0000:06:00.0")


def _nvidia_workstation(node: RunNode) -> None:
    """The node's host tree again, with NVIDIA GPUs (their kernel driver, no user space)."""
    topology = TOPOLOGIES["workstation"]
    gpus = tuple(
        GpuSpec(bus_id=bus, nvidia_minor=k, nvidia_uuid=f"GPU-0000000{k}-1111-2222-3333-444444444444")
        for k, bus in enumerate(NVIDIA_BUSES)
    )
    shutil.rmtree(node.host)
    write_host_tree(node.host, replace(topology, gpus=(*topology.gpus, *gpus)))


def _config(node: RunNode) -> RunConfig:
    config = RunConfig(
        node_name=NODE,
        host_root=node.host,
        kubeconfig=node.api.kubeconfig_path,
        registrar_dir=node.registrar_dir,
        plugin_dir=node.plugin_dir,
        cdi_dir=node.cdi_dir,
        hotplug="off",
        rescan_interval=0,
        health_interval=3600,
    )
    return config


def _claim(node: RunNode, name: str, bus: str) -> ClaimRef:
    """A claim of the NVIDIA GPU at ``bus`` and one CPU."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.root.name}-{name}"))
    gpu = "gpu-" + bus.replace(":", "-").replace(".", "-")
    node.api.put_object(gpu_cpu_claim(uid, name, 1, gpu))
    return ClaimRef("default", name, uid)


def test_prepares_are_answered_while_their_events_are_held_at_the_apiserver(node: RunNode) -> None:
    _nvidia_workstation(node)
    first, second = (
        _claim(node, name, bus) for name, bus in zip(("first", "second"), NVIDIA_BUSES, strict=True)
    )
    held = node.api.hold(method="POST", path_contains="/events")
    lifecycle = Lifecycle()
    front = build_front(_config(node))
    try:
        lifecycle.start(front.steps)
        core = build(front, on_fatal=lambda reason: None)
        lifecycle.start(core.steps)
        node.kubelet.register(node.registration_socket)
        assert core.kubelet.wait_registered(WAIT)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(node.kubelet.prepare, node.dra_socket, [first]).result(WAIT)
            assert answer.claims[first.uid].error == ""
            # the first claim's Event reached the apiserver and waits there, unanswered: the
            # prepare was answered with its Event still in flight (neither written nor failed)
            assert held.arrived.wait(WAIT), "no Event was posted for a claim without NVIDIA user space"
            assert (core.events.posted, core.events.dropped) == (0, 0), "the prepare waited for its Event"
            # the next prepare is answered while that Event is still held, and it warned too
            answer = pool.submit(node.kubelet.prepare, node.dra_socket, [second]).result(WAIT)
            assert answer.claims[second.uid].error == ""
            assert (core.events.posted, core.events.dropped) == (0, 0), "a prepare waited for an Event"
            assert node.api.objects("Event") == []
            assert core.claims.userspace_warnings["none"] == 2
        held.released.set()
        wait_for(lambda: len(node.api.objects("Event")) == 2, WAIT, "both Events written once released")
        events = node.api.objects("Event")
        assert {e["reason"] for e in events} == {REASONS[UserspaceSource.NONE]}
        assert {e["involvedObject"]["name"] for e in events} == {"first", "second"}
        assert core.events.posted == 2 and core.events.dropped == 0
    finally:
        held.released.set()
        lifecycle.stop()
