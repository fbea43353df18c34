"""publish_error_handler: the publisher's failed writes are counted by operation; anything else
goes to the driver's error handling."""

from __future__ import annotations

import pytest

from driver.errors import KubeError, SliceError, recoverable
from driver.observability import Metrics
from driver.observability.updater import publish_error_handler


def _errors(metrics: Metrics, operation: str) -> float | None:
    return metrics.sample("numadra_publish_errors_total", {"operation": operation})


@pytest.mark.parametrize("verb", ["create", "update", "delete"])
def test_a_failed_write_is_counted_by_its_operation(verb: str) -> None:
    """The publisher reports its KubeErrors marked recoverable; the write's verb is the label."""
    metrics = Metrics("numadra.dev", "node-a")
    others: list[str] = []
    on_error = publish_error_handler(metrics, lambda err, msg: others.append(msg))
    on_error(recoverable(KubeError("conflict", verb=verb, resource="resourceslices", status=409)))
    assert _errors(metrics, verb) == 1.0
    assert others == []


def test_a_failed_read_is_not_a_publish_error() -> None:
    """A LIST or GET that failed was logged and is retried; it counts as no write."""
    metrics = Metrics("numadra.dev", "node-a")
    others: list[str] = []
    on_error = publish_error_handler(metrics, lambda err, msg: others.append(msg))
    on_error(recoverable(KubeError("unreachable", verb="list", resource="resourceslices")))
    assert {op: _errors(metrics, op) for op in ("create", "update", "delete")} == {
        "create": 0.0,
        "update": 0.0,
        "delete": 0.0,
    }
    assert others == []


def test_any_other_error_goes_to_the_drivers_error_handling() -> None:
    """What is not an apiserver error is the driver's to judge (recoverable or fatal)."""
    metrics = Metrics("numadra.dev", "node-a")
    others: list[tuple[BaseException, str]] = []
    on_error = publish_error_handler(metrics, lambda err, msg: others.append((err, msg)))
    error = SliceError("too many devices")
    on_error(error)
    assert others == [(error, "slice publishing")]
