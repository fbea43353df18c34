"""Prepare records which pods a claim is reserved for; the journal keeps it; pinning binds to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from driver.claims.driver import reserved_pods
from driver.pinning.binding import claim_binding
from driver.state.entry import JournalEntry
from driver.state.index import prepared_view
from driver.state.journal import Journal, journal_path
from tests.integration.claims._world import GPU0, GPU1, World, claim, cpu_result, result

UID = "7a1c8a9e-0d1b-4c3a-9e8f-0000000000a1"
POD_1 = "0b6f3d52-1111-4c3a-9e8f-000000000001"
POD_2 = "0b6f3d52-2222-4c3a-9e8f-000000000002"


def _reserved(*uids: str, resource: str = "pods", api_group: str = "") -> list[dict[str, str]]:
    return [{"apiGroup": api_group, "resource": resource, "name": f"pod-{u[-1]}", "uid": u} for u in uids]


def _cpu_claim(reserved_for: list[Any] | None) -> dict[str, Any]:
    obj = claim(UID, "cpus", "ml", results=[cpu_result("main", 2)])
    if reserved_for is not None:
        obj["status"]["reservedFor"] = reserved_for
    return obj


def _canonical(body: Any) -> str:
    """The form the journal stores entries in (its docstring): sorted keys, compact separators."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _entry(world: World) -> JournalEntry:
    journal = Journal(journal_path(world.plugin_dir), read_only=True)
    journal.load()
    entry = journal.get(UID)
    assert entry is not None
    return entry


def test_prepare_records_reserved_pods_in_the_journal(world: World) -> None:
    """The pods of status.reservedFor are journaled with the claim; a restarted driver reads them."""
    ref = world.getter.add(_cpu_claim(_reserved(POD_1)))
    assert world.driver().prepare_claims([ref])[UID].ok
    entry = _entry(world)
    assert entry.reserved_pods == (POD_1,)
    assert entry.namespace == "ml"
    binding = claim_binding(prepared_view(entry), world.inventory)
    assert binding.pods == frozenset({POD_1})
    assert binding.pinning is not None and binding.pinning.cpus == entry.pinning.cpus  # type: ignore[union-attr]


def test_only_pod_consumers_count() -> None:
    """Other consumer kinds (a PodGroup, a custom resource) and junk items are not pods."""
    obj = _cpu_claim(
        [
            *_reserved(POD_1),
            *_reserved(POD_2, resource="podgroups", api_group="scheduling.k8s.io"),
            {"resource": "pods", "apiGroup": "example.com", "uid": "x"},
            {"resource": "pods", "uid": 7},
            "junk",
            *_reserved(POD_1),
        ]
    )
    assert reserved_pods(obj) == (POD_1,)
    assert reserved_pods({"status": {"reservedFor": "nope"}}) == ()
    assert reserved_pods({}) == ()


def test_claim_reserved_for_no_pod_is_prepared_but_binds_no_pod(world: World) -> None:
    """The kubelet never prepares such a claim; if one comes, its devices are prepared, pinning binds none."""
    ref = world.getter.add(_cpu_claim(None))
    assert world.driver().prepare_claims([ref])[UID].ok
    entry = _entry(world)
    assert entry.reserved_pods == ()
    assert claim_binding(prepared_view(entry)).pods == frozenset()


def test_repeat_prepare_adds_pods_reserved_since(world: World) -> None:
    """A repeated prepare (kubelet restart, a shared claim) adds newly reserved pods, keeps the old."""
    ref = world.getter.add(_cpu_claim(_reserved(POD_1)))
    drv = world.driver()
    first = drv.prepare_claims([ref])[UID]
    world.getter.add(_cpu_claim(_reserved(POD_2)))
    assert drv.prepare_claims([ref])[UID] == first
    assert _entry(world).reserved_pods == (POD_1, POD_2)


def test_entry_without_reserved_pods_reads_as_not_recorded(world: World, tmp_path: Path) -> None:
    """An entry journaled by an older numadra has no reservedPods: None, not "no pod"; text unchanged."""
    ref = world.getter.add(_cpu_claim(_reserved(POD_1)))
    assert world.driver().prepare_claims([ref])[UID].ok
    entry = _entry(world)
    as_json = entry.to_json()
    assert as_json["reservedPods"] == [POD_1]
    assert _canonical(as_json) in journal_path(world.plugin_dir).read_text()
    del as_json["reservedPods"]
    old = JournalEntry.from_json(json.loads(_canonical(as_json)))
    assert old.reserved_pods is None
    assert "reservedPods" not in old.to_json()
    resaved = Journal(journal_path(tmp_path))
    resaved.load()
    resaved.put(old)
    resaved.save()
    text = resaved.path.read_text()
    assert _canonical(old.to_json()) in text
    assert "reservedPods" not in text
    assert claim_binding(prepared_view(old)).pods is None


def test_gpu_only_claim_binding_has_the_devices_nodes(world: World) -> None:
    """A claim without CPUs binds memory nodes: those of its GPUs, as its CDI env says."""
    obj = claim(UID, "gpus", "ml", results=[result("gpu", GPU0), result("gpu", GPU1)])
    obj["status"]["reservedFor"] = _reserved(POD_1)
    ref = world.getter.add(obj)
    assert world.driver().prepare_claims([ref])[UID].ok
    binding = claim_binding(prepared_view(_entry(world)), world.inventory)
    assert binding.pinning is None
    assert binding.mems == frozenset({0, 1})
    assert binding.pods == frozenset({POD_1})


def _group(name: str) -> dict[str, str]:
    return {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": name, "uid": f"pg-{name}"}


def test_prepare_records_the_claims_podgroups_and_a_repeat_adds_new_ones(world: World) -> None:
    """The kubelet prepares a PodGroup's claim for the group's first pod: the journal keeps the
    group beside the (here empty) pods, pinning's view carries it, a repeat adds a later group."""
    ref = world.getter.add(_cpu_claim([_group("train")]))
    drv = world.driver()
    assert drv.prepare_claims([ref])[UID].ok
    entry = _entry(world)
    assert entry.reserved_pods == ()
    assert [(g.name, g.uid) for g in entry.reserved_groups] == [("train", "pg-train")]
    assert claim_binding(prepared_view(entry)).group_names == frozenset({"train"})
    world.getter.add(_cpu_claim([_group("train"), *_reserved(POD_1), _group("eval")]))
    assert drv.prepare_claims([ref])[UID].ok
    again = _entry(world)
    assert [g.name for g in again.reserved_groups] == ["train", "eval"]
    assert again.reserved_pods == (POD_1,)
