"""The pure CPU allocator: exclusivity, whole cores first, L3 packing, determinism, reuse."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.errors import CpuExhaustedError
from driver.inventory.model import Cpu
from driver.pinning.allocator import allocate_cpus, free_cpus
from harness.synthetic import synthetic_cpus


def _whole_cores(cpus: tuple[Cpu, ...], chosen: frozenset[int]) -> int:
    """How many complete cores (every sibling) ``chosen`` contains."""
    cores = {c.thread_siblings for c in cpus if c.id in chosen}
    return sum(1 for sib in cores if set(sib) <= chosen)


topologies = st.builds(
    synthetic_cpus,
    nodes=st.integers(1, 2),
    cores_per_node=st.integers(1, 8),
    smt=st.integers(1, 2),
    cores_per_l3=st.integers(1, 4),
)


class TestExamples:
    def test_whole_cores_taken_as_sibling_pairs(self) -> None:
        """Four CPUs on an SMT-2 node come as two complete cores, siblings together."""
        cpus = synthetic_cpus(nodes=1, cores_per_node=4)
        got = allocate_cpus(cpus, {0}, 4)
        assert got == frozenset({0, 1, 4, 5})
        assert _whole_cores(cpus, got) == 2

    def test_odd_request_breaks_one_core_only(self) -> None:
        """Three CPUs: one whole core plus one thread; the other thread stays free for reuse."""
        cpus = synthetic_cpus(nodes=1, cores_per_node=4)
        got = allocate_cpus(cpus, {0}, 3)
        assert _whole_cores(cpus, got) == 1
        assert len(got) == 3

    def test_broken_core_used_before_splitting_a_whole_one(self) -> None:
        """A single thread is taken from an already broken core, keeping whole cores intact."""
        cpus = synthetic_cpus(nodes=1, cores_per_node=4)
        # core 2 = CPUs {2, 6}; CPU 2 already belongs to another claim
        got = allocate_cpus(cpus, {0}, 1, taken={2})
        assert got == frozenset({6})

    def test_best_fit_l3_group(self) -> None:
        """The request lands in the L3 group with the fewest free CPUs that still holds it."""
        cpus = synthetic_cpus(nodes=1, cores_per_node=8, cores_per_l3=4)  # L3 0: cores 0-3, L3 1: 4-7
        # other claims hold cores 0 and 1 (CPUs 0,8,1,9): L3 0 has 4 free CPUs, L3 1 has 8
        got = allocate_cpus(cpus, {0}, 4, taken={0, 8, 1, 9})
        assert {c.l3_id for c in cpus if c.id in got} == {0}
        assert got == frozenset({2, 10, 3, 11})

    def test_spans_fewest_l3_groups_when_none_fits(self) -> None:
        """A request bigger than any group fills the fullest groups first and spans only two."""
        cpus = synthetic_cpus(nodes=1, cores_per_node=8, cores_per_l3=4)
        got = allocate_cpus(cpus, {0}, 12)
        assert len({c.l3_id for c in cpus if c.id in got}) == 2
        assert _whole_cores(cpus, got) == 6

    def test_only_requested_node(self) -> None:
        """CPUs of other NUMA nodes are never returned."""
        cpus = synthetic_cpus(nodes=2, cores_per_node=4)
        got = allocate_cpus(cpus, {1}, 6)
        assert all(c.numa_node == 1 for c in cpus if c.id in got)

    def test_reserved_never_returned(self) -> None:
        """Reserved CPUs are never handed out, even when that means splitting cores."""
        cpus = synthetic_cpus(nodes=1, cores_per_node=2)  # CPUs 0-3, cores {0,2} {1,3}
        got = allocate_cpus(cpus, {0}, 3, reserved={0})
        assert got == frozenset({1, 2, 3})

    def test_two_node_request_orders_cores_across_nodes(self) -> None:
        """A request on two nodes takes whole cores of both, the group with more of them first."""
        cpus = synthetic_cpus(nodes=2, cores_per_node=2)  # cores {0,4} {1,5} on node 0, {2,6} {3,7} on 1
        assert allocate_cpus(cpus, {0, 1}, 6, taken={1}) == frozenset({0, 4, 2, 6, 3, 7})

    def test_a_new_topology_is_not_answered_from_the_old_one(self) -> None:
        """The per-topology core index follows the CPUs passed in: other siblings, other answer."""
        smt = synthetic_cpus(nodes=1, cores_per_node=2)  # cores {0,2} {1,3}
        assert allocate_cpus(smt, {0}, 2) == frozenset({0, 2})
        flat = tuple(replace(c, thread_siblings=(c.id,)) for c in smt)  # four single-thread cores
        assert allocate_cpus(flat, {0}, 2) == frozenset({0, 1})
        assert allocate_cpus(smt, {0}, 2) == frozenset({0, 2})

    @settings(max_examples=60, deadline=None)
    @given(cpus=topologies, data=st.data())
    def test_answers_do_not_depend_on_earlier_calls(self, cpus: tuple[Cpu, ...], data: st.DataObject) -> None:
        """Each call answers as on a fresh topology, whatever was blocked in the calls before it."""
        ids = [c.id for c in cpus]
        nodes = sorted({c.numa_node for c in cpus})
        for _ in range(data.draw(st.integers(1, 6))):
            taken = frozenset(data.draw(st.sets(st.sampled_from(ids), max_size=len(ids))))
            node = data.draw(st.sampled_from(nodes))
            count = data.draw(st.integers(1, 4))
            fresh = tuple(replace(c) for c in cpus)  # equal CPUs, another topology object
            if len(free_cpus(cpus, {node}, taken)) < count:
                continue
            assert allocate_cpus(cpus, {node}, count, taken) == allocate_cpus(fresh, {node}, count, taken)

    def test_exhausted_error_says_node_wanted_free(self) -> None:
        """Too few free CPUs: CpuExhaustedError names the node, the wanted and the free count."""
        cpus = synthetic_cpus(nodes=2, cores_per_node=2)
        with pytest.raises(CpuExhaustedError, match=r"NUMA node 1: wanted 5 exclusive CPUs, 3 free"):
            allocate_cpus(cpus, {1}, 5, taken={2})

    @pytest.mark.parametrize("count", [0], ids=["zero"])
    def test_zero_is_empty(self, count: int) -> None:
        """A request of zero CPUs gets the empty set (no error)."""
        assert allocate_cpus(synthetic_cpus(1, 2), {0}, count) == frozenset()

    def test_negative_rejected(self) -> None:
        """A negative count is a programming error."""
        with pytest.raises(ValueError, match="negative"):
            allocate_cpus(synthetic_cpus(1, 2), {0}, -1)

    def test_free_cpus_excludes_taken_and_reserved(self) -> None:
        """free_cpus lists the node's CPUs minus taken and reserved, in id order."""
        ids = [c.id for c in free_cpus(synthetic_cpus(1, 2), {0}, taken={1}, reserved={3})]
        assert ids == [0, 2]


class TestProperties:
    @settings(max_examples=150, deadline=None)
    @given(cpus=topologies, data=st.data())
    def test_no_overlap_across_a_sequence(self, cpus: tuple[Cpu, ...], data: st.DataObject) -> None:
        """A sequence of allocations never hands one CPU out twice, nor a reserved one."""
        ids = [c.id for c in cpus]
        nodes = sorted({c.numa_node for c in cpus})
        reserved = frozenset(data.draw(st.sets(st.sampled_from(ids), max_size=2)))
        taken: set[int] = set()
        for _ in range(data.draw(st.integers(1, 8))):
            node = data.draw(st.sampled_from(nodes))
            count = data.draw(st.integers(1, 6))
            free = len(free_cpus(cpus, {node}, taken, reserved))
            if free < count:
                with pytest.raises(CpuExhaustedError):
                    allocate_cpus(cpus, {node}, count, frozenset(taken), reserved)
                continue
            got = allocate_cpus(cpus, {node}, count, frozenset(taken), reserved)
            assert len(got) == count
            assert not got & taken
            assert not got & reserved
            assert all(c.numa_node == node for c in cpus if c.id in got)
            taken |= got

    @settings(max_examples=150, deadline=None)
    @given(cpus=topologies, data=st.data())
    def test_whole_cores_first_when_possible(self, cpus: tuple[Cpu, ...], data: st.DataObject) -> None:
        """With enough free whole cores, count // smt complete cores are handed out."""
        smt = len(cpus[0].thread_siblings)
        ids = [c.id for c in cpus if c.numa_node == 0]
        taken = frozenset(data.draw(st.sets(st.sampled_from(ids), max_size=len(ids) // 2)))
        free_whole = sum(
            1 for sib in {c.thread_siblings for c in cpus if c.numa_node == 0} if not set(sib) & taken
        )
        free = len(ids) - len(taken)
        count = data.draw(st.integers(1, max(free, 1)))
        if count > free:
            return
        got = allocate_cpus(cpus, {0}, count, taken)
        assert _whole_cores(cpus, got) >= min(count // smt, free_whole)

    @settings(max_examples=100, deadline=None)
    @given(cpus=topologies, data=st.data())
    def test_deterministic(self, cpus: tuple[Cpu, ...], data: st.DataObject) -> None:
        """Same inputs, in any order and collection type, give the same CPUs."""
        ids = [c.id for c in cpus]
        taken = data.draw(st.lists(st.sampled_from(ids), max_size=4, unique=True))
        count = data.draw(st.integers(1, 4))
        nodes = sorted({c.numa_node for c in cpus})
        if len(free_cpus(cpus, nodes, taken)) < count:
            return
        shuffled = list(cpus)
        random.Random(data.draw(st.integers(0, 1000))).shuffle(shuffled)
        a = allocate_cpus(cpus, set(nodes), count, frozenset(taken))
        b = allocate_cpus(shuffled, tuple(reversed(nodes)), count, list(reversed(taken)))
        assert a == b

    @settings(max_examples=100, deadline=None)
    @given(cpus=topologies, data=st.data())
    def test_release_and_reuse(self, cpus: tuple[Cpu, ...], data: st.DataObject) -> None:
        """After filling a node, releasing one claim lets exactly its CPUs be handed out again."""
        claims: list[frozenset[int]] = []
        taken: set[int] = set()
        while True:
            free = len(free_cpus(cpus, {0}, taken))
            if free == 0:
                break
            got = allocate_cpus(cpus, {0}, data.draw(st.integers(1, free)), frozenset(taken))
            claims.append(got)
            taken |= got
        released = claims.pop(data.draw(st.integers(0, len(claims) - 1)))
        with pytest.raises(CpuExhaustedError):
            allocate_cpus(cpus, {0}, 1, frozenset(taken))
        taken -= released
        assert allocate_cpus(cpus, {0}, len(released), frozenset(taken)) == released
