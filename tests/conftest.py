"""Shared pytest configuration: what every tier's fixtures may ask about a scenario's outcome."""

from __future__ import annotations

from collections.abc import Generator

import pytest

#: set on a test item whose call phase failed; the e2e and node fixtures print the component logs
CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember whether a test's call failed, for the log dumps of the ``cluster`` and ``node``
    fixtures (a fixture's teardown sees the item, not the report)."""
    report: pytest.TestReport = yield
    if report.when == "call" and report.failed:
        item.stash[CALL_FAILED] = True
    return report
