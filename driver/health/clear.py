"""Operator clears of sticky fatal faults: ``numadra health clear <device>`` and the running driver.

A fatal fault (:mod:`driver.health.signals`) keeps a device Unhealthy and tainted until the
device shows evidence of a reset. Some resets leave none (``nvidia-smi -r`` keeps the PCI function
and its AER counters), so an operator can say "this device was repaired" explicitly:

``numadra health clear gpu-0000-18-00-0 --note "nvidia-smi -r after Xid 79"`` writes
``<plugin-dir>/health-clear/<device>.json`` (``{"device", "requestedAt", "note"}``, mode 0600,
written to a temporary name and renamed). The running driver looks at that directory on every
health poll, consumes each file (deletes it) and clears the device's fault when all of this holds:

* the directory is a real directory owned by the driver's user and writable by nobody else, and
  the file a regular file (not a symlink) of that owner, not writable by group or others, at most
  :data:`MAX_REQUEST_BYTES` of JSON with exactly the expected fields;
* the file is named after the device it names, and that device is published and has a sticky
  fault now;
* ``requestedAt`` is not older than the fault and not in the future (:data:`FUTURE_SKEW_S` of
  clock skew allowed):
  a file left behind, or planted ahead of time, can never clear a fault that happens later.

Every clear and every refused request is logged with the device and the reason; the device then
turns Healthy at its next healthy reading (no hysteresis: the operator vouched for it).
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from driver.errors import ConfigError, UntrustedFileError
from driver.untrusted.files import open_regular, read_from
from driver.untrusted.values import MAX_WALL_CLOCK_S, bounded_number, loads_json

__all__ = [
    "CLEAR_DIR_NAME",
    "FUTURE_SKEW_S",
    "MAX_REQUEST_BYTES",
    "ClearRequest",
    "clear_dir",
    "take_requests",
    "write_clear_request",
]

CLEAR_DIR_NAME = "health-clear"
MAX_REQUEST_BYTES = 4096
MAX_NOTE_CHARS = 256
FUTURE_SKEW_S = 60.0
_DEVICE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_FIELDS = frozenset({"device", "requestedAt", "note"})

# ruff: noqa: PTH105, PTH108, PTH118, PTH208 - os functions: lstat/fstat/O_NOFOLLOW checks need them


@dataclass(frozen=True, slots=True)
class ClearRequest:
    """One validated request file."""

    device: str
    requested_at: float  # wall-clock seconds
    note: str


def clear_dir(plugin_dir: str | os.PathLike[str]) -> str:
    """``<plugin-dir>/health-clear``."""
    return os.path.join(os.fspath(plugin_dir), CLEAR_DIR_NAME)


def write_clear_request(plugin_dir: str | os.PathLike[str], device: str, note: str, now: float) -> Path:
    """Write a request for ``device`` (the CLI side); returns the file. ConfigError on a bad name."""
    if not _DEVICE_NAME.match(device):
        raise ConfigError(f"device {device!r} is not a device name (like gpu-0000-18-00-0)")
    if len(note) > MAX_NOTE_CHARS:
        raise ConfigError(f"--note is longer than {MAX_NOTE_CHARS} characters")
    directory = clear_dir(plugin_dir)
    os.makedirs(directory, mode=0o700, exist_ok=True)  # noqa: PTH103
    body = json.dumps({"device": device, "requestedAt": now, "note": note}).encode()
    temp = os.path.join(directory, f".{device}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    final = os.path.join(directory, f"{device}.json")
    os.replace(temp, final)
    return Path(final)


def _trusted_dir(directory: str, uid: int) -> str:
    """Empty when the directory may be trusted, else why not."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory (a symlink or a file)"
    if st.st_uid != uid or st.st_mode & 0o022:
        mode = stat.S_IMODE(st.st_mode)
        return f"owned by uid {st.st_uid} with mode {mode:o}: must be ours and not group/world-writable"
    return ""


def _read_one(directory: str, name: str, uid: int) -> ClearRequest:
    """Open, check and parse one request file; ValueError says what is wrong."""
    path = os.path.join(directory, name)
    try:
        fd, st = open_regular(path)
    except UntrustedFileError as exc:
        raise ValueError(exc.reason) from None
    except OSError as exc:
        raise ValueError(f"cannot open ({exc.strerror})") from None
    try:
        if st.st_uid != uid or st.st_mode & 0o022:
            raise ValueError(f"owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}")
        try:
            raw = read_from(fd, st, path, MAX_REQUEST_BYTES)
        except UntrustedFileError as exc:
            raise ValueError(exc.reason) from None
    finally:
        os.close(fd)
    doc = loads_json(raw, what="the request")
    if not isinstance(doc, dict) or set(doc) != _FIELDS:
        raise ValueError(f"must be an object with exactly {sorted(_FIELDS)}")
    device, at, note = doc["device"], doc["requestedAt"], doc["note"]
    if not isinstance(device, str) or f"{device}.json" != name:
        raise ValueError("the device it names is not the one in its file name")
    requested_at = bounded_number(at, what="requestedAt", lo=0, hi=MAX_WALL_CLOCK_S)
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        raise ValueError(f"note is not a string of at most {MAX_NOTE_CHARS} characters")
    return ClearRequest(device, requested_at, note)


def take_requests(directory: str, uid: int | None = None) -> tuple[list[ClearRequest], list[tuple[str, str]]]:
    """Consume the request files of ``directory``: (valid requests, [(file, why refused)]).

    Every ``*.json`` file is deleted once read, valid or not, so a bad one is reported once; files
    starting with "." are the CLI's in-flight temporaries and are left alone. An untrusted
    directory is refused as a whole (its files are left for the operator to look at).
    """
    uid = os.geteuid() if uid is None else uid
    why = _trusted_dir(directory, uid)
    if why == "absent":
        return [], []
    if why:
        return [], [(directory, why)]
    valid: list[ClearRequest] = []
    refused: list[tuple[str, str]] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        return [], [(directory, f"cannot list: {exc.strerror}")]
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        try:
            valid.append(_read_one(directory, name, uid))
        except ValueError as exc:
            refused.append((name, str(exc)))
        try:
            os.unlink(os.path.join(directory, name))
        except OSError as exc:
            refused.append((name, f"cannot delete after reading: {exc.strerror}"))
    return valid, refused
