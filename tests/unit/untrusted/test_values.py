"""Every parser of untrusted text returns a value or OUR error, with bounded work, on any input.

Properties over hostile input (hypothesis): the kernel cpulist parser (env markers, CDI specs read
back, sysfs), JSON documents and the bounded numbers in them. Work is bounded through the size of
the result and the memory a parse takes (tracemalloc), never through a clock.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.errors import PinningError, UntrustedValueError
from driver.inventory.cpulist import MAX_CPUS, MAX_NODES, format_cpulist, parse_cpulist
from driver.pinning.nri.handlers import marker_from_env
from driver.untrusted.values import bounded_int, bounded_number, loads_json

#: text made of the cpulist alphabet and a little more: the shapes a parser meets
_CPULIST_TEXT = st.text(alphabet="0123456789-,, \n\t9x٣", max_size=200) | st.text(max_size=60)
#: numbers as a JSON document can hold them
_NUMBERS = (
    st.integers()
    | st.integers(min_value=10**300, max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.none()
    | st.text(max_size=5)
)


def _peak_bytes(call: Callable[[], object]) -> int:
    """The most memory ``call`` held at once (its exception swallowed)."""
    tracemalloc.start()
    try:
        call()
    except Exception:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@settings(max_examples=400, deadline=None)
@given(_CPULIST_TEXT, st.sampled_from([MAX_CPUS, MAX_NODES, 16]))
def test_parse_cpulist_returns_ids_below_the_limit_or_our_error(text: str, limit: int) -> None:
    try:
        ids = parse_cpulist(text, limit=limit, what="NUMADRA_CPUS")
    except UntrustedValueError as exc:
        assert exc.what == "NUMADRA_CPUS"
        return
    assert len(ids) <= limit and all(0 <= i < limit for i in ids)


@settings(max_examples=200, deadline=None)
@given(st.frozensets(st.integers(min_value=0, max_value=MAX_CPUS - 1), max_size=300))
def test_parse_cpulist_reads_what_format_cpulist_writes(ids: frozenset[int]) -> None:
    assert parse_cpulist(format_cpulist(ids)) == ids
    assert parse_cpulist(",".join(map(str, sorted(ids)))) == ids  # every id on its own


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**12), st.integers(0, 10**12)), min_size=1, max_size=50))
def test_no_range_is_expanded_past_the_limit(ranges: list[tuple[int, int]]) -> None:
    """The work is bounded by the limit whatever the ranges say: the result, or a refusal."""
    text = ",".join(f"{lo}-{hi}" for lo, hi in ranges)
    try:
        ids = parse_cpulist(text)
    except UntrustedValueError:
        return
    assert len(ids) <= MAX_CPUS


@pytest.mark.parametrize(
    "text",
    [
        "0-9999999",  # the case: ten million ids
        "0-8191," * 5000,  # overlapping ranges, each within the limit
        "0-" + "9" * 5000,  # a number past Python's int conversion limit
        "1" * 100_000,  # longer than any list of real ids
    ],
    ids=["ten-million", "overlapping", "huge-number", "long-text"],
)
def test_a_hostile_marker_is_refused_with_little_memory(text: str) -> None:
    """Case 1 of the issue: a pod without a claim set ``NUMADRA_CPUS=0-9999999``; the NRI plugin
    expanded it before any check (1.1 GiB, the DaemonSet limit is 512 MiB). Now the marker is
    refused before any range grows, naming the variable."""
    with pytest.raises(PinningError, match="NUMADRA_CPUS"):
        marker_from_env([f"NUMADRA_CPUS={text}", "NUMADRA_MEMS=0"])
    assert _peak_bytes(lambda: marker_from_env([f"NUMADRA_CPUS={text}"])) < 4 << 20


def test_memory_nodes_are_bounded_by_the_node_limit() -> None:
    with pytest.raises(PinningError, match="NUMADRA_MEMS"):
        marker_from_env(["NUMADRA_CPUS=0", f"NUMADRA_MEMS=0-{MAX_NODES}"])
    marker = marker_from_env(["NUMADRA_CPUS=0", f"NUMADRA_MEMS=0-{MAX_NODES - 1}"])
    assert marker is not None and len(marker.mems) == MAX_NODES


@settings(max_examples=300, deadline=None)
@given(_NUMBERS)
def test_bounded_number_returns_a_finite_float_in_bounds_or_our_error(value: Any) -> None:
    try:
        got = bounded_number(value, what="since", lo=0, hi=1e11)
    except UntrustedValueError as exc:
        assert exc.what == "since"
        return
    assert math.isfinite(got) and 0 <= got <= 1e11


@settings(max_examples=300, deadline=None)
@given(_NUMBERS)
def test_bounded_int_returns_an_int_in_bounds_or_our_error(value: Any) -> None:
    try:
        got = bounded_int(value, what="tripTotal", lo=0, hi=(1 << 64) - 1)
    except UntrustedValueError:
        return
    assert type(got) is int and 0 <= got < 1 << 64


def test_a_400_digit_time_is_our_error_not_an_overflow() -> None:
    """Case 3's number: ``math.isfinite(10**400)`` raised OverflowError, which nobody caught."""
    with pytest.raises(UntrustedValueError, match="about 401 digits"):
        bounded_number(10**400, what="requestedAt", lo=0, hi=1e11)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=200)
    | st.text(alphabet='[]{}":,0123456789.eE-+ntrufalsNI', max_size=200)
    | _JSONISH.map(json.dumps)
)
def test_loads_json_returns_a_document_or_our_error(data: bytes | str) -> None:
    try:
        loads_json(data, what="health-faults.json")
    except UntrustedValueError as exc:
        assert exc.what == "health-faults.json"


@pytest.mark.parametrize(
    "data",
    ["[" * 100_000, '{"a":' * 100_000, "1" * 5000, b"\xff\xfe", "NaN]"],
    ids=["deep-list", "deep-object", "digit-limit", "not-utf8", "garbage"],
)
def test_what_json_raised_outside_valueerror_is_ours(data: str | bytes) -> None:
    """Deep nesting raised RecursionError, which ``except ValueError`` let through."""
    with pytest.raises(UntrustedValueError):
        loads_json(data, what="f")
