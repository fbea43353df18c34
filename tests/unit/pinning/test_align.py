"""Where a device container without claim CPUs runs: its devices' node, widened by SLIT distance.

The host is the generated SNC-2 tree (``harness.topologies``): 4 NUMA nodes of 16 CPUs and
128 GiB, SLIT 10 / 12 (same socket) / 21 (other socket); GPU 0 on node 0, GPU 1 on node 2.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver._proto.nri import api_pb2 as nri
from driver.cli import build_parser
from driver.cli.run import config_from_args
from driver.inventory.model import Inventory
from driver.pinning.align import (
    ALIGN_ANNOTATION,
    AlignOutcome,
    ContainerNeed,
    align_devices,
    align_wanted,
    nearest_first,
)
from driver.pinning.nri.handlers import container_need
from driver.pinning.types import held_requests, holds_env_name
from tests.unit.inventory.trees import inventory

GiB = 1 << 30


@pytest.fixture(scope="module")
def snc2() -> Inventory:
    return inventory("snc2")


def _node_cpus(inv: Inventory, *nodes: int) -> frozenset[int]:
    return frozenset(c for n in inv.numa_nodes if n.id in nodes for c in n.cpus)


def _all(inv: Inventory) -> frozenset[int]:
    return frozenset(c.id for c in inv.cpus)


def test_a_container_that_fits_gets_its_devices_node(snc2: Inventory) -> None:
    placed = align_devices(snc2, {2}, _all(snc2), ContainerNeed(cpus=4, memory=64 * GiB))
    assert placed.outcome is AlignOutcome.ALIGNED
    assert (placed.cpus, placed.mems, placed.nodes) == (_node_cpus(snc2, 2), frozenset({2}), (2,))


def test_widening_takes_the_nearest_node_by_distance_not_by_id(snc2: Inventory) -> None:
    """From node 2, node 3 (12) comes before nodes 0 and 1 (21): an id order would take node 0."""
    assert nearest_first(snc2, {2}) == [3, 0, 1]
    placed = align_devices(snc2, {2}, _all(snc2), ContainerNeed(cpus=20))
    assert placed.outcome is AlignOutcome.WIDENED
    assert placed.nodes == (2, 3) and placed.mems == frozenset({2, 3})
    assert "16 shared CPU(s), the container requests 20" in placed.why


def test_a_memory_limit_above_the_node_widens_its_memory_too(snc2: Inventory) -> None:
    placed = align_devices(snc2, {0}, _all(snc2), ContainerNeed(memory=200 * GiB))
    assert (placed.outcome, placed.nodes) == (AlignOutcome.WIDENED, (0, 1))
    assert placed.cpus == _node_cpus(snc2, 0, 1)


def test_claimed_cpus_are_never_given_and_a_full_node_widens(snc2: Inventory) -> None:
    """CPUs a claim holds leave the set; a node whose CPUs are all claimed holds nobody."""
    taken = frozenset({16, 17, 48})
    placed = align_devices(snc2, {2}, _all(snc2) - taken, ContainerNeed())
    assert placed.cpus == _node_cpus(snc2, 2) - taken and placed.outcome is AlignOutcome.ALIGNED
    full = align_devices(snc2, {2}, _all(snc2) - _node_cpus(snc2, 2), ContainerNeed())
    assert (full.outcome, full.nodes, full.cpus) == (AlignOutcome.WIDENED, (2, 3), _node_cpus(snc2, 3))


def test_isolated_cpus_are_not_shared(snc2: Inventory) -> None:
    """isolcpus= CPUs are not balanced by the scheduler: a shared container never gets them."""
    isolated = {0, 1}
    cpus = tuple(dataclasses.replace(c, isolated=c.id in isolated) for c in snc2.cpus)
    inv = dataclasses.replace(snc2, cpus=cpus)
    placed = align_devices(inv, {0}, _all(inv), ContainerNeed())
    assert placed.cpus == _node_cpus(inv, 0) - isolated


def test_devices_on_two_nodes_get_their_union(snc2: Inventory) -> None:
    placed = align_devices(snc2, {0, 2}, _all(snc2), ContainerNeed())
    assert (placed.nodes, placed.mems) == ((0, 2), frozenset({0, 2}))


def test_what_no_nodes_hold_stays_unconfined(snc2: Inventory) -> None:
    """600 GiB is more than the machine's 512: every node's memory, every shared CPU."""
    taken = frozenset({5})
    placed = align_devices(snc2, {0}, _all(snc2) - taken, ContainerNeed(memory=600 * GiB))
    assert placed.outcome is AlignOutcome.UNCONFINED
    assert placed.mems == frozenset({0, 1, 2, 3}) and placed.cpus == _all(snc2) - taken
    assert placed.why.endswith("left unconfined")


def test_unknown_distances_fall_back_to_id_order(snc2: Inventory) -> None:
    nodes = tuple(dataclasses.replace(n, distances=()) for n in snc2.numa_nodes)
    assert nearest_first(dataclasses.replace(snc2, numa_nodes=nodes), {2}) == [0, 1, 3]


@pytest.mark.parametrize(
    ("annotations", "wanted", "problem"),
    [
        pytest.param({}, True, False, id="absent"),
        pytest.param({ALIGN_ANNOTATION: "on"}, True, False, id="on"),
        pytest.param({ALIGN_ANNOTATION: "off"}, False, False, id="off"),
        pytest.param({ALIGN_ANNOTATION: "Off"}, True, True, id="case-matters"),
        pytest.param({ALIGN_ANNOTATION: ""}, True, True, id="empty"),
    ],
)
def test_the_annotation(annotations: dict[str, str], wanted: bool, problem: bool) -> None:
    got, text = align_wanted(annotations)
    assert (got, bool(text)) == (wanted, problem)


@given(st.text(max_size=300).filter(lambda v: v not in ("on", "off")))
def test_any_other_annotation_value_is_on_and_reported_bounded(value: str) -> None:
    """A pod can write anything there: it is never 'off', and the quoted value is bounded."""
    wanted, problem = align_wanted({ALIGN_ANNOTATION: value})
    assert wanted and problem and len(problem) < 400


@pytest.mark.parametrize(
    ("shares", "limit", "need"),
    [
        pytest.param(None, None, ContainerNeed(), id="nothing"),
        pytest.param(2, None, ContainerNeed(), id="best-effort"),
        pytest.param(512, None, ContainerNeed(cpus=1), id="500m"),
        pytest.param(2048, 8 * GiB, ContainerNeed(cpus=2, memory=8 * GiB), id="2-cpus-8Gi"),
    ],
)
def test_the_need_comes_from_shares_and_the_memory_limit(
    shares: int | None, limit: int | None, need: ContainerNeed
) -> None:
    resources = nri.LinuxResources()
    if shares is not None:
        resources.cpu.shares.value = shares
    if limit is not None:
        resources.memory.limit.value = limit
    assert container_need(resources) == need


@pytest.mark.parametrize(
    ("argv", "on"),
    [
        pytest.param([], True, id="default-on"),
        pytest.param(["--no-align-device-pods"], False, id="off"),
        pytest.param(["--align-device-pods"], True, id="on"),
    ],
)
def test_the_node_flag(tmp_path: Path, argv: list[str], on: bool) -> None:
    """``--no-align-device-pods`` turns alignment off for the whole node (no feature gate needed)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    args = build_parser().parse_args(["run", "--node-name", "n", *argv])
    assert config_from_args(args, {"KUBECONFIG": str(kubeconfig)}).align_device_pods is on


@given(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True))
def test_a_held_request_survives_its_env_name(request: str) -> None:
    """``NUMADRA_HOLDS_<REQUEST>`` maps back to the request: a DNS label has no ``_`` to confuse."""
    assert held_requests({holds_env_name(request): "1", "NUMADRA_HOLDS_": "1"}) == {request}
