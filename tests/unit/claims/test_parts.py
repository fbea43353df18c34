"""The claims driver is built from parts it is handed, and each record has one serialiser.

Scans of the source keep the shape from coming back: ``ClaimsDriver`` constructs none of its
collaborators (the builder does) and tests none of them against None (an optional part is a null
object). Property tests hold the derived spellings to the one serialiser they come from.
"""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from driver.claims import driver as claims_driver
from driver.claims.parts import NO_HOST_EDITS, NO_PINNING, NO_STATUS, NO_WARNINGS, claims_journal
from driver.inventory.nvidia_source import UserspaceSource
from driver.pinning.types import (
    ENV_CPU_MODE,
    ENV_CPUS,
    ENV_MEMS,
    ENV_REQUEST,
    CpuAssignment,
    CpuMode,
    marker_env,
)
from driver.plugin import PreparedDevice
from driver.state.entry import JournalEntry, StoredFile


def _class_node() -> ast.ClassDef:
    tree = ast.parse(inspect.getsource(claims_driver))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ClaimsDriver")


def _init_parts(cls: ast.ClassDef) -> set[str]:
    """``self._x`` attributes that ``__init__`` sets from one of its parameters."""
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    params = {a.arg for a in init.args.kwonlyargs}
    parts: set[str] = set()
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id in params
            and isinstance(node.targets[0], ast.Attribute)
        ):
            parts.add(node.targets[0].attr)
    return parts


def test_the_claims_driver_constructs_none_of_its_collaborators() -> None:
    """The journal, its evidence, the planner, the status writer: made by the builder, handed in."""
    made = {
        node.func.id
        for node in ast.walk(_class_node())
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id[:1].isupper()
    }
    collaborators = {"Journal", "Evidence", "CpuPlanner", "HostEdits", "AsyncStatusWriter", "ClaimEvents"}
    assert not made & collaborators, f"ClaimsDriver builds {sorted(made & collaborators)} itself"


def test_no_part_is_tested_against_none() -> None:
    """An optional part is a null object: no ``self._part is None`` branch anywhere in the class."""
    cls = _class_node()
    parts = _init_parts(cls)
    assert {"_planner", "_status", "_host_edits", "_warnings", "_on_fatal", "_journal"} <= parts
    checked = [
        f"line {node.lineno}: self.{node.left.attr}"
        for node in ast.walk(cls)
        if isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Attribute)
        and isinstance(node.left.value, ast.Name)
        and node.left.value.id == "self"
        and node.left.attr in parts
        and any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops)
    ]
    assert not checked, f"parts tested against None instead of a null object: {checked}"


def test_the_null_parts_do_nothing() -> None:
    """What an absent part means, said once: no pinning, no status, no host edits, no warnings."""
    assert NO_PINNING.plan("uid", [], frozenset(), memory_nodes=frozenset({0})) is None
    assert NO_HOST_EDITS.for_devices([]) is None
    NO_STATUS.report_prepared({}, [])
    NO_STATUS.clear("ns", "name", "uid")
    NO_WARNINGS.warn({}, next(iter(UserspaceSource)), ("a warning nobody is told",))


def test_the_journal_is_the_plugin_dirs(tmp_path: Path) -> None:
    journal = claims_journal(
        cdi_dir=tmp_path / "cdi", plugin_dir=tmp_path / "plugin", driver_name="d.dev", pool="n"
    )
    assert journal.path == tmp_path / "plugin" / "state" / "journal.log"
    assert not journal.read_only


_sets = st.frozensets(st.integers(min_value=0, max_value=511), max_size=12)
_text = st.text(max_size=12)
_assignments = st.builds(CpuAssignment, request=_text, mode=st.sampled_from(CpuMode), cpus=_sets, mems=_sets)


@settings(max_examples=80, deadline=None)
@given(assignment=_assignments)
def test_the_marker_env_and_the_log_line_spell_an_assignment_alike(assignment: CpuAssignment) -> None:
    fields = assignment.log_fields()
    env = marker_env(assignment, "claim-uid")
    assert (env[ENV_CPUS], env[ENV_MEMS], env[ENV_CPU_MODE], env[ENV_REQUEST]) == (
        fields["cpus"],
        fields["mems"],
        fields["mode"],
        fields["request"],
    )


_files = st.builds(StoredFile, path=_text, content=_text, mode=st.integers(min_value=0, max_value=0o7777))
_entries = st.builds(
    JournalEntry,
    namespace=_text,
    name=_text,
    uid=_text,
    devices=st.lists(
        st.builds(
            PreparedDevice,
            request_names=st.lists(_text, max_size=2).map(tuple),
            pool_name=_text,
            device_name=_text,
            cdi_device_ids=st.lists(_text, max_size=2).map(tuple),
            share_id=st.none() | _text,
        ),
        max_size=3,
    ).map(tuple),
    cdi_specs=st.lists(_files, max_size=2).map(tuple),
    metadata_files=st.lists(_files, max_size=2).map(tuple),
    reserved_pods=st.none() | st.lists(_text, max_size=2).map(tuple),
    adopted=st.booleans(),
)


@settings(max_examples=80, deadline=None)
@given(entry=_entries)
def test_an_entry_has_one_serialiser(entry: JournalEntry) -> None:
    """The journal's text is the record; its JSON object is that text parsed, and reads back."""
    text = entry.json_text()
    assert entry.to_json() == json.loads(text)
    assert json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) == text
    assert JournalEntry.from_json(json.loads(text)) == entry
