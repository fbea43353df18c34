"""The apiserver's missing features, said once per cause: a log line, a Node Event, a metric, a record.

The publisher hands every write's outcome to :meth:`MissingFeatures.observe`: the fields the
apiserver dropped (or, for a list attribute, refused), each named with the gate that guards it
(:mod:`driver.slices.features`). The first time a gate is seen missing, this says so where an
operator looks:

* a warning in the driver's log, naming the gate, the fields, what it changes and the remedy;
* a ``Warning`` Event ``ApiFieldsDropped`` on the Node (``kubectl describe node``), handed to the
  driver's :class:`~driver.kube.events.EventPoster`: the publisher's thread never waits for it;
* :meth:`dropped_counts`, which ``numadra_api_fields_dropped{feature}`` mirrors (the alert);
* the record file ``<plugin-dir>/api-features.json``, which ``numadra state`` prints.

A missing gate stays missing for the life of the process: the publisher leaves its fields out from
then on (:func:`driver.slices.features.adapt`), so nothing would tell it the gate came back, and
a gate only changes with an apiserver restart. After enabling it, restart numadra; the new process
finds out again within its first sync.

Why a file for ``numadra state``: it reads local state only, so that it answers while the
apiserver is unreachable and without credentials, and the metrics endpoint may be off. The
journal is the claims' record (another format and version), and Events expire (the apiserver's
``--event-ttl``). The plugin dir is the driver's own directory, already holding its journal and
health faults. The file is rewritten by :class:`~driver.slices.sayonce.SayOnce` (atomically, at
the first write of each process and whenever a gate is added, so it describes the current
process); it is read back through :mod:`driver.untrusted` (a regular file, capped, strict shape),
as the plugin dir is a hostPath that others on the node could write into.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from driver.errors import UntrustedValueError
from driver.kube.events import EventPoster
from driver.log import get_logger
from driver.slices.features import (
    FEATURE_NAMES,
    LIST_TYPE_ATTRIBUTES,
    NODE_ALLOCATABLE,
    UNKNOWN,
    DroppedField,
    feature,
)
from driver.slices.sayonce import SayOnce, node_warning
from driver.untrusted.files import read_file
from driver.untrusted.shape import Boolean, Choice, Field, Integer, ListOf, Record, Text
from driver.untrusted.values import loads_json

__all__ = [
    "EVENT_REASON",
    "MISSING_FEATURES_FILE",
    "FeatureRecord",
    "MissingFeature",
    "MissingFeatures",
    "cause_message",
    "load_record",
    "node_event",
]

MISSING_FEATURES_FILE = "api-features.json"
EVENT_REASON = "ApiFieldsDropped"
_RECORD_VERSION = 1
#: the record holds a few gates with a few field patterns each
_MAX_RECORD_BYTES = 64 << 10
#: bounds on what a record may hold (it is read back from a directory others can write)
_MAX_TEXT = 512
_MAX_FIELDS = 64

_log = get_logger("slices.features")


@dataclass(frozen=True, slots=True)
class MissingFeature:
    """A gate seen missing, with what showed it."""

    name: str  # a gate of the table, or "unknown"
    fields: tuple[str, ...]  # the field patterns lost, in the order first seen
    example: str  # one concrete path
    slice: str  # the slice whose write showed it first
    since: str  # when, RFC 3339 UTC
    refused: bool  # the apiserver refused the slice (422) instead of storing it without the fields

    def to_json(self) -> dict[str, Any]:
        """The form of the record file and of ``numadra state -o json``: one spelling for both."""
        return {
            "name": self.name,
            "fields": list(self.fields),
            "example": self.example,
            "slice": self.slice,
            "since": self.since,
            "refused": self.refused,
        }


@dataclass(frozen=True, slots=True)
class FeatureRecord:
    """The record file: what the driver process found missing, and when it last wrote the file."""

    checked_at: str
    pid: int
    features: tuple[MissingFeature, ...]


def cause_message(cause: MissingFeature, *, node_name: str) -> str:
    """One cause as the operator reads it (the log's message detail and the Event's message)."""
    fields = ", ".join(cause.fields)
    entry = feature(cause.name)
    if entry is None:
        return (
            f"the apiserver did not keep {fields} of ResourceSlice {cause.slice} (node {node_name}) "
            "as sent, for no feature gate numadra knows: the slice is kept as stored; compare "
            "`numadra discover -o json` with the stored slice"
        )
    what = (
        f"the apiserver refused ResourceSlice {cause.slice} (node {node_name}): it dropped {fields} "
        "and the attribute was left without a value"
        if cause.refused
        else f"the apiserver dropped {fields} from ResourceSlice {cause.slice} (node {node_name})"
    )
    if cause.refused and entry.name == NODE_ALLOCATABLE:  # the Node's admission, not a dropped field
        return (
            f"the apiserver refused ResourceSlice {cause.slice} because node {node_name} does not "
            f"declare {entry.name} (status.declaredFeatures: the kubelet declares it when its gate "
            f"is on); published without {fields}. Effect: {entry.effect}. Remedy: enable "
            f"{entry.name} on this node's kubelet too, then restart numadra on this node"
        )
    remedy = (
        f"enable {entry.name} on kube-apiserver, kube-scheduler and kube-controller-manager, then "
        "restart numadra on this node"
    )
    if entry.name == LIST_TYPE_ATTRIBUTES:
        remedy += ", or remove --numa-node-list (NUMADRA_NUMA_NODE_LIST)"
    return (
        f"{what}: feature gate {entry.name} is off, or kube-apiserver is older than {entry.since} "
        f"(in 1.37: {entry.stage}). Effect: {entry.effect}. Remedy: {remedy}"
    )


def node_event(
    cause: MissingFeature, *, node_name: str, node_uid: str, component: str, now: datetime | None = None
) -> dict[str, Any]:
    """The core/v1 Warning Event of one cause, on the Node (:func:`~driver.slices.sayonce.node_warning`)."""
    return node_warning(
        node_name=node_name,
        node_uid=node_uid,
        reason=EVENT_REASON,
        message=cause_message(cause, node_name=node_name),
        component=component,
        now=now,
    )


class MissingFeatures:
    """The gates this driver process found missing (see the module docstring). Thread-safe.

    ``events`` None: no Events; ``record_path`` None: no record file (tests, ``numadra discover``).
    """

    def __init__(
        self,
        *,
        node_name: str,
        driver_name: str,
        events: EventPoster | None = None,
        record_path: Path | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.node_name = node_name
        self.driver_name = driver_name
        self._say = SayOnce(
            node_name=node_name,
            component=driver_name,
            event_reason=EVENT_REASON,
            record_version=_RECORD_VERSION,
            record_what="missing api features",
            log=_log,
            events=events,
            record_path=record_path,
            clock=clock,
        )
        self._lock = threading.Lock()
        self._found: dict[str, MissingFeature] = {}

    def missing(self) -> frozenset[str]:
        """The gates found missing so far (never shrinks: module docstring)."""
        with self._lock:
            return frozenset(self._found)

    def causes(self) -> tuple[MissingFeature, ...]:
        """What was found, in the order found."""
        with self._lock:
            return tuple(self._found.values())

    def dropped_counts(self) -> dict[str, int]:
        """Every gate of the table (and ``unknown``) -> the number of its field patterns lost."""
        with self._lock:
            found = {name: len(cause.fields) for name, cause in self._found.items()}
        return {name: found.get(name, 0) for name in FEATURE_NAMES}

    def observe(
        self, slice_name: str, dropped: Sequence[DroppedField], *, node_uid: str = "", refused: bool = False
    ) -> list[MissingFeature]:
        """One write's outcome: ``dropped`` the fields lost (empty: kept in full); returns the new causes.

        Each new cause is logged and queued as a Node Event once; the record is rewritten when
        anything changed and at the first call. A failure to post or to write is logged, never
        raised: the publisher goes on.
        """
        new: list[MissingFeature] = []
        with self._lock:
            changed = False
            for field in dropped:
                name = field.feature if field.feature in FEATURE_NAMES else UNKNOWN
                known = self._found.get(name)
                if known is None:
                    cause = MissingFeature(
                        name, (field.pattern,), field.path, slice_name, self._say.stamp(), refused
                    )
                    self._found[name] = cause
                    new.append(cause)
                elif field.pattern not in known.fields:
                    self._found[name] = _with_field(known, field.pattern)
                else:
                    continue
                changed = True
            new = [self._found[c.name] for c in new]  # with every field of this write
            self._say.record(changed, self._record_body)
        for cause in new:
            self._announce(cause, node_uid)
        return new

    def _announce(self, cause: MissingFeature, node_uid: str) -> None:
        entry = feature(cause.name)
        message = cause_message(cause, node_name=self.node_name)
        _log.warning(
            "apiserver refused a slice: feature gate off" if cause.refused else "apiserver dropped fields",
            feature=cause.name,
            fields=list(cause.fields),
            example=cause.example,
            slice=cause.slice,
            node=self.node_name,
            effect=entry.effect if entry else "unknown",
            detail=message,
        )
        self._say.post(message, node_uid=node_uid)

    def _record_body(self) -> dict[str, object]:
        """The record's gates (under the lock)."""
        return {"features": [c.to_json() for c in self._found.values()]}


def _with_field(cause: MissingFeature, pattern: str) -> MissingFeature:
    return MissingFeature(
        cause.name, (*cause.fields, pattern), cause.example, cause.slice, cause.since, cause.refused
    )


#: a record's text: the slice, paths and times ``numadra state`` prints
_TEXT = Text(max_len=_MAX_TEXT, printable=True)
#: ``features``: each gate found missing, as :meth:`MissingFeature.to_json` writes it
_FEATURES = ListOf(
    Record(
        MissingFeature,
        {
            "name": Field(
                "name",
                Choice({n: n for n in FEATURE_NAMES}, unknown="is no feature gate numadra knows"),
                required=True,
            ),
            "fields": Field("fields", ListOf(_TEXT, max_items=_MAX_FIELDS, min_items=1), required=True),
            "example": Field("example", _TEXT, required=True),
            "slice": Field("slice", _TEXT, required=True),
            "since": Field("since", _TEXT, required=True),
            "refused": Field("refused", Boolean(), required=True),
        },
    ),
    max_items=len(FEATURE_NAMES),
)
_PID = Integer(0, 2**31 - 1)  # pid_t


def load_record(plugin_dir: Path) -> FeatureRecord:
    """The record of ``<plugin_dir>/api-features.json``, checked field by field (:data:`_FEATURES`).

    ``FileNotFoundError`` when there is none (the driver never wrote a slice there);
    :class:`~driver.errors.UntrustedFileError` / :class:`~driver.errors.UntrustedValueError` for a
    file that is not a small regular file holding a record of this version.
    """
    path = plugin_dir / MISSING_FEATURES_FILE
    where = str(path)
    doc = loads_json(read_file(path, max_bytes=_MAX_RECORD_BYTES), what=where)
    if not isinstance(doc, dict) or doc.get("version") != _RECORD_VERSION:
        raise UntrustedValueError(where, f"is not a version {_RECORD_VERSION} record")
    return FeatureRecord(
        _TEXT.check(doc.get("checkedAt"), f"{where}: checkedAt"),
        _PID.check(doc.get("pid"), f"{where}: pid"),
        _FEATURES.check(doc.get("features"), f"{where}: features"),
    )
