"""Devices withheld because another party owns them, said once per cause.

A cause is one owner (a DRA driver's name, or a device plugin's resource name) holding one or
more of our devices. When a cause appears, :class:`WithheldReport` says so where an operator looks:

* a warning in the driver's log, naming the owner and the devices;
* a ``Warning`` Event ``DevicesWithheld`` on the Node, handed to the driver's
  :class:`~driver.kube.events.EventPoster` (the caller's thread never waits for it);
* :meth:`counts`, which ``numadra_devices_withheld{reason,owner}`` mirrors;
* the record file ``<plugin-dir>/withheld.json``, which ``numadra state`` prints (it reads local
  state only, so that it answers without the apiserver; same reasons as the missing-features
  record).

The Event, the record's rewrites and the clock are :class:`~driver.slices.sayonce.SayOnce`'s, as
for the missing features; this module says what a cause is and how it reads.

A cause that goes (the other driver's slice deleted, the plugin's capacity back to 0) is logged
once at info level ("given back") and drops out of the metric and the record; if it comes back
it is said again, once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from driver.errors import UntrustedValueError
from driver.kube.events import EventPoster
from driver.log import get_logger
from driver.slices.ownership import Owner, Ownership, Reason
from driver.slices.sayonce import SayOnce
from driver.untrusted.files import read_file
from driver.untrusted.shape import Choice, Field, ListOf, Record, Text
from driver.untrusted.values import loads_json

__all__ = ["EVENT_REASON", "WITHHELD_FILE", "WithheldDevice", "WithheldReport", "load_withheld"]

EVENT_REASON = "DevicesWithheld"
WITHHELD_FILE = "withheld.json"
_RECORD_VERSION = 1
_MAX_RECORD_BYTES = 1 << 20
_MAX_DEVICES = 4096  # a record never holds more devices than a node has
_MAX_TEXT = 253
_MAX_NAMED = 8  # devices named in one log line or Event, the rest counted

_log = get_logger("slices.withheld")


@dataclass(frozen=True, slots=True)
class WithheldDevice:
    """One device of ours left out of the slices, and who owns it."""

    device: str
    reason: Reason
    owner: str


def _listing(devices: list[str]) -> str:
    named = ", ".join(devices[:_MAX_NAMED])
    more = len(devices) - _MAX_NAMED
    return f"{named} and {more} more" if more > 0 else named


def cause_message(owner: Owner, devices: list[str], *, node_name: str) -> str:
    """One cause as the operator reads it (the log's detail and the Event's message)."""
    return (
        f"{len(devices)} device(s) of node {node_name} not published by numadra: {owner.describe()} "
        f"owns them ({_listing(devices)}). They come back by themselves once it no longer does; "
        "to stop looking, leave the kind out with --devices (Helm: devices)"
    )


class WithheldReport:
    """Hears every change of :class:`~driver.slices.ownership.Ownership` (module docstring). Thread-safe.

    ``events`` None: no Events; ``record_path`` None: no record file.
    """

    def __init__(
        self,
        *,
        node_name: str,
        component: str,
        events: EventPoster | None = None,
        record_path: Path | None = None,
        node_uid: Callable[[], str] = lambda: "",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.node_name = node_name
        self._say = SayOnce(
            node_name=node_name,
            component=component,
            event_reason=EVENT_REASON,
            record_version=_RECORD_VERSION,
            record_what="withheld devices",
            log=_log,
            events=events,
            record_path=record_path,
            clock=clock,
        )
        self._node_uid = node_uid
        self._lock = threading.Lock()
        self._current: dict[str, Owner] = {}

    def counts(self) -> dict[Owner, int]:
        """Each owner holding devices now -> how many."""
        with self._lock:
            current = dict(self._current)
        counts: dict[Owner, int] = {}
        for owner in current.values():
            counts[owner] = counts.get(owner, 0) + 1
        return counts

    def metric_counts(self) -> dict[tuple[str, str], int]:
        """:meth:`counts` keyed ``(reason, owner)``, as ``numadra_devices_withheld`` labels them."""
        return {(o.reason.value, o.owner): n for o, n in self.counts().items()}

    def devices(self) -> list[WithheldDevice]:
        """The devices withheld now, by name."""
        with self._lock:
            return [WithheldDevice(d, o.reason, o.owner) for d, o in sorted(self._current.items())]

    def update(self, ownership: Ownership) -> None:
        """A new ownership: say each new cause once, each gone cause once; rewrite the record."""
        new = dict(ownership.withheld)
        with self._lock:
            before = self._current
            self._current = new
            old_owners, new_owners = set(before.values()), set(new.values())
            self._say.record(new != before, self._record_body)
        by_owner: dict[Owner, list[str]] = {}
        for device, owner in sorted(new.items()):
            by_owner.setdefault(owner, []).append(device)
        for owner in sorted(new_owners - old_owners):
            self._announce(owner, by_owner[owner])
        for owner in sorted(old_owners - new_owners):
            _log.info("devices given back", reason=owner.reason.value, owner=owner.owner, node=self.node_name)

    def _announce(self, owner: Owner, devices: list[str]) -> None:
        message = cause_message(owner, devices, node_name=self.node_name)
        _log.warning(
            "devices withheld: another party owns them",
            reason=owner.reason.value,
            owner=owner.owner,
            devices=devices[:_MAX_NAMED],
            count=len(devices),
            node=self.node_name,
            detail=message,
        )
        self._say.post(message, node_uid=self._node_uid())

    def _record_body(self) -> dict[str, object]:
        """The record's devices (under the lock)."""
        return {
            "devices": [
                {"device": d, "reason": o.reason.value, "owner": o.owner}
                for d, o in sorted(self._current.items())
            ]
        }


#: a record's text: the device and owner names ``numadra state`` prints
_NAME = Text(max_len=_MAX_TEXT, min_len=1, printable=True)
#: ``devices``: each one withheld, as the record file writes it (:meth:`WithheldReport._record_body`)
_DEVICES = ListOf(
    Record(
        WithheldDevice,
        {
            "device": Field("device", _NAME, required=True),
            "reason": Field("reason", Choice({r.value: r for r in Reason}), required=True),
            "owner": Field("owner", _NAME, required=True),
        },
    ),
    max_items=_MAX_DEVICES,
)


def load_withheld(plugin_dir: Path) -> list[WithheldDevice]:
    """The devices of ``<plugin_dir>/withheld.json``, checked field by field (:data:`_DEVICES`).

    ``FileNotFoundError`` when there is none (nothing was ever withheld, or an older driver);
    :class:`~driver.errors.UntrustedFileError` / :class:`~driver.errors.UntrustedValueError` for a
    file that is not a small regular file holding a record of this version.
    """
    path = plugin_dir / WITHHELD_FILE
    where = str(path)
    doc = loads_json(read_file(path, max_bytes=_MAX_RECORD_BYTES), what=where)
    if not isinstance(doc, Mapping) or doc.get("version") != _RECORD_VERSION:
        raise UntrustedValueError(where, f"is not a version {_RECORD_VERSION} record")
    return list(_DEVICES.check(doc.get("devices"), f"{where}: devices"))
