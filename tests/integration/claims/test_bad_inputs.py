"""Named bad inputs: each gives that claim a specific error while a good claim in the batch succeeds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from driver.plugin import ClaimRef
from driver.state.journal import Journal, journal_path
from tests.integration.claims._world import (
    CPU0,
    DRIVER,
    GPU0,
    GPU1,
    NIC0,
    NIC1,
    World,
    claim,
    cpu_result,
    opaque,
    result,
)

BAD = "bad00000-0000-4000-8000-000000000000"
GOOD = "good0000-0000-4000-8000-000000000000"
API = "numadra.dev/v1alpha1"


@dataclass(frozen=True)
class Case:
    """How to make the bad claim: returns the ref the kubelet sends (after registering claims)."""

    setup: Callable[[World], ClaimRef]
    error: str


def _add(**kwargs: Any) -> Callable[[World], ClaimRef]:
    def setup(world: World) -> ClaimRef:
        return world.getter.add(claim(BAD, "bad", **kwargs))

    return setup


def _cfg(params: Any, **kwargs: Any) -> Callable[[World], ClaimRef]:
    return _add(results=[result("gpu", GPU1)], configs=[opaque(params, **kwargs)])


def _unknown(world: World) -> ClaimRef:
    return ClaimRef("default", "bad", BAD)


def _uid_mismatch(world: World) -> ClaimRef:
    world.getter.add(claim("someone-else", "bad", results=[result("gpu", GPU1)]))
    return ClaimRef("default", "bad", BAD)


def _unreachable(world: World) -> ClaimRef:
    ref = world.getter.add(claim(BAD, "bad", results=[result("gpu", GPU1)]))
    world.getter.unreachable.add(("default", "bad"))
    return ref


def _huge(world: World) -> ClaimRef:
    results = [result(f"r{i}", GPU1) for i in range(1000)]
    return world.getter.add(claim(BAD, "bad", results=results))


def _raw_results(value: Any) -> Callable[[World], ClaimRef]:
    def setup(world: World) -> ClaimRef:
        obj = claim(BAD, "bad", results=[])
        obj["status"]["allocation"]["devices"]["results"] = value
        return world.getter.add(obj)

    return setup


def _raw_requests(value: Any, *, alternatives: bool = False) -> Callable[[World], ClaimRef]:
    """A claim whose ``spec.devices.requests`` (or its first request's ``firstAvailable``) is ``value``."""

    def setup(world: World) -> ClaimRef:
        obj = claim(BAD, "bad", results=[result("gpu", GPU1)])
        if alternatives:
            obj["spec"]["devices"]["requests"][0]["firstAvailable"] = value
        else:
            obj["spec"]["devices"]["requests"] = value
        return world.getter.add(obj)

    return setup


CASES = {
    "unknown-claim-404": Case(_unknown, "ResourceClaim not found in the apiserver"),
    "uid-mismatch": Case(_uid_mismatch, "got replaced: the apiserver's claim has UID 'someone-else'"),
    "not-allocated": Case(_add(results=[result("gpu", GPU1)], allocated=False), "not allocated"),
    "other-pool": Case(
        _add(results=[result("gpu", GPU1, pool="node-b")]),
        "request 'gpu': device 'gpu-0000-af-00-0' is in pool 'node-b', not this node's pool 'node-a'",
    ),
    "unknown-device": Case(
        _add(results=[result("gpu", "gpu-0000-99-00-0")]),
        "request 'gpu': device 'gpu-0000-99-00-0' not found in this node's inventory",
    ),
    "config-not-json-object": Case(_cfg([1, 2]), "parameters must be a JSON object, got array"),
    "config-is-a-string": Case(_cfg('{"kind": "GpuConfig"}'), "parameters must be a JSON object, got string"),
    "config-unknown-field": Case(
        _cfg({"apiVersion": API, "kind": "GpuConfig", "colour": "red"}), "GpuConfig: unknown field(s) colour"
    ),
    "config-wrong-type-mode": Case(
        _cfg({"apiVersion": API, "kind": "CpuConfig", "mode": 5}),
        "CpuConfig.mode must be 'exclusive' or 'shared', got 5",
    ),
    "config-wrong-type-env": Case(
        _cfg({"apiVersion": API, "kind": "GpuConfig", "env": {"A": 1}}),
        "GpuConfig.env.A must be a string, got number",
    ),
    "config-env-not-object": Case(
        _cfg({"apiVersion": API, "kind": "GpuConfig", "env": ["A=1"]}),
        "GpuConfig.env must be an object of strings",
    ),
    "config-wrong-api-version": Case(
        _cfg({"apiVersion": "numadra.dev/v9", "kind": "GpuConfig"}),
        "apiVersion must be 'numadra.dev/v1alpha1'",
    ),
    "config-unknown-kind": Case(_cfg({"apiVersion": API, "kind": "TpuConfig"}), "kind must be one of"),
    "config-reserved-env": Case(
        _cfg({"apiVersion": API, "kind": "DeviceConfig", "env": {"NUMADRA_CPUS": "0-63"}}),
        "reserved prefix NUMADRA_",
    ),
    "config-bad-env-name": Case(
        _cfg({"apiVersion": API, "kind": "GpuConfig", "env": {"a-b": "x"}}), "invalid variable name 'a-b'"
    ),
    "config-for-unknown-request": Case(
        _cfg({"apiVersion": API, "kind": "GpuConfig"}, requests=["nope"]), "names unknown request(s) 'nope'"
    ),
    "huge-number-of-results": Case(_huge, "too many allocation results: 1000 (the API allows 32)"),
    "results-not-a-list": Case(_raw_results("gpu"), "results/config must be lists"),
    # a wrong type in the spec's requests raised TypeError (an internal error) before they were checked
    "requests-a-number": Case(_raw_requests(5), "spec.devices.requests: must be a list, got a number"),
    "first-available-a-boolean": Case(
        _raw_requests(True, alternatives=True),
        "spec.devices.requests[0].firstAvailable: must be a list, got a boolean",
    ),
    "request-name-a-number": Case(
        _raw_requests([{"name": 7}]), "spec.devices.requests[0].name: must be a string, got a number"
    ),
    "result-not-an-object": Case(_raw_results([42]), "allocation result #0 is not an object"),
    "result-missing-device": Case(
        _raw_results([{"request": "gpu", "driver": DRIVER, "pool": "node-a"}]),
        "request, pool and device must be strings",
    ),
    "path-like-request-name": Case(_add(results=[result("../x", GPU1)]), "invalid request name '../x'"),
    # a bad reference (a path-like name or UID, a namespace with a slash, an empty UID) meets the
    # kubelet path's one check: tests/unit/kubelet/test_translate.py and
    # tests/integration/kubelet/test_dra.py hold those cases; test_a_bad_reference_is_never_read
    "apiserver-unreachable": Case(
        _unreachable, "cannot get ResourceClaim: get resourceclaims/default/bad: connection refused"
    ),
    "device-allocated-twice": Case(
        _add(results=[result("gpu", GPU1), result("gpu2", GPU1)]), "device 'gpu-0000-af-00-0' allocated twice"
    ),
    "cpu-count-not-whole": Case(
        _add(results=[cpu_result("cpu", "1500m")]), "consumed cpus not a whole CPU count: '1500m'"
    ),
    "shared-pool-empty": Case(
        _add(
            results=[cpu_result("cpu", 0)],
            configs=[opaque({"apiVersion": API, "kind": "CpuConfig", "mode": "shared"})],
        ),
        "empty shared pool restriction",
    ),
    "cpus-exhausted": Case(_add(results=[cpu_result("cpu", 9)]), "request cpu"),
    "shareid-on-a-whole-gpu": Case(
        _add(results=[result("gpu", GPU1, share_id="5e1d0c3a-0000-4000-8000-000000000001")]),
        "has shareID '5e1d0c3a-0000-4000-8000-000000000001', but this gpu is not published as shareable",
    ),
    "shareid-path-like": Case(
        _add(results=[cpu_result("cpu", 1, share="../x")]), "shareID '../x' is not a UID"
    ),
    "shareid-not-a-string": Case(
        _add(results=[{**result("gpu", GPU1), "shareID": 7}]), "shareID 7 is not a UID"
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_claim_fails_alone(world: World, case: Case) -> None:
    """The bad claim gets its specific error naming it; the good claim of the batch is prepared."""
    good = world.getter.add(claim(GOOD, "good", results=[result("gpu", GPU0), result("nic", NIC0)]))
    bad = case.setup(world)
    out = world.driver().prepare_claims([bad, good])
    assert set(out) == {bad.uid, GOOD}
    assert out[GOOD].ok, out[GOOD].error
    assert [d.device_name for d in out[GOOD].devices] == [GPU0, NIC0]
    error = out[bad.uid].error
    assert case.error in error
    assert f"uid {bad.uid})" in error  # every error names the claim
    assert not out[bad.uid].devices
    assert all(GOOD in name for name in world.cdi_files())  # nothing written for the bad claim
    journal = Journal(journal_path(world.plugin_dir), read_only=True)
    journal.load()
    assert [entry.uid for entry in journal.entries()] == [GOOD]


def test_other_drivers_only_is_success_without_devices(world: World) -> None:
    """Results and configs of other drivers are skipped: success with no devices and no files."""
    ref = world.getter.add(
        claim(
            "u-other",
            results=[result("gpu", "gpu-0", driver="gpu.nvidia.com")],
            configs=[opaque([1, 2, 3], driver="gpu.nvidia.com")],  # not ours to judge
        )
    )
    drv = world.driver()
    res = drv.prepare_claims([ref])["u-other"]
    assert res.ok
    assert res.devices == ()
    assert world.cdi_files() == []
    assert drv.unprepare_claims([ref]) == {"u-other": ""}


def test_mixed_drivers_only_ours_prepared(world: World) -> None:
    """A claim with another driver's result next to ours prepares only ours."""
    ref = world.getter.add(
        claim("u-mix", results=[result("a", "x", driver="other.dev", pool="elsewhere"), result("b", NIC1)])
    )
    res = world.driver().prepare_claims([ref])["u-mix"]
    assert res.ok, res.error
    assert [d.device_name for d in res.devices] == [NIC1]


def test_a_bad_reference_is_never_read(world: World) -> None:
    """A reference the kubelet path's check rejects gets its error and is not read; the rest go on.

    A UID named twice (an identical repeat too: tests/unit/kubelet/test_translate.py) and a bad
    name are refused before any read, with the messages the kubelet gets.
    """
    good = world.getter.add(claim(GOOD, "good", results=[result("gpu", GPU0)]))
    dup = world.getter.add(claim("u-dup", results=[result("gpu", GPU1)]))
    out = world.driver().prepare_claims([dup, dup, ClaimRef("default", "../x", BAD), good])
    assert out["u-dup"].error == "claim UID appears 2 times in one request"
    assert "name '../x' is not a valid Kubernetes name" in out[BAD].error
    assert out[GOOD].ok, out[GOOD].error
    assert world.getter.calls == 1  # the good claim alone


def test_cdi_dir_not_writable(world: World) -> None:
    """A CDI dir that cannot hold files fails that claim with the path; nothing is journaled."""
    ref = world.getter.add(claim("u-ro", results=[result("gpu", GPU0)]))
    drv = world.driver()
    world.cdi_dir.rmdir()
    world.cdi_dir.write_text("not a directory")  # unwritable even for root
    res = drv.prepare_claims([ref])["u-ro"]
    assert not res.ok
    assert "cannot write" in res.error
    assert str(world.cdi_dir) in res.error
    assert drv.prepared_claims() == []
    assert not (world.plugin_dir / "dra-device-metadata" / "u-ro_gpu.json").exists()
    world.cdi_dir.unlink()
    world.cdi_dir.mkdir()
    assert drv.prepare_claims([ref])["u-ro"].ok  # and a retry once the dir is back works


def test_device_vanished_from_inventory(world: World) -> None:
    """A device that disappeared is refused for new claims; prepared claims still answer."""
    from tests.integration.claims._world import make_inventory

    old = world.getter.add(claim("u-old", results=[result("gpu", GPU1)]))
    new = world.getter.add(claim("u-new", results=[result("gpu", GPU1)]))
    drv = world.driver()
    first = drv.prepare_claims([old])["u-old"]
    assert first.ok
    world.inventory = make_inventory(with_gpu1=False)
    out = drv.prepare_claims([old, new])
    assert out["u-old"] == first
    assert "device 'gpu-0000-af-00-0' not found in this node's inventory" in out["u-new"].error


def test_device_already_prepared_for_another_claim(world: World) -> None:
    """A whole GPU prepared for one claim is refused to a second one (last line of defence)."""
    a = world.getter.add(claim("u-a", "a", results=[result("gpu", GPU0)]))
    b = world.getter.add(claim("u-b", "b", results=[result("gpu", GPU0)]))
    out = world.driver().prepare_claims([a, b])
    assert out["u-a"].ok
    assert "device 'gpu-0000-3b-00-0' is already prepared for claim default/a (uid u-a)" in out["u-b"].error


def test_share_ids_do_not_split_a_whole_gpu(world: World) -> None:
    """The attack: three claims name the same GPU, each with its own shareID. A GPU is published
    without allowMultipleAllocations, so the shareIDs are refused and at most one claim gets it."""
    refs = [
        world.getter.add(
            claim(
                f"u-s{i}",
                f"s{i}",
                results=[result("gpu", GPU0, share_id=f"5e1d0c3a-0000-4000-8000-00000000000{i}")],
            )
        )
        for i in range(3)
    ]
    out = world.driver().prepare_claims(refs)
    assert not any(res.ok for res in out.values())
    assert all("not published as shareable" in res.error for res in out.values())
    assert world.cdi_files() == []


def test_shareable_kinds_are_the_published_ones(tmp_path: Path) -> None:
    """selection.SHAREABLE_KINDS is exactly the kinds the slice builder marks allowMultipleAllocations."""
    from driver.claims.selection import SHAREABLE_KINDS
    from driver.inventory.discovery import discover
    from driver.slices.builder import build_slices
    from harness.hosttree import TOPOLOGIES, write_host_tree
    from tests.integration.claims._world import NODE, make_inventory

    shareable: set[str] = set()
    whole: set[str] = set()
    grace_hopper = discover(write_host_tree(tmp_path, TOPOLOGIES["grace_hopper"]), use_nvml=False)
    slices = [obj for inv in (make_inventory(), grace_hopper) for obj in build_slices(inv, node_name=NODE)]
    for obj in slices:
        for device in obj["spec"].get("devices", []):
            kind = device["attributes"]["type"]["string"]
            (shareable if device.get("allowMultipleAllocations") else whole).add(kind)
    assert shareable == {k.value for k in SHAREABLE_KINDS}
    assert not shareable & whole


def test_cpu_shares_of_one_device_in_two_claims(world: World) -> None:
    """Two claims may hold shares of the same cpu device; their CPUs stay disjoint."""
    a = world.getter.add(
        claim("u-a", "a", results=[cpu_result("cpu", 2, share="33333333-0000-4000-8000-000000000001")])
    )
    b = world.getter.add(
        claim("u-b", "b", results=[cpu_result("cpu", 2, share="33333333-0000-4000-8000-000000000002")])
    )
    drv = world.driver()
    out = drv.prepare_claims([a, b])
    assert out["u-a"].ok and out["u-b"].ok
    assert out["u-a"].devices[0].device_name == out["u-b"].devices[0].device_name == CPU0
    pins = [e.pinning.cpus for e in drv.prepared_claims() if e.pinning]
    assert len(pins) == 2
    assert not pins[0] & pins[1]


def test_apiserver_unreachable_for_every_claim(world: World) -> None:
    """With no apiserver, every claim fails with a clear error and nothing is written."""
    refs = [world.getter.add(claim(f"u-{i}", results=[result("gpu", GPU0)])) for i in range(3)]
    world.getter.unreachable.update((r.namespace, r.name) for r in refs)
    out = world.driver().prepare_claims(refs)
    assert all("connection refused" in r.error for r in out.values())
    assert world.cdi_files() == []
