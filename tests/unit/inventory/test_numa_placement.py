"""driver.inventory.numa: sockets, SLIT rows and KEP-6072 node lists from what sysfs proves."""

from __future__ import annotations

import pytest

from driver.inventory.numa import NodeShape, Placement, Problem, place_nodes


def _cpu(node: int, socket: int, row: str | None) -> NodeShape:
    return NodeShape(node, True, frozenset({socket}), row)


def _mem(node: int, row: str | None) -> NodeShape:
    return NodeShape(node, False, frozenset(), row)


def _messages(problems: list[Problem]) -> list[str]:
    return [p.message for p in problems]


def test_snc2_lists_the_sibling_cluster_of_the_same_socket_only() -> None:
    """SNC-2 on two sockets (10/12/21): each node lists itself, then its sibling; never the other socket."""
    rows = ["10 12 21 21", "12 10 21 21", "21 21 10 12", "21 21 12 10"]
    nodes = [_cpu(n, n // 2, rows[n]) for n in range(4)]
    placed, problems = place_nodes(nodes, [0, 1, 2, 3])
    assert problems == []
    assert {n: p.near for n, p in placed.items()} == {0: (0, 1), 1: (1, 0), 2: (2, 3), 3: (3, 2)}
    assert {n: p.socket for n, p in placed.items()} == {0: 0, 1: 0, 2: 1, 3: 1}
    assert placed[2].distances == (21, 21, 10, 12)


def test_nps4_lists_every_equidistant_node_of_the_socket_in_id_order() -> None:
    """NPS4-like: node 5's peers 4, 6, 7 at 12 on its socket; the other socket's nodes at 32 are out."""
    size = 8
    rows = [
        " ".join("10" if i == j else "12" if i // 4 == j // 4 else "32" for j in range(size))
        for i in range(size)
    ]
    placed, problems = place_nodes([_cpu(n, n // 4, rows[n]) for n in range(size)], range(size))
    assert problems == []
    assert placed[5].near == (5, 4, 6, 7)  # the KEP's own example


def test_the_nearest_other_socket_is_not_listed() -> None:
    """Two sockets, one node each (10/21): the only other node is nearest but on another socket."""
    placed, problems = place_nodes([_cpu(0, 0, "10 21"), _cpu(1, 1, "21 10")], [0, 1])
    assert problems == []
    assert (placed[0].near, placed[1].near) == ((0,), (1,))


def test_columns_follow_the_online_nodes_not_the_node_ids() -> None:
    """POWER9 with GPU memory: nodes 0, 8, 250-255; a row has a column per online node, in id order."""
    online = [0, 8, 250, 251, 252, 253, 254, 255]

    def row(me: int) -> str:
        return " ".join("10" if n == me else "40" if {n, me} == {0, 8} else "80" for n in online)

    nodes = [_cpu(0, 0, row(0)), _cpu(8, 8, row(8)), *(_mem(n, row(n)) for n in online[2:])]
    placed, problems = place_nodes(nodes, online)
    assert placed[8].distances == (40, 10, 80, 80, 80, 80, 80, 80)
    assert placed[0].near == (0,)  # node 8 is nearest (40) but on socket 8
    # every GPU memory node is 80 from both sockets: which socket it belongs to is not proven
    assert {placed[n].socket for n in online[2:]} == {None}
    assert _messages(problems) == ["memory-only NUMA node: no single socket is nearest, socket unknown"] * 6
    assert problems[0].fields == {"numa_node": 250, "nearest_cpu_nodes": [0, 8]}


def test_a_memory_only_node_takes_the_socket_of_its_nearest_cpu_nodes() -> None:
    """A CXL expander at 14 from node 0 (socket 0) and 24 from node 1 is socket 0, and lists node 0."""
    nodes = [_cpu(0, 0, "10 21 14"), _cpu(1, 1, "21 10 24"), _mem(2, "14 24 10")]
    placed, problems = place_nodes(nodes, [0, 1, 2])
    assert problems == []
    assert placed[2] == Placement(socket=0, near=(2, 0), distances=(14, 24, 10))
    assert placed[0].near == (0, 2)
    assert placed[1].near == (1,)


def test_nodes_discovery_dropped_give_columns_but_are_never_listed() -> None:
    """Grace Hopper: empty nodes 2-8 sit in every row at 80, but only the GPU memory node 1 is kept."""
    online = list(range(9))
    row = {n: " ".join("10" if i == n else "80" for i in online) for n in online}
    placed, problems = place_nodes([_cpu(0, 0, row[0]), _mem(1, row[1])], online)
    assert problems == []
    assert (placed[0].near, placed[1].near, placed[1].socket) == ((0, 1), (1, 0), 0)


@pytest.mark.parametrize(
    ("row1", "message"),
    [
        pytest.param("12 10 255", "NUMA distance row does not have one entry per online node", id="too-long"),
        pytest.param("12 x", "NUMA distance row is not a list of numbers", id="garbage"),
        pytest.param("12 -1", "NUMA distance row is not a list of numbers", id="negative"),
        pytest.param("9 10", "NUMA node is not nearest to itself in its distance row", id="self-not-nearest"),
        pytest.param("12 12", "NUMA node is not nearest to itself in its distance row", id="self-tie"),
        pytest.param(None, "NUMA node has no readable distance row", id="missing"),
    ],
)
def test_an_unusable_row_pairs_its_node_with_nobody(row1: str | None, message: str) -> None:
    """Node 1's row is broken: no list names it and its own list is just itself; the problem says why."""
    placed, problems = place_nodes([_cpu(0, 0, "10 12"), _cpu(1, 0, row1)], [0, 1])
    assert message in _messages(problems)
    assert problems[0].fields["numa_node"] == 1
    assert (placed[0].near, placed[1].near) == ((0,), (1,))
    assert placed[1].distances == ()


def test_asymmetric_distances_unpair_exactly_that_pair() -> None:
    """0->1 is 12 but 1->0 is 14: 0 and 1 do not list each other; 0 and 2 still do."""
    nodes = [_cpu(0, 0, "10 12 12"), _cpu(1, 0, "14 10 12"), _cpu(2, 0, "12 12 10")]
    placed, problems = place_nodes(nodes, [0, 1, 2])
    assert _messages(problems) == ["asymmetric NUMA distances: the pair is treated as unrelated"]
    assert problems[0].fields == {"numa_node": 0, "other_node": 1, "distance": 12, "distance_back": 14}
    assert placed[0].near == (0, 2)
    assert placed[1].near == (1, 2)
    assert placed[2].near == (2, 0, 1)


def test_unreachable_nodes_are_never_neighbours() -> None:
    """255 is 'no path': a node whose only peer is unreachable lists itself alone."""
    placed, problems = place_nodes([_cpu(0, 0, "10 255"), _cpu(1, 0, "255 10")], [0, 1])
    assert problems == []
    assert (placed[0].near, placed[1].near) == ((0,), (1,))


def test_a_node_missing_from_the_online_list_cannot_place_its_row() -> None:
    """A node directory the online list does not name: its row's columns are unknown."""
    placed, problems = place_nodes([_cpu(0, 0, "10 12"), _cpu(3, 0, "12 10")], [0, 1])
    assert _messages(problems) == ["NUMA node is not in the online node list"]
    assert placed[3].near == (3,)


def test_cpus_on_several_sockets_leave_the_socket_unknown() -> None:
    """A node whose CPUs report packages 0 and 1 has no socket; it lists only itself."""
    nodes = [NodeShape(0, True, frozenset({0, 1}), "10 12"), _cpu(1, 0, "12 10")]
    placed, problems = place_nodes(nodes, [0, 1])
    assert _messages(problems) == ["the CPUs of a NUMA node report several sockets: socket unknown"]
    assert (placed[0].socket, placed[0].near) == (None, (0,))
    assert placed[1].near == (1,)  # node 0's socket is unknown, so it is not "the same socket"


def test_a_single_node_host_needs_no_distance_file() -> None:
    """One node without a distance file is no problem: its list is itself."""
    placed, problems = place_nodes([_cpu(0, 0, None)], [0])
    assert problems == []
    assert placed[0] == Placement(socket=0, near=(0,), distances=())
