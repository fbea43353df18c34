"""Every parser of a file or env others write, fed hostile documents: a value or OUR error, always.

One property per parser that takes outside input: the NRI marker env, the hook's OCI state, the
recorded faults file, a health-clear request, a journal entry, and a lost claim's CDI spec read
back by the evidence cross-check. Documents are generated JSON (with numbers of hundreds of
digits, NaN, wrong types, deep nesting) and raw bytes. "Our error" is the one each caller
documents: PinningError, JournalError, a logged skip; an OverflowError, RecursionError,
TypeError or AttributeError escaping is a crash loop waiting for its file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.errors import JournalError, PinningError
from driver.health.clear import take_requests
from driver.health.signals import SignalReader
from driver.pinning.hook import parse_oci_state
from driver.pinning.nri.handlers import marker_from_env
from driver.state import Journal, journal_path
from driver.state.evidence import Evidence
from driver.state.wal import JournalLog

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN and Infinity as Python writes them


def _shaped(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the expected keys, each holding any JSON: the near misses a parser meets."""
    return st.fixed_dictionaries(dict.fromkeys(keys, _JSON), optional={"extra": _JSON})


_DOCS = st.one_of(
    st.binary(max_size=300),
    _JSON.map(_dumps),
    st.integers(1, 3000).map(lambda n: b"[" * n),
)
_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_MARKER_KEYS = ["NUMADRA_CPUS", "NUMADRA_MEMS", "NUMADRA_CPU_MODE", "NUMADRA_CLAIM_UID", "NUMADRA_REQUEST"]


@_SETTINGS
@given(st.lists(st.tuples(st.sampled_from(_MARKER_KEYS), st.text(max_size=40)), max_size=6))
def test_marker_env(pairs: list[tuple[str, str]]) -> None:
    env = [f"{k}={v}" for k, v in pairs]
    try:
        marker = marker_from_env(env)
    except PinningError:
        return
    assert marker is None or (marker.cpus or marker.mems)


@_SETTINGS
@given(
    st.one_of(st.text(max_size=300), _JSON.map(json.dumps), _shaped(["pid", "bundle", "id"]).map(json.dumps))
)
def test_oci_state(text: str) -> None:
    try:
        state = parse_oci_state(text)
    except PinningError:
        return
    assert state.pid > 0


@_SETTINGS
@given(
    st.one_of(
        _DOCS,
        _JSON.map(lambda f: _dumps({"version": 1, "faults": f})),
        st.dictionaries(
            st.sampled_from(["0000:3b:00.0", "0000:1a:00.0", "x"]),
            _shaped(["reason", "tripTotal", "since", "gone"]),
            max_size=3,
        ).map(lambda f: _dumps({"version": 1, "faults": f})),
    )
)
def test_recorded_faults(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        faults = Path(d) / "health-faults.json"
        faults.write_bytes(data)
        reader = SignalReader(d, use_nvml=False, faults_path=str(faults))  # never raises
        for bus_id in ("0000:3b:00.0", "0000:1a:00.0"):
            fault = reader.fatal_fault(bus_id)
            assert fault is None or 0 <= fault.since <= 1e11


@_SETTINGS
@given(st.one_of(_DOCS, _shaped(["device", "requestedAt", "note"]).map(_dumps)))
def test_clear_request(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d) / "health-clear"
        directory.mkdir(mode=0o700)
        (directory / "gpu-0000-3b-00-0.json").write_bytes(data)
        os.chmod(directory / "gpu-0000-3b-00-0.json", 0o600)  # noqa: PTH101
        valid, refused = take_requests(str(directory))
        assert len(valid) + len(refused) == 1
        assert all(0 <= r.requested_at <= 1e11 for r in valid)


_ENTRY_KEYS = ["namespace", "name", "uid", "devices", "cdiSpecs", "metadataFiles", "pinning"]


@_SETTINGS
@given(st.one_of(_JSON, _shaped(_ENTRY_KEYS)))
def test_journal_entry(entry: Any) -> None:
    """A checksummed record holding any entry: it loads, or the journal is corrupt, by name."""
    with tempfile.TemporaryDirectory() as d:
        path = journal_path(Path(d))
        text = json.dumps(entry, sort_keys=True, separators=(",", ":"))
        try:
            JournalLog(path).append({"u1": text}, (), {"u1": text})
        except ValueError:
            return  # not an object: the writer itself never makes such a record
        try:
            Journal(path).load()
        except JournalError as exc:
            assert str(path) in str(exc)


_UID = "6a1d2c3b-0d1b-4c3a-9e8f-0000000000aa"
_DEVICE = _shaped(["name", "containerEdits"])


@_SETTINGS
@given(
    st.one_of(
        _DOCS,
        st.fixed_dictionaries(
            {"kind": st.just("numadra.dev/claim"), "devices": st.lists(_DEVICE, max_size=3)}
        ).map(_dumps),
        st.lists(st.text(max_size=30), max_size=5).map(
            lambda env: _dumps(
                {
                    "kind": "numadra.dev/claim",
                    "devices": [{"name": f"{_UID}-cpu-numa0", "containerEdits": {"env": env}}],
                }
            )
        ),
    )
)
def test_lost_claim_spec(data: bytes) -> None:
    """The cross-check reads a lost claim's spec: it is rebuilt, or the start is refused by name."""
    with tempfile.TemporaryDirectory() as d:
        cdi, plugin = Path(d) / "cdi", Path(d) / "plugin"
        cdi.mkdir()
        spec = cdi / f"numadra.dev_claim_{_UID}.json"
        spec.write_bytes(data)
        evidence = Evidence(cdi_dir=cdi, plugin_dir=plugin, driver_name="numadra.dev", pool="node")
        try:
            found = evidence.unjournaled(())
        except JournalError as exc:
            assert str(spec) in str(exc)
            return
        assert [f.uid for f in found] == [_UID]
