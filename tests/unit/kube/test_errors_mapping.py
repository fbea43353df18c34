"""Pure parts of the kube client: metric labels for errors, selectors, and the KubeError fields."""

from __future__ import annotations

import pytest

from driver.errors import KubeError
from driver.kube.client import error_kind, slice_field_selector


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
