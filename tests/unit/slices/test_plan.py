"""plan_sync: the pure diff of desired vs stored slices."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.slices.plan import plan_sync, slice_content

OWNER = {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1", "controller": True}


def _slice(index: int, devices: list[str], *, generation: int = 1, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"n1-numadra-dev-{index}"},
        "spec": {
            "driver": "numadra.dev",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": generation, "resourceSliceCount": count},
            "devices": [{"name": d} for d in devices],
        },
    }


def _stored(desired: list[dict[str, Any]], *, generation: int = 1) -> list[dict[str, Any]]:
    """What the apiserver would hold after publishing ``desired``: owner, server fields, timeAdded."""
    out = []
    for k, obj in enumerate(copy.deepcopy(desired)):
        obj["metadata"].update(uid=f"uid-{k}", resourceVersion=str(100 + k), ownerReferences=[OWNER])
        obj["spec"]["pool"].update(generation=generation, resourceSliceCount=len(desired))
        for device in obj["spec"]["devices"]:
            for taint in device.get("taints", []):
                taint.setdefault("timeAdded", "2026-01-01T00:00:00Z")
        out.append(obj)
    return out


def test_nothing_stored_creates_everything_at_generation_1() -> None:
    """A first publish creates every slice with the owner and a consistent pool."""
    plan = plan_sync([_slice(0, ["a"]), _slice(1, ["b"])], [], owner=OWNER)
    assert (len(plan.creates), plan.deletes, plan.updates, plan.generation) == (2, (), (), 1)
    assert all(c["metadata"]["ownerReferences"] == [OWNER] for c in plan.creates)
    assert {c["spec"]["pool"]["resourceSliceCount"] for c in plan.creates} == {2}


def test_unchanged_pool_is_an_empty_plan() -> None:
    """Server-set fields (uid, resourceVersion, timeAdded) never count as a change."""
    desired = [_slice(0, ["a"]), _slice(1, ["b"])]
    desired[0]["spec"]["devices"][0]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    assert plan_sync(desired, _stored(desired, generation=7), owner=OWNER).empty


def test_empty_pool_stored_without_devices_is_unchanged() -> None:
    """The apiserver omits an empty ``devices`` list; that is the empty pool we sent, not a change."""
    desired = [_slice(0, [])]
    stored = _stored(desired)
    del stored[0]["spec"]["devices"]
    assert plan_sync(desired, stored, owner=OWNER).empty


@pytest.mark.parametrize(
    ("new_devices", "updates", "generation"),
    [
        pytest.param([["a", "x"], ["b"]], 1, 7, id="one-slice-changed-keeps"),
        pytest.param([["a", "x"], ["b", "y"]], 2, 8, id="two-slices-changed-bump"),
    ],
)
def test_generation_rule(new_devices: list[list[str]], updates: int, generation: int) -> None:
    """One changed slice keeps the generation; more than one bumps it on every slice."""
    stored = _stored([_slice(0, ["a"]), _slice(1, ["b"])], generation=7)
    plan = plan_sync([_slice(i, d) for i, d in enumerate(new_devices)], stored, owner=OWNER)
    assert (len(plan.updates), plan.generation) == (updates, generation)
    assert all(u["metadata"]["resourceVersion"] for u in plan.updates)


def test_removed_slice_is_deleted_and_the_rest_bumped() -> None:
    """An obsolete slice is deleted with preconditions; survivors get generation + 1 and the new count."""
    stored = _stored([_slice(0, ["a"]), _slice(1, ["b"])], generation=3)
    plan = plan_sync([_slice(0, ["a"])], stored, owner=OWNER)
    assert [d["metadata"]["uid"] for d in plan.deletes] == ["uid-1"]
    assert [
        (u["spec"]["pool"]["generation"], u["spec"]["pool"]["resourceSliceCount"]) for u in plan.updates
    ] == [(4, 1)]


def test_owner_change_is_an_update() -> None:
    """A slice with another owner (a recreated Node has a new UID) is rewritten."""
    stored = _stored([_slice(0, ["a"])])
    new_owner = {**OWNER, "uid": "u-2"}
    plan = plan_sync([_slice(0, ["a"])], stored, owner=new_owner)
    assert [u["metadata"]["ownerReferences"] for u in plan.updates] == [[new_owner]]


def test_taint_time_added_is_carried_over() -> None:
    """An update keeps the stored timeAdded of a taint that is still wanted."""
    taint = {"key": "k", "value": "v", "effect": "NoExecute"}
    desired = [_slice(0, ["a", "b"])]
    desired[0]["spec"]["devices"][0]["taints"] = [dict(taint)]
    stored = _stored(desired)
    desired[0]["spec"]["devices"].append({"name": "c"})
    (update,) = plan_sync(desired, stored, owner=OWNER).updates
    assert update["spec"]["devices"][0]["taints"][0]["timeAdded"] == "2026-01-01T00:00:00Z"


def test_accepted_drop_is_not_rewritten() -> None:
    """When the apiserver dropped a field we sent, the same desired state does not loop on updates."""
    desired = [_slice(0, ["a"])]
    desired[0]["spec"]["devices"][0]["bindsToNode"] = True
    stored = _stored([_slice(0, ["a"])])
    first = plan_sync(desired, stored, owner=OWNER)
    assert len(first.updates) == 1
    sent, kept = first.updates[0], stored[0]
    accepted = {
        kept["metadata"]["name"]: (
            slice_content(sent, with_generation=False),
            slice_content(kept, with_generation=False),
        )
    }
    assert plan_sync(desired, stored, owner=OWNER, accepted=accepted).empty


def test_the_plan_never_writes_to_the_callers_slices() -> None:
    """Owner, pool, resourceVersion and a taint's timeAdded go into the plan's copies only: the
    publisher keeps its desired slices across syncs, so a write into them would leak into the next."""
    desired = [_slice(0, ["a", "b"]), _slice(1, ["c"])]
    desired[0]["spec"]["devices"][1]["taints"] = [{"key": "k", "value": "v", "effect": "NoExecute"}]
    stored = _stored(desired, generation=3)
    for have in stored:  # both slices changed on the server: both are updates
        have["spec"]["devices"][0]["attributes"] = {"x": {"int": 1}}
    before = copy.deepcopy(desired)
    plan = plan_sync(desired, stored, owner=OWNER)
    assert len(plan.updates) == 2
    assert desired == before
    first = next(u for u in plan.updates if u["metadata"]["name"] == "n1-numadra-dev-0")
    assert first["spec"]["devices"][1]["taints"][0]["timeAdded"] == "2026-01-01T00:00:00Z"
    assert "timeAdded" not in desired[0]["spec"]["devices"][1]["taints"][0]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document a value can be replaced at."""
    found = [at] if at else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*at, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*at, index))
    return found


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_stored_slice_is_diffed_never_raised_on(data: st.DataObject) -> None:
    """A stored slice is the apiserver's answer: one part of any JSON type, anywhere in it, is a
    slice that differs (and is rewritten) or one the diff passes over, never an exception that
    stops the publisher's sync or its watch handler."""
    desired = [_slice(0, ["a", "b"]), _slice(1, ["c"])]
    desired[0]["spec"]["devices"][0]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    stored: list[Any] = copy.deepcopy(_stored(desired))  # its owner refs are the shared OWNER
    where = data.draw(st.sampled_from([(0,), (1,), *[(i, *p) for i in (0, 1) for p in _paths(stored[i])]]))
    value = data.draw(_JSON)
    if len(where) == 1:
        stored[where[0]] = value
    else:
        node = stored[where[0]]
        for key in where[1:-1]:
            node = node[key]
        node[where[-1]] = value
    for obj in stored:
        if isinstance(obj, dict):
            slice_content(obj)
            slice_content(obj, with_generation=False)
    plan = plan_sync(desired, stored, owner=OWNER)
    written = {str(w["metadata"]["name"]) for w in (*plan.updates, *plan.creates)}
    assert written <= {"n1-numadra-dev-0", "n1-numadra-dev-1"}  # only ours are written
    for obsolete in plan.deletes:  # a stored slice of another name is deleted by its name
        assert isinstance(obsolete["metadata"]["name"], str) and obsolete["metadata"]["name"]
    for update in plan.updates:
        assert isinstance(update["metadata"]["resourceVersion"], str)
