"""The error tree and the recoverable marker."""

from __future__ import annotations

import pytest

from driver.errors import ClaimError, ConfigDecodeError, DriverError, KubeError, is_recoverable, recoverable


def test_claim_error_carries_uid_and_reason() -> None:
    """A ClaimError names the claim in its message and keeps the bare reason."""
    err = ConfigDecodeError("abc-123", "parameters must be a JSON object")
    assert err.claim_uid == "abc-123"
    assert err.reason == "parameters must be a JSON object"
    assert "abc-123" in str(err)
    assert isinstance(err, ClaimError)
    assert isinstance(err, DriverError)


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        pytest.param(KubeError("down"), False, id="plain"),
        pytest.param(recoverable(KubeError("down")), True, id="marked"),
    ],
)
def test_is_recoverable(err: BaseException, expected: bool) -> None:
    """Only errors marked recoverable (directly or in the cause chain) count as recoverable."""
    assert is_recoverable(err) is expected


def test_recoverable_in_cause_chain() -> None:
    """A recoverable error wrapped by another one is still recoverable."""
    inner = recoverable(KubeError("timeout"))
    outer = DriverError("publish failed")
    outer.__cause__ = inner
    assert is_recoverable(outer)
    assert recoverable(inner) is inner
