"""The kube client's error mapping: metric labels, selectors, the KubeError fields, bad answers."""

from __future__ import annotations

import pytest

from driver.errors import KubeError
from driver.kube.client import KubeClient, error_kind, slice_field_selector
from harness.fakeapiserver import FakeApiServer, Fault


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        pytest.param(None, "refused", "unreachable", id="no-answer"),
        pytest.param(None, "ReadTimeoutError", "timeout", id="timeout"),
        pytest.param(401, "", "unauthorized", id="401"),
        pytest.param(403, "", "forbidden", id="403"),
        pytest.param(404, "", "not_found", id="404"),
        pytest.param(409, "", "conflict", id="409"),
        pytest.param(410, "", "gone", id="410"),
        pytest.param(422, "", "invalid", id="422"),
        pytest.param(400, "", "invalid", id="400"),
        pytest.param(429, "", "throttled", id="429"),
        pytest.param(503, "", "server", id="503"),
        pytest.param(418, "", "client", id="other-4xx"),
    ],
)
def test_error_kind(status: int | None, message: str, kind: str) -> None:
    """Every HTTP outcome gets one short, stable metric label."""
    assert error_kind(KubeError(message, status=status)) == kind


def test_kube_error_keeps_plain_construction() -> None:
    """KubeError("msg") still works: the new context fields all default."""
    err = KubeError("down")
    assert (str(err), err.status, err.transient, err.verb) == ("down", None, False, "")


def test_slice_field_selector_names_node_and_driver() -> None:
    """The selector is the same one the kubelet uses to wipe a node's slices."""
    assert slice_field_selector("n1", "numadra.dev") == "spec.nodeName=n1,spec.driver=numadra.dev"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"<html>", "list resourceslices: undecodable answer", id="undecodable"),
        pytest.param(b"[1]", "list resourceslices: answer is not an object", id="not-an-object"),
    ],
)
def test_bad_answer_to_a_list_names_the_collection(body: bytes, message: str) -> None:
    """A LIST (no object name) is named "resourceslices", not "resourceslices/"."""
    with FakeApiServer() as api:
        api.inject_fault(Fault(200, path_contains="/resourceslices", body=body))
        client = KubeClient(api.kubeconfig_path)
        try:
            with pytest.raises(KubeError) as info:
                client.list_resource_slices()
        finally:
            client.close()
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("retry_after", "seconds"),
    [
        pytest.param("7", 7.0, id="seconds"),
        pytest.param("Fri, 31 Dec 2027 23:59:59 GMT", None, id="date-ignored"),
    ],
)
def test_a_throttled_answer_carries_its_retry_after(retry_after: str, seconds: float | None) -> None:
    """429 + Retry-After: the KubeError says how long the apiserver asked to wait (delta-seconds,
    as client-go reads it), for the retry policy."""
    with FakeApiServer() as api:
        api.inject_fault(Fault(429, retry_after=retry_after))
        client = KubeClient(api.kubeconfig_path)
        try:
            with pytest.raises(KubeError) as info:
                client.get_node("n1")
        finally:
            client.close()
    assert (info.value.status, info.value.transient, info.value.retry_after) == (429, True, seconds)
