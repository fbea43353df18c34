"""A CPU assignment's two spellings: the journal's record and the log's fields."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.pinning.types import MAX_CPUS, MAX_NODES, CpuAssignment, CpuMode

_assignments = st.builds(
    CpuAssignment,
    st.text(max_size=12),
    st.sampled_from(list(CpuMode)),
    st.frozensets(st.integers(0, MAX_CPUS - 1), max_size=8),
    st.frozensets(st.integers(0, MAX_NODES - 1), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(assignment=_assignments)
def test_json_text_is_the_sorted_compact_dump_of_to_json(assignment: CpuAssignment) -> None:
    """Any request text (quotes, non-ASCII, control characters) is spelled as json.dumps would."""
    expected = json.dumps(assignment.to_json(), sort_keys=True, separators=(",", ":"))
    assert assignment.json_text() == expected


@settings(max_examples=100, deadline=None)
@given(assignment=_assignments)
def test_the_record_round_trips(assignment: CpuAssignment) -> None:
    assert CpuAssignment.from_json(json.loads(assignment.json_text())) == assignment


def test_the_record_lists_sets_sorted_and_the_log_in_kernel_list_format() -> None:
    a = CpuAssignment("main", CpuMode.SHARED, frozenset({9, 2, 3, 4}), frozenset({1, 0}))
    assert a.to_json() == {"request": "main", "mode": "shared", "cpus": [2, 3, 4, 9], "mems": [0, 1]}
    assert a.log_fields() == {"request": "main", "mode": "shared", "cpus": "2-4,9", "mems": "0-1"}


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        pytest.param({"request": 7}, TypeError, "expected a string, got int", id="request-not-text"),
        pytest.param({"mode": "greedy"}, ValueError, "greedy", id="unknown-mode"),
        pytest.param({"cpus": [MAX_CPUS]}, ValueError, "cpu: must be", id="cpu-beyond-the-kernel"),
        pytest.param({"cpus": ["2"]}, ValueError, "cpu: must be an integer", id="cpu-as-text"),
        pytest.param({"mems": [-1]}, ValueError, "memory node: must be", id="negative-node"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_field(
    change: dict[str, Any], error: type[Exception], match: str
) -> None:
    record: dict[str, Any] = {"request": "main", "mode": "exclusive", "cpus": [2], "mems": [0]}
    with pytest.raises(error, match=match):
        CpuAssignment.from_json(record | change)


def test_a_record_without_a_field_is_refused() -> None:
    with pytest.raises(KeyError, match="mems"):
        CpuAssignment.from_json({"request": "main", "mode": "exclusive", "cpus": [2]})
