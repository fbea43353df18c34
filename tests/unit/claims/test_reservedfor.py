"""status.reservedFor parsed: pods and PodGroups, each once, junk entries skipped, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from driver.claims.consumers import other_consumers
from driver.claims.reservedfor import reserved_pod_groups, reserved_pods
from driver.pinning.types import PodGroupRef


def _claim(entries: Any) -> dict[str, Any]:
    return {"status": {"reservedFor": entries}}


def _group(name: Any = "train", uid: Any = "pg-1", **over: Any) -> dict[str, Any]:
    return {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": name, "uid": uid, **over}


def test_podgroup_entries_are_the_claims_groups_and_not_its_pods() -> None:
    """A PodGroup entry names a group (name and UID); a pod entry beside it stays a pod."""
    obj = _claim([{"apiGroup": "", "resource": "pods", "name": "p", "uid": "pod-1"}, _group()])
    assert reserved_pod_groups(obj) == (PodGroupRef("train", "pg-1"),)
    assert reserved_pods(obj) == ("pod-1",)
    assert other_consumers(obj) == 0


def test_groups_keep_their_order_and_repeat_once() -> None:
    obj = _claim([_group("b", "u-b"), _group("a", "u-a"), _group("b", "u-b")])
    assert reserved_pod_groups(obj) == (PodGroupRef("b", "u-b"), PodGroupRef("a", "u-a"))


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(_group(name=""), id="empty-name"),
        pytest.param(_group(uid=""), id="empty-uid"),
        pytest.param(_group(name=7), id="name-not-a-string"),
        pytest.param(_group(uid=None), id="uid-null"),
        pytest.param(_group(apiGroup="scheduling.x-k8s.io"), id="another-api-group"),
        pytest.param(_group(apiGroup=""), id="core-group"),
        pytest.param(_group(resource="podgroup"), id="singular-resource"),
        pytest.param(_group(resource="workloads"), id="a-workload"),
        pytest.param("junk", id="not-an-object"),
        pytest.param(["train"], id="a-list"),
    ],
)
def test_junk_entries_are_skipped(entry: Any) -> None:
    """Only ``scheduling.k8s.io``/``podgroups`` with a name and UID is a group; the rest is skipped."""
    assert reserved_pod_groups(_claim([entry, _group("ok", "u-ok")])) == (PodGroupRef("ok", "u-ok"),)


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param({}, id="no-status"),
        pytest.param({"status": None}, id="null-status"),
        pytest.param(_claim(None), id="null-list"),
        pytest.param(_claim("train"), id="a-string"),
        pytest.param(_claim({"name": "train"}), id="an-object"),
    ],
)
def test_a_missing_or_malformed_list_has_no_groups(claim: dict[str, Any]) -> None:
    assert reserved_pod_groups(claim) == ()
    assert reserved_pods(claim) == ()


def test_other_consumer_kinds_are_counted_as_others() -> None:
    """Neither pods nor PodGroups: numadra cannot tell their pods."""
    obj = _claim([_group(), {"apiGroup": "example.com", "resource": "gangs", "name": "g", "uid": "x"}])
    assert other_consumers(obj) == 1
