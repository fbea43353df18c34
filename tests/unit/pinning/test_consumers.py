"""ConsumerCheck: one read per claim at a time, answers kept as long as they are safe to keep.

The reader here is a test double of the apiserver read (the real one, over HTTP, is exercised in
tests/integration/pinning/test_shared_claims.py): it answers from a dict, counts its calls, and
can fail or block; the clock is a plain number the test advances, so nothing here waits on time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from driver.errors import ConsumersUnknownError, PinRefusedError
from driver.pinning.consumers import GONE_NOT_FOUND, ClaimConsumers, ConsumerCheck
from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode, PodGroupRef

PIN = ClaimPinning("u1", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({2, 3}), frozenset({0})),))
CPUS = ClaimBinding("u1", "ml", "cpus", frozenset({"pod-a"}), PIN)
GPU = ClaimBinding("u2", "ml", "gpu", frozenset({"pod-a"}), None, mems=frozenset({1}))


@dataclass
class FakeReader:
    """Stands in for the apiserver read: answers per claim UID, counts reads, may fail or block."""

    answers: dict[str, ClaimConsumers] = field(default_factory=dict)
    failing: bool = False
    gate: threading.Event | None = None
    reads: list[tuple[str, str, str]] = field(default_factory=list)

    def __call__(self, namespace: str, name: str, claim_uid: str, /) -> ClaimConsumers:
        self.reads.append((namespace, name, claim_uid))
        if self.gate is not None:
            self.gate.wait(5)
        if self.failing:
            raise ConsumersUnknownError(f"get resourceclaims/{namespace}/{name}: apiserver unreachable")
        return self.answers[claim_uid]


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def _check(
    reader: FakeReader, clock: Clock | None = None
) -> tuple[ConsumerCheck, list[tuple[str, frozenset[str]]]]:
    recorded: list[tuple[str, frozenset[str]]] = []
    check = ConsumerCheck(reader, lambda uid, pods: recorded.append((uid, pods)), clock=clock or Clock())
    return check, recorded


def test_a_recorded_pod_needs_no_read() -> None:
    """The pods of the record bind as they are."""
    reader = FakeReader()
    check, _ = _check(reader)
    assert check.confirm(CPUS, "pod-a") == CPUS
    assert reader.reads == []


def test_a_later_pod_of_a_shared_claim_is_learned_once_and_recorded() -> None:
    """Pod B, reserved after the prepare: one read, then it binds; B's other containers, and pod
    C listed by the same read, need no read; the recorder gets what the read listed."""
    reader = FakeReader({"u1": ClaimConsumers(pods=frozenset({"pod-a", "pod-b", "pod-c"}))})
    check, recorded = _check(reader)
    for _ in range(5):  # five containers of pod B
        got = check.confirm(CPUS, "pod-b")
        assert got.pods == frozenset({"pod-a", "pod-b", "pod-c"})
    assert check.confirm(CPUS, "pod-c").reserved_for("pod-c", "ml")
    assert reader.reads == [("ml", "cpus", "u1")]
    assert recorded == [("u1", frozenset({"pod-a", "pod-b", "pod-c"}))]
    assert check.learned("u1") == frozenset({"pod-a", "pod-b", "pod-c"})


def test_a_pod_that_is_not_a_consumer_costs_one_read_per_period() -> None:
    """The negative answer is kept for that pod a while: retries and many containers cost one read."""
    reader = FakeReader({"u1": ClaimConsumers(pods=frozenset({"pod-a"}))})
    clock = Clock()
    check, recorded = _check(reader, clock)
    for _ in range(10):
        assert not check.confirm(CPUS, "pod-evil").reserved_for("pod-evil", "ml")
    assert len(reader.reads) == 1 and recorded == []
    clock.now += 60  # the answer is old: a pod reserved since must not stay refused
    reader.answers["u1"] = ClaimConsumers(pods=frozenset({"pod-a", "pod-evil"}))
    assert check.confirm(CPUS, "pod-evil").reserved_for("pod-evil", "ml")
    assert len(reader.reads) == 2


def test_a_negative_answer_for_one_pod_does_not_refuse_another() -> None:
    """A pod that starts after another pod's negative read gets a read of its own."""
    reader = FakeReader({"u1": ClaimConsumers(pods=frozenset({"pod-a"}))})
    check, _ = _check(reader)
    assert not check.confirm(CPUS, "pod-x").reserved_for("pod-x", "ml")
    reader.answers["u1"] = ClaimConsumers(pods=frozenset({"pod-a", "pod-b"}))
    assert check.confirm(CPUS, "pod-b").reserved_for("pod-b", "ml")
    assert len(reader.reads) == 2


def test_unknown_consumers_become_known_even_when_empty() -> None:
    """A rebuilt entry (pods None) read to have no pod consumer knows that now: pods == {}."""
    reader = FakeReader({"u1": ClaimConsumers(pods=frozenset(), others=1)})
    check, recorded = _check(reader)
    unknown = ClaimBinding("u1", "ml", "cpus", None, PIN)
    assert check.confirm(unknown, "pod-z").pods == frozenset()
    assert recorded == []  # nothing new to keep


def test_an_outage_is_not_an_answer_and_is_not_asked_again_at_once() -> None:
    """A failed read raises ConsumersUnknownError; for a moment the claim's reads are not repeated."""
    reader = FakeReader(failing=True)
    clock = Clock()
    check, _ = _check(reader, clock)
    for _ in range(3):
        with pytest.raises(ConsumersUnknownError, match="unreachable"):
            check.confirm(CPUS, "pod-b")
    assert len(reader.reads) == 1
    clock.now += 2
    reader.failing = False
    reader.answers["u1"] = ClaimConsumers(pods=frozenset({"pod-a", "pod-b"}))
    assert check.confirm(CPUS, "pod-b").reserved_for("pod-b", "ml")


def test_a_claim_without_a_recorded_name_cannot_be_read() -> None:
    """An entry rebuilt without its metadata has no name: consumers unknown, no read sent."""
    reader = FakeReader()
    check, _ = _check(reader)
    with pytest.raises(ConsumersUnknownError, match="name of claim uid u1 is not recorded"):
        check.confirm(ClaimBinding("u1", "", "", None, PIN), "pod-z")
    assert reader.reads == []


def test_a_gone_claim_holds_no_pod() -> None:
    """Confirmed gone: a CPU claim's container is refused as not reserved; a GPU claim has no pods."""
    gone = ClaimConsumers(gone=GONE_NOT_FOUND, detail="ml/cpus not found")
    reader = FakeReader({"u1": gone, "u2": gone})
    check, _ = _check(reader)
    with pytest.raises(PinRefusedError, match=r"gone from the apiserver \(ml/cpus not found\)") as err:
        check.confirm(CPUS, "pod-b")
    assert err.value.reason == "not_reserved"
    assert check.confirm(GPU, "pod-b").pods == frozenset()


def test_concurrent_containers_of_one_claim_share_one_read() -> None:
    """Eight containers asking at once while the read is in flight: one read, eight answers."""
    gate = threading.Event()
    reader = FakeReader({"u1": ClaimConsumers(pods=frozenset({"pod-a", "pod-b"}))}, gate=gate)
    check, _ = _check(reader)
    answers: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(check.confirm(CPUS, "pod-b").reserved_for("pod-b", "ml"))
        )
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    while not reader.reads:  # the first thread is inside the read; the others queue behind it
        threading.Event().wait(0.01)
    gate.set()
    for t in threads:
        t.join(10)
    assert answers == [True] * 8
    assert len(reader.reads) == 1


def test_pods_that_wait_on_one_read_are_answered_by_it() -> None:
    """Eight pods that do not hold the claim ask at once: the one read answers them all (before,
    each pod whose UID the read did not list started a read of its own after it)."""
    gate = threading.Event()
    reader = FakeReader({"u1": ClaimConsumers(pods=frozenset({"pod-a"}))}, gate=gate)
    check, _ = _check(reader)
    answers: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda p=f"pod-x{i}": answers.append(check.confirm(CPUS, p).reserved_for(p, "ml"))
        )
        for i in range(8)
    ]
    for t in threads:
        t.start()
    while not reader.reads:
        threading.Event().wait(0.01)
    gate.set()
    for t in threads:
        t.join(10)
    assert answers == [False] * 8
    assert len(reader.reads) == 1


def test_remembered_answers_without_a_read_or_says_a_read_is_needed() -> None:
    """``remembered`` never reads: None until a read taught the answer, then the same answer as
    ``confirm`` (a consumer, a pod that is not one, a failure kept for the claim)."""
    reader = FakeReader({"u1": ClaimConsumers(pods=frozenset({"pod-a", "pod-b"}))})
    clock = Clock()
    check, _ = _check(reader, clock)
    assert check.remembered(CPUS, "pod-a") == CPUS  # recorded: no read needed
    assert check.remembered(CPUS, "pod-b") is None
    assert check.remembered(CPUS, "pod-c") is None
    assert reader.reads == []
    check.confirm(CPUS, "pod-c")
    learned = check.remembered(CPUS, "pod-b")
    assert learned is not None and learned.reserved_for("pod-b", "ml")
    negative = check.remembered(CPUS, "pod-c")
    assert negative is not None and not negative.reserved_for("pod-c", "ml")
    assert len(reader.reads) == 1
    failing = FakeReader(failing=True)
    check2, _ = _check(failing, clock)
    with pytest.raises(ConsumersUnknownError):
        check2.confirm(CPUS, "pod-b")
    with pytest.raises(ConsumersUnknownError, match="unreachable"):
        check2.remembered(CPUS, "pod-b")
    assert len(failing.reads) == 1


@dataclass
class FakePodGroups:
    """Stands in for the pod read: the PodGroup each pod UID names, counts reads, may fail."""

    groups: dict[str, str] = field(default_factory=dict)
    failing: bool = False
    reads: list[tuple[str, str, str]] = field(default_factory=list)
    #: pod UID -> an event its read waits for (and ``started`` is set when it began)
    gates: dict[str, threading.Event] = field(default_factory=dict)
    started: threading.Event = field(default_factory=threading.Event)

    def __call__(self, namespace: str, name: str, pod_uid: str, /) -> str:
        self.reads.append((namespace, name, pod_uid))
        gate = self.gates.get(pod_uid)
        if gate is not None:
            self.started.set()
            gate.wait(5)
        if self.failing:
            raise ConsumersUnknownError(f"cannot read pod {namespace}/{name}: apiserver unreachable")
        return self.groups.get(pod_uid, "")


GANG = ClaimBinding("u1", "ml", "cpus", frozenset(), PIN, pod_groups=(PodGroupRef("train", "pg-1"),))


def _group_check(
    reader: FakeReader, pods: FakePodGroups | None, clock: Clock | None = None
) -> tuple[ConsumerCheck, list[tuple[str, frozenset[str]]]]:
    recorded: list[tuple[str, frozenset[str]]] = []
    check = ConsumerCheck(
        reader, lambda uid, got: recorded.append((uid, got)), pod_groups=pods, clock=clock or Clock()
    )
    return check, recorded


def test_a_member_of_a_recorded_group_costs_one_pod_read_and_is_recorded() -> None:
    """The group is recorded: no read of the claim, one read of the pod, then none."""
    reader, pods = FakeReader(), FakePodGroups({"pod-b": "train"})
    check, recorded = _group_check(reader, pods)
    for _ in range(3):
        assert check.confirm(GANG, "pod-b", "worker-1").reserved_for("pod-b", "ml")
    assert reader.reads == [] and pods.reads == [("ml", "worker-1", "pod-b")]
    assert recorded == [("u1", frozenset({"pod-b"}))]
    assert check.remembered(GANG, "pod-b") is not None


@pytest.mark.parametrize("named", ["", "other"], ids=["no-group", "another-group"])
def test_a_pod_outside_the_group_is_not_a_consumer_for_a_while(named: str) -> None:
    """Not a member: not a consumer, nothing recorded, the answer kept for the pod a while."""
    reader, pods = FakeReader(), FakePodGroups({"pod-x": named})
    clock = Clock()
    check, recorded = _group_check(reader, pods, clock)
    for _ in range(3):
        assert not check.confirm(GANG, "pod-x", "x").reserved_for("pod-x", "ml")
    assert len(pods.reads) == 1 and recorded == []
    clock.now += 60
    check.confirm(GANG, "pod-x", "x")
    assert len(pods.reads) == 2


def test_groups_read_from_the_claim_send_the_next_pods_to_the_pod_read_only() -> None:
    """An entry that does not record the group (rebuilt, say): the claim's read finds it, then
    each pod of the group costs only its own read."""
    reader = FakeReader({"u1": ClaimConsumers(groups=frozenset({"train"}))})
    pods = FakePodGroups({"pod-a": "train", "pod-b": "train"})
    check, _ = _group_check(reader, pods)
    unrecorded = ClaimBinding("u1", "ml", "cpus", None, PIN)
    assert check.confirm(unrecorded, "pod-a", "worker-0").reserved_for("pod-a", "ml")
    assert check.confirm(unrecorded, "pod-b", "worker-1").reserved_for("pod-b", "ml")
    assert len(reader.reads) == 1 and len(pods.reads) == 2


def test_a_listed_pod_of_a_claim_with_groups_needs_no_pod_read() -> None:
    reader = FakeReader({"u1": ClaimConsumers(pods=frozenset({"pod-a"}), groups=frozenset({"train"}))})
    pods = FakePodGroups()
    check, _ = _group_check(reader, pods)
    assert check.confirm(ClaimBinding("u1", "ml", "cpus", None, PIN), "pod-a", "a").reserved_for(
        "pod-a", "ml"
    )
    assert pods.reads == []


@pytest.mark.parametrize(
    ("pods", "name", "match"),
    [
        pytest.param(
            FakePodGroups(failing=True), "worker-1", "cannot read pod ml/worker-1", id="unreachable"
        ),
        pytest.param(None, "worker-1", "cannot read pods", id="no-pod-reader"),
        pytest.param(FakePodGroups({"pod-b": "train"}), "", "did not name the pod", id="no-pod-name"),
    ],
)
def test_a_membership_that_cannot_be_read_is_unknown(
    pods: FakePodGroups | None, name: str, match: str
) -> None:
    """Never taken as an answer either way: the NRI plugin fails closed on it."""
    check, recorded = _group_check(FakeReader(), pods)
    with pytest.raises(ConsumersUnknownError, match=match):
        check.confirm(GANG, "pod-b", name)
    assert recorded == [] and check.learned("u1") == frozenset()


def test_the_pods_of_a_known_group_are_read_side_by_side() -> None:
    """Pod A's read hangs; pod B of the same group gets its own read and its answer meanwhile
    (a read per claim at a time would make B wait for A, then refuse it)."""
    gate = threading.Event()
    pods = FakePodGroups({"pod-a": "train", "pod-b": "train"}, gates={"pod-a": gate})
    check, _ = _group_check(FakeReader(), pods)
    answers: list[bool] = []
    slow = threading.Thread(
        target=lambda: answers.append(check.confirm(GANG, "pod-a", "a").reserved_for("pod-a", "ml"))
    )
    slow.start()
    try:
        assert pods.started.wait(5)
        assert check.confirm(GANG, "pod-b", "b").reserved_for("pod-b", "ml")
        assert not gate.is_set() and answers == []  # A's read is still in flight
    finally:
        gate.set()
        slow.join(5)
    assert answers == [True]
