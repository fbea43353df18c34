"""The JSON log lines: what ``numadra run`` writes to stderr is ``json.dumps`` of the event."""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.log import configure_logging, get_logger


class _Named:
    def __structlog__(self) -> str:
        return "named"


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


@contextlib.contextmanager
def json_logging() -> Iterator[None]:
    """JSON lines to the current ``sys.stderr`` (inside a test: the one ``capsys`` captures)."""
    old = structlog.get_config()
    configure_logging("json", logging.INFO)
    try:
        yield
    finally:
        structlog.configure(**old)


def _fallback(obj: Any) -> Any:
    to_log = getattr(obj, "__structlog__", None)
    return to_log() if callable(to_log) else repr(obj)


def test_a_line_is_json_dumps_of_the_event(capsys: pytest.CaptureFixture[str]) -> None:
    """Nested values, non-ASCII text, floats, and objects JSON cannot hold (their
    ``__structlog__`` or ``repr``) come out as ``json.dumps`` with structlog's fallback writes them."""
    values: dict[str, Any] = {
        "devices": ["gpu-0", "nic-\u00e9"],
        "pinning": [{"request": "cpu", "cpus": "0-3", "mems": "0"}],
        "ratio": 0.5,
        "none": None,
        "flag": True,
        "named": _Named(),
        "opaque": _Opaque(),
        "text": 'a "quoted"\nline',
    }
    with json_logging():
        get_logger("test").info("happened", **values)
    line = capsys.readouterr().err
    assert line.endswith("\n") and line.count("\n") == 1
    event = json.loads(line)
    expected = {
        "component": "test",
        **values,
        "event": "happened",
        "level": "info",
        "timestamp": event["timestamp"],
    }
    assert line == json.dumps(expected, default=_fallback) + "\n"
    assert event["named"] == "named" and event["opaque"] == "<opaque>"


def test_lines_from_many_threads_stay_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """The shared encoder keeps no state between lines: threads logging at once each get their
    own complete line."""

    def work(n: int) -> None:
        for i in range(200):
            get_logger("test").info("line", thread=n, i=i, items=[n, i, {"n": n}])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    with json_logging():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 800
    for text in lines:
        event = json.loads(text)
        assert event["items"] == [event["thread"], event["i"], {"n": event["thread"]}]


_INSTANTS = [
    0,
    999,  # less than a microsecond: no fraction
    1_000,
    1_764_787_049_000_000_000,  # a whole second: no fraction
    1_764_787_049_000_001_999,
    1_764_787_049_999_999_999,  # the last microsecond of a second
    1_764_787_050_000_000_000,  # and the next second
    1_764_787_049_123_456_789,  # back to an earlier second
    4_102_444_799_999_999_000,
]


@pytest.mark.parametrize("ns", _INSTANTS)
def test_the_timestamp_is_datetime_now_in_iso_utc(
    ns: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``timestamp`` of a line is ``datetime.now(timezone.utc).isoformat()`` with ``Z`` for
    ``+00:00`` (structlog's TimeStamper), for the same clock reading: microseconds rounded down,
    left out when zero, and right across the lines of one second and a change of second."""
    expected = []
    with json_logging():
        for instant in (ns, ns + 1_000, ns - ns % 1_000_000_000, ns + 1_000_000_000):
            monkeypatch.setattr(time, "time_ns", lambda instant=instant: instant)
            get_logger("test").info("tick")
            secs, micros = divmod(instant // 1000, 1_000_000)
            when = datetime.datetime.fromtimestamp(secs, tz=datetime.UTC).replace(microsecond=micros)
            expected.append(when.isoformat().replace("+00:00", "Z"))
    stamps = [json.loads(line)["timestamp"] for line in capsys.readouterr().err.splitlines()]
    assert stamps == expected


def test_the_timestamp_is_the_time_of_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    """On the real clock, a line's timestamp lies between ``datetime.now`` read before and after it."""
    with json_logging():
        before = datetime.datetime.now(tz=datetime.UTC)
        get_logger("test").info("now")
        after = datetime.datetime.now(tz=datetime.UTC)
    stamp = json.loads(capsys.readouterr().err)["timestamp"]
    assert stamp.endswith("Z")
    assert before <= datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")) <= after


#: the clock of the chain comparison, and its stamp (what the timestamp tests above hold the line to)
_NOW_NS = 1_764_787_049_123_456_789
_NOW_STAMP = "2025-12-03T18:37:29.123456Z"


def _stamp(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    event_dict["timestamp"] = _NOW_STAMP
    return event_dict


def _reference_chain() -> list[Any]:
    """The JSON processor chain as structlog's own processors build it: the text to match."""
    return [
        structlog.processors.add_log_level,
        _stamp,
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer(default=_fallback),
    ]


def _emit(method: str, event: str, kw: dict[str, Any]) -> None:
    """One line through the configured logger, always from this line (the stack of ``stack_info``)."""
    getattr(get_logger("test").bind(bound="yes"), method)(event, **kw)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["debug", "info", "warning", "warn", "error", "exception", "critical"]),
    event=st.text(max_size=10),
    values=st.dictionaries(
        st.sampled_from(["claim_uid", "devices", "level", "timestamp", "error", "x", "stack", "exception"]),
        _json_values | st.builds(_Named) | st.builds(_Opaque),
        max_size=5,
    ),
    exc_info=st.sampled_from([None, True, False, "instance", "tuple"]),
    stack_info=st.sampled_from([None, True, False]),
)
def test_a_json_line_is_the_text_of_structlogs_own_chain(
    method: str,
    event: str,
    values: dict[str, Any],
    exc_info: object,
    stack_info: bool | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one JSON processor writes, key for key and byte for byte, what structlog's chain of
    add_log_level, the timestamp, StackInfoRenderer, format_exc_info and JSONRenderer writes: keys
    the line already has (``level``, ``timestamp``) keep their place, a raised exception and a
    stack come out as those renderers put them, and ``exc_info``/``stack_info`` false drop out."""
    monkeypatch.setattr(time, "time_ns", lambda: _NOW_NS)
    kw = dict(values)
    try:
        raise ValueError("boom")
    except ValueError as exc:
        if exc_info == "instance":
            kw["exc_info"] = exc
        elif exc_info == "tuple":
            kw["exc_info"] = (ValueError, exc, exc.__traceback__)
        elif exc_info is not None:
            kw["exc_info"] = exc_info
        if stack_info is not None:
            kw["stack_info"] = stack_info
        lines = []
        old = structlog.get_config()
        try:
            for chain in ("ours", "structlog's"):
                configure_logging("json", logging.DEBUG)
                if chain != "ours":
                    structlog.configure(processors=_reference_chain())
                _emit(method, event, dict(kw))
                lines.append(capsys.readouterr().err)
        finally:
            structlog.configure(**old)
    assert lines[0].count("\n") == 1
    assert lines[0] == lines[1]
