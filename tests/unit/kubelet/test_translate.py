"""Pure translation between kubelet messages and driver.plugin types."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver._proto import dra_v1_pb2, dra_v1beta1_pb2, health_v1_pb2, health_v1alpha1_pb2
from driver.kubelet import translate
from driver.names import base_request_name
from driver.plugin import ClaimRef, DeviceHealth, HealthState, PreparedDevice, PrepareResult

UID = "0f6e1b2c-3d4e-4f50-8a9b-0c1d2e3f4a5b"


def ref(name: str = "claim", uid: str = UID, namespace: str = "default") -> ClaimRef:
    return ClaimRef(namespace=namespace, name=name, uid=uid)


@pytest.mark.parametrize(
    ("claim", "fragment"),
    [
        pytest.param(ref(uid=""), "uid is empty", id="empty-uid"),
        pytest.param(ref(namespace=""), "namespace is empty", id="empty-namespace"),
        pytest.param(ref(name=""), "name is empty", id="empty-name"),
        pytest.param(ref(uid="u" * 129), "uid is 129 characters long, the limit is 128", id="long-uid"),
        pytest.param(ref(namespace="n" * 64), "namespace is 64 characters", id="long-namespace"),
        pytest.param(ref(name="a" * 254), "name is 254 characters", id="long-name"),
        pytest.param(ref(name="a" * 100_000), "name is 100000 characters", id="huge-name"),
        pytest.param(ref(name="../../etc/passwd"), "not a valid Kubernetes name", id="path-name"),
        pytest.param(ref(namespace="kube/system"), "not a valid Kubernetes namespace", id="slash-namespace"),
        pytest.param(ref(namespace="a.b"), "not a valid Kubernetes namespace", id="dotted-namespace"),
        pytest.param(ref(name="Upper"), "not a valid Kubernetes name", id="uppercase-name"),
        pytest.param(ref(uid="../x"), "not a valid Kubernetes uid", id="path-uid"),
        pytest.param(ref(uid=".hidden"), "not a valid Kubernetes uid", id="dot-uid"),
        pytest.param(ref(uid="a\x00b"), "not a valid Kubernetes uid", id="nul-uid"),
        pytest.param(ref(name="claim\n"), "not a valid Kubernetes name", id="newline-name"),
    ],
)
def test_bad_claim_reference_is_rejected_per_claim(claim: ClaimRef, fragment: str) -> None:
    """A malformed reference gets its own error entry and never reaches the driver."""
    good = ref(name="ok", uid="good-uid")
    check = translate.check_claims([claim, good])
    assert check.valid == (good,)
    assert list(check.rejected) == [claim.uid]
    assert fragment in check.rejected[claim.uid]


def test_valid_kubernetes_names_pass() -> None:
    """Real-looking names, dotted names and generated names are accepted unchanged."""
    claims = [ref(name="pod-gpu-xk2v9", uid=UID), ref(name="a.b-c", uid="u2", namespace="kube-system")]
    check = translate.check_claims(claims)
    assert check.valid == tuple(claims)
    assert check.rejected == {}


def test_duplicate_uids_are_rejected() -> None:
    """Two claims with one UID cannot share one map entry: both are rejected, others go through."""
    check = translate.check_claims(
        [ref(name="a", uid="dup"), ref(name="b", uid="dup"), ref(name="c", uid="x")]
    )
    assert [c.uid for c in check.valid] == ["x"]
    assert check.rejected == {"dup": "claim UID appears 2 times in one request"}


def test_an_identical_repeat_is_rejected_too() -> None:
    """The same reference twice is no dedup: both answers would share one map entry; the one check
    (also of the benches' and the claims tests' calls) rejects it like any repeated UID."""
    check = translate.check_claims([ref(name="a", uid="dup"), ref(name="a", uid="dup")])
    assert check.valid == ()
    assert check.rejected == {"dup": "claim UID appears 2 times in one request"}


def test_oversized_batch_rejects_every_claim() -> None:
    """More claims than the limit: each claim gets the same clear error, none reaches the driver."""
    claims = [ref(name=f"c{i}", uid=f"u{i}") for i in range(translate.MAX_CLAIMS_PER_REQUEST + 1)]
    check = translate.check_claims(claims)
    assert check.valid == ()
    assert len(check.rejected) == len(claims)
    assert "more than the limit of 256" in check.rejected["u0"]


def test_batch_at_the_limit_is_accepted() -> None:
    """Exactly the limit is fine."""
    claims = [ref(name=f"c{i}", uid=f"u{i}") for i in range(translate.MAX_CLAIMS_PER_REQUEST)]
    assert len(translate.check_claims(claims).valid) == translate.MAX_CLAIMS_PER_REQUEST


@pytest.mark.parametrize(
    ("name", "base"),
    [
        pytest.param("gpu", "gpu", id="plain"),
        pytest.param("gpu/high-mem", "gpu", id="subrequest"),
        pytest.param("gpu/a/b", "gpu", id="nested"),
        pytest.param("", "", id="empty"),
    ],
)
def test_base_request_name(name: str, base: str) -> None:
    """The sub-request part after the first slash is dropped."""
    assert base_request_name(name) == base


def test_complete_results_fills_forgotten_and_drops_unasked() -> None:
    """Every asked UID gets an entry; UIDs nobody asked for are dropped; names become base names."""
    device = PreparedDevice(("gpu/a", "gpu/b", "nic"), "pool", "dev", ("v/c=x",), share_id="s")
    results = {"a": PrepareResult(devices=(device,)), "extra": PrepareResult()}
    out = translate.complete_results([ref(uid="a"), ref(uid="b")], results, {"bad": "nope"})
    assert set(out) == {"a", "b", "bad"}
    assert out["a"].devices[0].request_names == ("gpu", "nic")
    assert out["a"].devices[0].share_id == "s"
    assert out["b"].error == "driver returned no result for this claim"
    assert out["bad"].error == "nope"


def test_complete_results_error_drops_devices() -> None:
    """A failed claim reports only its error, as the kubelet ignores devices then anyway."""
    device = PreparedDevice(("gpu",), "pool", "dev", ())
    out = translate.complete_results(
        [ref(uid="a")], {"a": PrepareResult(devices=(device,), error="boom")}, {}
    )
    assert out["a"] == PrepareResult(error="boom")


def test_complete_errors_fills_forgotten_and_drops_unasked() -> None:
    """Unprepare twin: every asked UID gets an error text ("" = done); unasked UIDs are dropped."""
    errors = {"a": "", "c": "busy", "extra": ""}
    out = translate.complete_errors([ref(uid="a"), ref(uid="b"), ref(uid="c")], errors, {"bad": "nope"})
    assert out == {"bad": "nope", "a": "", "b": "driver returned no result for this claim", "c": "busy"}


def _results() -> dict[str, PrepareResult]:
    shared = PreparedDevice(
        ("gpu",), "pool-a", "gpu-0", ("numadra.dev/gpu=uid-gpu-0", "extra=1"), share_id="sh-1"
    )
    plain = PreparedDevice((), "pool-a", "nic-0", ())
    return {
        "ok": PrepareResult(devices=(shared, plain)),
        "bad": PrepareResult(error="broken"),
        "empty": PrepareResult(),
    }


def test_prepare_response_v1_roundtrip() -> None:
    """v1 keeps share_id where given and leaves it unset (not empty) elsewhere; errors per UID."""
    wire = translate.prepare_response(translate.DRA_V1, _results()).SerializeToString()
    back = dra_v1_pb2.NodePrepareResourcesResponse.FromString(wire)
    assert set(back.claims) == {"ok", "bad", "empty"}
    gpu, nic = back.claims["ok"].devices
    assert (list(gpu.request_names), gpu.pool_name, gpu.device_name) == (["gpu"], "pool-a", "gpu-0")
    assert list(gpu.cdi_device_ids) == ["numadra.dev/gpu=uid-gpu-0", "extra=1"]
    assert gpu.HasField("share_id") and gpu.share_id == "sh-1"
    assert not nic.HasField("share_id")
    assert list(nic.request_names) == []
    assert back.claims["bad"].error == "broken" and not back.claims["bad"].devices
    assert back.claims["empty"].error == "" and not back.claims["empty"].devices


def test_the_versions_are_read_from_their_modules() -> None:
    """Each version's service name and whether its Device has share_id come from its descriptor."""
    assert translate.DRA_V1.service == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert translate.DRA_V1BETA1.service == "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
    assert (translate.DRA_V1.share_id, translate.DRA_V1BETA1.share_id) == (True, False)


def test_prepare_response_v1beta1_has_no_share_id() -> None:
    """v1beta1 carries the same devices; share_id does not exist in its schema."""
    back = dra_v1beta1_pb2.NodePrepareResourcesResponse.FromString(
        translate.prepare_response(translate.DRA_V1BETA1, _results()).SerializeToString()
    )
    gpu, _ = back.claims["ok"].devices
    assert gpu.device_name == "gpu-0"
    assert "share_id" not in {f.name for f in gpu.DESCRIPTOR.fields}
    assert back.claims["bad"].error == "broken"


@pytest.mark.parametrize(
    "api",
    [pytest.param(translate.DRA_V1, id="v1"), pytest.param(translate.DRA_V1BETA1, id="v1beta1")],
)
def test_unprepare_response_keeps_empty_entries(api: translate.DraApi) -> None:
    """A successful unprepare still has a (empty) map entry on the wire."""
    msg = translate.unprepare_response(api, {"done": "", "failed": "busy"})
    back = api.messages.NodeUnprepareResourcesResponse.FromString(msg.SerializeToString())
    assert set(back.claims) == {"done", "failed"}
    assert back.claims["done"].error == ""
    assert back.claims["failed"].error == "busy"


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        pytest.param(0, 0, id="empty"),
        pytest.param(1024, 1024, id="limit"),
        pytest.param(5000, 1024, id="long"),
    ],
)
def test_health_message_limit(length: int, expected: int) -> None:
    """Messages stay within 1024 chars; truncated ones end in '...'."""
    text = translate.health_message("x" * length)
    assert len(text) == expected
    assert text.endswith("...") == (length > 1024)


@pytest.mark.parametrize(
    ("state", "value"),
    [
        pytest.param(HealthState.UNKNOWN, 0, id="unknown"),
        pytest.param(HealthState.HEALTHY, 1, id="healthy"),
        pytest.param(HealthState.UNHEALTHY, 2, id="unhealthy"),
    ],
)
def test_health_status_values(state: HealthState, value: int) -> None:
    """Enum numbers match the published HealthStatus values in both versions."""
    assert translate.health_status_value(state) == value
    assert (
        health_v1alpha1_pb2.HealthStatus.Name(value) == health_v1_pb2.HealthStatus.Name(value) == state.name
    )


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(translate.health_response_v1, id="v1"),
        pytest.param(translate.health_response_v1alpha1, id="v1alpha1"),
    ],
)
def test_health_response(build: object) -> None:
    """Every device is reported with its status, time stamp, timeout and bounded message."""
    devices = [
        DeviceHealth("pool", "gpu-0", HealthState.HEALTHY),
        DeviceHealth("pool", "nic-0", HealthState.UNHEALTHY, "link down " * 200),
    ]
    msg = build(devices, 1_700_000_000, 30)  # type: ignore[operator]
    back = type(msg).FromString(msg.SerializeToString())
    assert [(d.device.pool_name, d.device.device_name, d.health) for d in back.devices] == [
        ("pool", "gpu-0", 1),
        ("pool", "nic-0", 2),
    ]
    assert {d.last_updated_time for d in back.devices} == {1_700_000_000}
    assert {d.health_check_timeout_seconds for d in back.devices} == {30}
    assert len(back.devices[1].message) == 1024


@pytest.mark.parametrize(
    ("health", "expected"),
    [
        pytest.param(
            DeviceHealth("p", "d", HealthState.HEALTHY, cdi_device_ids=("v/c=a", "v/c=b")), "v/c=a", id="cdi"
        ),
        pytest.param(DeviceHealth("p", "d", HealthState.HEALTHY), "drv.example/p/d", id="unprepared"),
    ],
)
def test_resource_id(health: DeviceHealth, expected: str) -> None:
    """resourceID as the kubelet derives it: first CDI ID, else driver/pool/device."""
    assert translate.resource_id("drv.example", health) == expected


_text = st.text(max_size=300) | st.sampled_from(["", "default", "claim-a", UID, "a/b", "..", "x" * 300])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.builds(ClaimRef, namespace=_text, name=_text, uid=_text), max_size=20))
def test_every_claim_gets_exactly_one_entry(claims: list[ClaimRef]) -> None:
    """Whatever the kubelet sends, each distinct UID ends up valid or rejected, never lost, never both."""
    check = translate.check_claims(claims)
    valid = [c.uid for c in check.valid]
    assert len(valid) == len(set(valid))
    assert set(valid).isdisjoint(check.rejected)
    assert set(valid) | set(check.rejected) == {c.uid for c in claims}
    response = translate.prepare_response(
        translate.DRA_V1, translate.complete_results(check.valid, {}, check.rejected)
    )
    assert set(response.claims) == {c.uid for c in claims}


def _normalized_by_copy(result: PrepareResult) -> PrepareResult:
    """What the response carries for ``result``, built anew: an error alone, or every device
    with its request names made base names, each once, in order."""
    if result.error:
        return PrepareResult(error=result.error)
    return PrepareResult(
        devices=tuple(
            PreparedDevice(
                request_names=tuple(dict.fromkeys(base_request_name(n) for n in d.request_names)),
                pool_name=d.pool_name,
                device_name=d.device_name,
                cdi_device_ids=d.cdi_device_ids,
                share_id=d.share_id,
            )
            for d in result.devices
        )
    )


_request_names = st.lists(
    st.sampled_from(["gpu", "nic", "cpu", "gpu/high-mem", "gpu/low", "nic/a"]), max_size=4
)
_devices = st.builds(
    PreparedDevice,
    request_names=st.one_of(_request_names.map(tuple), _request_names),  # a sloppy driver's list too
    pool_name=st.just("pool"),
    device_name=st.sampled_from(["gpu-0", "nic-1"]),
    cdi_device_ids=st.lists(st.just("numadra.dev/claim=x"), max_size=2).map(tuple),
    share_id=st.none() | st.just("share"),
)
_any_results = st.builds(
    PrepareResult,
    devices=st.one_of(st.lists(_devices, max_size=3).map(tuple), st.lists(_devices, max_size=3)),
    error=st.sampled_from(["", "", "it failed"]),
)


@settings(max_examples=300)
@given(results=st.lists(_any_results, min_size=1, max_size=4))
def test_complete_results_normalizes_as_a_copy_would(results: list[PrepareResult]) -> None:
    """A result that is already in the response's form is handed on as it is, any other is
    rebuilt: either way each claim's result equals the one built anew, tuples throughout."""
    refs = [ClaimRef("ns", f"c-{i}", f"uid-{i}") for i in range(len(results))]
    out = translate.complete_results(refs, {r.uid: res for r, res in zip(refs, results, strict=True)}, {})
    for ref, result in zip(refs, results, strict=True):
        got = out[ref.uid]
        assert got == _normalized_by_copy(result)
        assert type(got.devices) is tuple
        assert all(type(d.request_names) is tuple for d in got.devices)
