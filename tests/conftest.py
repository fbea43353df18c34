"""Shared pytest configuration: what every tier's fixtures may ask about a scenario's outcome, how
the suite is split between pytest-xdist workers, and the tiers' sections of the summary."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest

from tests.support.workers import TierScheduling

#: set on a test item whose call phase failed; the e2e and node fixtures print the component logs
CALL_FAILED = pytest.StashKey[bool]()

#: title -> the lines of a tier's section at the end of the run (versions, startup timings, one
#: line per scenario); a tier's conftest adds its own, an empty list prints no section
SECTIONS: dict[str, Callable[[], list[str]]] = {}
#: the sections the pytest-xdist workers rendered, gathered by the controller as each one ends
_WORKER_SECTIONS: dict[str, list[str]] = {}
_WORKER_OUTPUT_KEY = "numadra_sections"


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


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n``, whatever ``--dist`` asked for (except ``each``): the tier groups stay whole and
    modules stay together, because the heavy tiers are only correct that way."""
    if config.getvalue("dist") == "each":
        return None
    return TierScheduling(config, log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand the tiers' sections to the controller, which prints them."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output[_WORKER_OUTPUT_KEY] = {title: render() for title, render in SECTIONS.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the controller: keep the sections a worker rendered (the tier ran there)."""
    for title, lines in getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT_KEY, {}).items():
        if lines:
            _WORKER_SECTIONS.setdefault(title, []).extend(lines)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The tiers' sections (versions and timings of the real components), in every log, also
    without -rA or -s: this process's own, or those its workers handed over."""
    sections = {title: render() for title, render in SECTIONS.items()}
    for title, lines in _WORKER_SECTIONS.items():
        sections[title] = [*sections.get(title, []), *lines]
    for title, lines in sections.items():
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)
