"""Version 2 of the claim journal's storage: an append-only, checksummed log (``journal.log``).

Rewriting one JSON file holding every prepared claim on every call would make a call cost
O(claims on the node). Here a call appends one line holding only what it changed, so it costs
O(claims in the call) plus one ``fdatasync``. File shape::

    {"kind":"NumadraJournal","version":2}
    <sha256 hex of payload> {"ops":[{"put":"<uid>","entry":{...}},{"remove":"<uid>"}]}
    ...

One line is one call, written with one ``write()`` to an ``O_APPEND`` descriptor: a crash (or a
reader racing the writer) can only leave the *last* line torn, and a torn line drops that whole
call, which was never acknowledged. Rules on read: only an incomplete last line (no newline yet) is
a torn tail: ignored (the next :meth:`JournalLog.append` cuts it away). A crash cannot write the
newline of a record without the bytes before it (one ``write()``; a lost page reads as zeros, which
are no newline), so a *complete* line whose checksum does not match is damage, wherever it is: it
may be an acknowledged call, and dropping it would forget a prepared claim. That, a header of
another kind or version, or a record whose checksum matches but whose ops are malformed is
corruption: :class:`JournalError` naming the file and line, with the documented recovery.
Within a record puts come before removes; a claim is never both.

Every read reports why it starts over (:attr:`Replay.reason`): the file is new to this object, or
it was deleted, replaced or cut shorter since the last read. The caller cross-checks the state
against the files numadra wrote when it does (:mod:`driver.state.evidence`): a journal that
vanished or was emptied while the driver runs is never silently taken as "nothing prepared". The
log and its directory are opened without following symbolic links (``O_NOFOLLOW``): a link planted
as ``journal.log`` is an error, nothing is read or written through it. The log is opened for
reading by :func:`driver.untrusted.files.open_regular`, so a FIFO, socket or directory in its
place is an error too (never waited on), and so is a file over :data:`MAX_LOG_BYTES`.

When the log outgrows ``max(compact_min, 4 x live state)`` the writer replaces it (temp file, fsync,
rename, fsync dir) by the header plus one record of the live entries. Readers notice by the changed
inode and read the new file from its start (``Replay.reset``).

Writers must hold the cross-process lock and :meth:`JournalLog.read` before they append; readers
need no lock. The object itself is not thread safe.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from cdi.io import atomic_write_bytes, ensure_dir, fsync_dir, write_all
from driver.errors import JournalError, UntrustedFileError
from driver.log import get_logger
from driver.untrusted.files import open_regular

__all__ = [
    "LOG_FILE",
    "LOG_VERSION",
    "MAX_LOG_BYTES",
    "NOTHING_NEW",
    "RESET_DELETED",
    "RESET_EMPTY",
    "RESET_MISSING",
    "RESET_REPLACED",
    "RESET_START",
    "RESET_TRUNCATED",
    "JournalLog",
    "Op",
    "Put",
    "Remove",
    "Replay",
    "journal_recovery_error",
]

LOG_FILE = "journal.log"
LOG_VERSION = 2
#: a larger log is refused as damage: it is read into memory, and compaction keeps a real one at
#: most four times its live entries (or ``compact_min``)
MAX_LOG_BYTES = 64 << 20
_KIND = "NumadraJournal"
_HEADER = f'{{"kind":"{_KIND}","version":{LOG_VERSION}}}\n'.encode()
_OPS_OPEN = '{"ops":['
_DECODER = json.JSONDecoder()
#: the JSON text of a string, as ``json.dumps`` writes it (the C encoder json.dumps itself calls)
_quote = encode_basestring_ascii
_log = get_logger("state.wal")


def journal_recovery_error(path: Path, problem: str) -> JournalError:
    """The one-line error for an unusable journal file: what is wrong, then the documented recovery."""
    return JournalError(
        f"journal {path} {problem}; recovery: stop numadra, move {path} aside "
        "(mv it to a backup name) and start again: numadra rebuilds the entries of prepared "
        "claims from their CDI specs and metadata files, and the kubelet re-prepares the claims "
        "of running pods (docs/troubleshooting.md)"
    )


@dataclass(frozen=True, slots=True)
class Put:
    """Add or replace a claim's entry; ``text`` is the canonical JSON it was appended as."""

    uid: str
    entry: dict[str, Any]
    text: str


@dataclass(frozen=True, slots=True)
class Remove:
    """Drop a claim's entry (a no-op when there is none)."""

    uid: str


Op = Put | Remove


#: why a read starts over (:attr:`Replay.reason`)
RESET_START = "start"  # first read of an existing, non-empty file by this object
RESET_MISSING = "missing"  # no file (never read one, or it is still gone)
RESET_EMPTY = "empty"  # a file of zero bytes (never written by numadra: created whole)
RESET_DELETED = "deleted"  # the file this object read is gone
RESET_REPLACED = "replaced"  # another file at the path (compaction by another process, or by hand)
RESET_TRUNCATED = "truncated"  # the same file, shorter than what this object read


@dataclass(frozen=True, slots=True)
class Replay:
    """What changed since the last read or append: apply ``ops`` in order, after clearing if ``reset``.

    ``reason`` says why a reset happened (one of the ``RESET_*`` values; "" without reset).
    """

    reset: bool
    ops: list[Op]
    reason: str = field(default="", compare=False)


#: the answer of a read that found nothing new (every call's first read, mostly): one object, made
#: once; its ``ops`` stays empty (no caller changes a replay's list)
NOTHING_NEW = Replay(reset=False, ops=[])


def _record(puts: Mapping[str, str], removes: Collection[str]) -> bytes:
    """One line: checksum, space, payload. Entry texts go in as they are (no re-encoding)."""
    parts = [f'{{"put":{_quote(uid)},"entry":{text}}}' for uid, text in puts.items()] if puts else []
    if removes:
        parts += [f'{{"remove":{_quote(uid)}}}' for uid in removes]
    payload = f"{_OPS_OPEN}{','.join(parts)}]}}".encode()
    return b"%s %s\n" % (hashlib.sha256(payload).hexdigest().encode(), payload)


def _decode_ops(payload: str) -> list[Op]:
    """Parse a payload written by :func:`_record`, keeping each entry's exact text; ValueError if not."""
    if not payload.startswith(_OPS_OPEN) or not payload.endswith("]}"):
        raise ValueError('not {"ops":[...]}')
    ops: list[Op] = []
    pos, end = len(_OPS_OPEN), len(payload) - 2
    while pos < end:
        kind = "put" if payload.startswith('{"put":', pos) else "remove"
        if not payload.startswith(f'{{"{kind}":', pos):
            raise ValueError(f"unknown op at {pos}")
        uid, pos = _DECODER.raw_decode(payload, pos + len(kind) + 4)
        if not isinstance(uid, str):
            raise ValueError(f"uid {uid!r} is not a string")
        if kind == "remove":
            ops.append(Remove(uid))
        elif payload.startswith(',"entry":', pos):
            start = pos + len(',"entry":')
            entry, pos = _DECODER.raw_decode(payload, start)
            if not isinstance(entry, dict):
                raise ValueError(f"entry of {uid!r} is not an object")
            ops.append(Put(uid, entry, payload[start:pos]))
        else:
            raise ValueError(f"put of {uid!r} without entry")
        if not payload.startswith("}", pos):
            raise ValueError(f"op not closed at {pos}")
        pos += 1
        if pos < end:
            if not payload.startswith(",", pos) or pos + 1 == end:
                raise ValueError(f"no op after {pos}")
            pos += 1
    return ops


class JournalLog:
    """The journal log file of one state directory, read incrementally.

    Holds a descriptor of the file it read, so a replaced file (compaction by another process,
    recovery by hand) is told apart from the same file grown, even when an inode number is reused.
    """

    def __init__(self, path: Path, *, compact_min: int = 1 << 20) -> None:
        self.path = path
        self._where = os.fspath(path)  # os.lstat of a Path pays for its conversion on every call
        self.compact_min = compact_min
        self._fd: int | None = None  # read descriptor of the file our offsets are about
        self._wfd: int | None = None  # O_APPEND descriptor of the same file, opened on first append
        self._ident = (0, 0)
        self._valid = 0  # end of the last good record: everything before it is final
        self._seen = 0  # file size at our last read/append; > _valid when the tail is torn
        self._lines = 0  # complete lines before _valid (error messages name the line)
        self._sizes: dict[str, int] = {}  # uid -> bytes of its op in a compacted log
        self._live_bytes = 0  # sum of _sizes: kept per op so no call costs O(claims) to decide

    def _recovery(self, problem: str) -> JournalError:
        return journal_recovery_error(self.path, problem)

    def _stale(self, what: str) -> JournalError:
        """A writer that did not read the file it is about to change (no lock, or no read first)."""
        return JournalError(
            f"journal {self.path} {what} since this process last read it: writers must hold "
            "the lock and read before they append"
        )

    def close(self) -> None:
        """Close the descriptors; the next read starts from the beginning of the file."""
        for fd in (self._fd, self._wfd):
            if fd is not None:
                os.close(fd)
        self._fd = self._wfd = None
        self._valid = self._seen = self._live_bytes = self._lines = 0
        self._sizes = {}

    # -- reading ----------------------------------------------------------------------------------

    def _lstat(self) -> os.stat_result | None:
        """The path's own status (None: missing); a symbolic link is an error, never followed."""
        try:
            st = os.lstat(self._where)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._recovery(f"cannot be read ({exc.strerror})") from exc
        if stat.S_ISLNK(st.st_mode):
            raise JournalError(
                f"journal {self.path} is a symbolic link; refusing to follow it (numadra never "
                "makes one: it was planted or copied in). Remove the link; if it pointed at the "
                "real journal, move that file to this path"
            )
        return st

    def read(self) -> Replay:
        """The calls appended since our last read/append (by anyone), or the whole file on reset.

        Raises :class:`JournalError` (with the recovery) on corruption or an unknown version, and
        on a symbolic link at the journal's path.
        """
        st = self._lstat()
        had = self._fd is not None
        if st is None:
            self.close()
            return Replay(reset=True, ops=[], reason=RESET_DELETED if had else RESET_MISSING)
        same = had and (st.st_dev, st.st_ino) == self._ident
        if same and st.st_size >= self._valid:
            if st.st_size == self._seen == self._valid:
                return NOTHING_NEW
            return Replay(reset=False, ops=self._scan(st.st_size))
        reason = (RESET_TRUNCATED if same else RESET_REPLACED) if had else RESET_START
        self.close()
        try:
            # the file we opened, whatever the path points to by now (no link, FIFO or directory)
            self._fd, st = open_regular(self.path)
        except FileNotFoundError:
            self.close()
            return Replay(reset=True, ops=[], reason=RESET_DELETED if had else RESET_MISSING)
        except UntrustedFileError as exc:
            if exc.errno == errno.ELOOP:
                self._lstat()  # raises the symbolic link error
            raise self._recovery(exc.reason) from exc
        except OSError as exc:
            raise self._recovery(f"cannot be read ({exc.strerror})") from exc
        self._ident = (st.st_dev, st.st_ino)
        if st.st_size == 0:
            reason = RESET_EMPTY
        try:
            return Replay(reset=True, ops=self._scan(st.st_size), reason=reason)
        except JournalError:
            self.close()  # the caller got nothing: the next read starts over too
            raise

    def _scan(self, size: int) -> list[Op]:
        """Parse bytes ``[_valid, size)``; advance ``_valid`` over good lines, ``_seen`` to the end."""
        assert self._fd is not None
        if size > MAX_LOG_BYTES:  # read whole into memory: a sparse file must not swell the process
            self.close()
            raise self._recovery(f"is {size} bytes, more than the {MAX_LOG_BYTES} a journal may hold")
        try:
            data = os.pread(self._fd, size - self._valid, self._valid)
        except OSError as exc:
            raise self._recovery(f"cannot be read ({exc.strerror})") from exc
        ops: list[Op] = []
        pos = 0
        lines = self._lines
        # only a last line without its newline is torn (see the module docstring): the loop never
        # reaches it, and _seen > _valid says it is there
        while (nl := data.find(b"\n", pos)) >= 0:
            line, at = data[pos:nl], self._valid + pos
            lines += 1
            if at == 0:
                self._check_header(line)
            elif line[64:65] != b" " or hashlib.sha256(line[65:]).hexdigest().encode() != line[:64]:
                raise self._recovery(
                    f"is corrupt (checksum mismatch in the complete record on line {lines}, byte {at}: "
                    "a crash only ever leaves a last line without its newline, so this may be an "
                    "acknowledged call)"
                )
            else:
                try:
                    ops += _decode_ops(line[65:].decode())
                except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
                    raise self._recovery(
                        f"is corrupt (malformed record on line {lines}, byte {at}: {exc})"
                    ) from exc
            pos = nl + 1
        self._lines = lines
        if self._valid == 0 and pos == 0 and data:
            # the file is only ever created whole (temp file + rename), so a header without its
            # newline is damage, not a write in progress
            raise self._recovery("is corrupt (incomplete header)")
        self._valid += pos
        self._seen = self._valid + len(data) - pos
        for op in ops:
            self._track(op.uid, op.text if isinstance(op, Put) else None)
        return ops

    def _check_header(self, line: bytes) -> None:
        try:
            head = json.loads(line)
        except ValueError as exc:
            raise self._recovery(f"is corrupt (header is not JSON: {exc})") from exc
        if not isinstance(head, dict) or head.get("kind") != _KIND:
            raise self._recovery(f"is corrupt (not a {_KIND} log)")
        version = head.get("version")
        if version != LOG_VERSION:
            raise self._recovery(
                f"has unknown schema version {version!r} (this numadra reads version {LOG_VERSION})"
            )

    # -- writing ----------------------------------------------------------------------------------

    def append(self, puts: Mapping[str, str], removes: Collection[str], live: Mapping[str, str]) -> None:
        """Durably record one call: ``puts`` (uid -> canonical entry JSON) and ``removes``.

        ``live`` is every entry after this call (uid -> canonical JSON), used only to compact.
        Returns once the record is on disk (``fdatasync``); on an error the file is cut back to
        its state before the call and the error raised. Raises JournalError when the file changed
        since our last :meth:`read` (a writer without the lock, or a missing read).
        """
        if not puts and not removes:
            return
        if puts and removes and not puts.keys().isdisjoint(removes):
            overlap = sorted(set(puts).intersection(removes))
            raise ValueError(f"claims both put and removed in one call: {overlap}")
        record = _record(puts, removes)
        if self._fd is None or self._valid == 0:  # no file, or one torn in its header
            self._check_missing()
            self._replace(puts, record, create=self._fd is None)
            return
        wfd = self._writer()
        if self._valid != self._seen:
            os.ftruncate(wfd, self._valid)
        try:
            write_all(wfd, record)
            os.fdatasync(wfd)
        except BaseException:
            self._seen = -1  # unknown until cut back: a later append must read first
            os.ftruncate(wfd, self._valid)
            self._seen = self._valid
            raise
        self._valid = self._seen = self._valid + len(record)
        self._lines += 1
        for uid, text in puts.items():
            self._track(uid, text)
        for uid in removes:
            self._track(uid, None)
        if self._valid > max(self.compact_min, 4 * (len(_HEADER) + 75 + self._live_bytes)):
            try:
                self._replace(live)
            except OSError as exc:  # the call is durable already; the next append tries again
                _log.warning("cannot compact journal", path=str(self.path), error=str(exc))

    def _writer(self) -> int:
        """The O_APPEND descriptor, after checking the file is still the one (and size) we read."""
        st = self._lstat()
        if st is None:
            raise self._stale("was deleted")
        if (st.st_dev, st.st_ino) != self._ident:
            raise self._stale("was replaced by another file")
        if st.st_size != self._seen:
            raise self._stale(f"changed size ({self._seen} -> {st.st_size} bytes)")
        if self._wfd is None:
            wfd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
            st = os.fstat(wfd)
            if (st.st_dev, st.st_ino) != self._ident:
                os.close(wfd)
                raise JournalError(f"journal {self.path} was replaced while opening it for append")
            self._wfd = wfd
        return self._wfd

    def _check_missing(self) -> None:
        if self._fd is not None:
            return  # the file exists but its header is torn: replaced whole
        if self._lstat() is not None:
            raise self._stale("appeared")

    def _replace(self, live: Mapping[str, str], record: bytes | None = None, *, create: bool = False) -> None:
        """Atomically make the log hold ``live`` (temp, fsync, rename, fsync dir) and follow it.

        ``record`` is the record of ``live`` when the caller has it (a new file): written as is.
        ``create``: only if there is still no log (a hard link, which fails when the name exists),
        so that two writers racing without the lock cannot both "create" it and lose a call.
        """
        if record is None:
            record = _record(dict(sorted(live.items())), ())
        data = _HEADER + record
        ensure_dir(self.path.parent, 0o700)  # SymlinkError (an OSError) when planted as a link
        if create:
            self._create(data)
        else:
            atomic_write_bytes(self.path, data, mode=0o600)
        self.close()
        self._fd, st = open_regular(self.path)
        self._ident = (st.st_dev, st.st_ino)
        self._valid = self._seen = len(data)
        self._lines = data.count(b"\n")
        for uid, text in live.items():
            self._track(uid, text)

    def _create(self, data: bytes) -> None:
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.new.tmp")
        temp.unlink(missing_ok=True)  # left by a crash of an earlier process with our pid
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, self.path)
        except FileExistsError:
            raise self._stale("appeared") from None
        finally:
            temp.unlink(missing_ok=True)
        fsync_dir(self.path.parent)

    def _track(self, uid: str, text: str | None) -> None:
        """Follow the live state's compacted size: ``text`` put, or None removed."""
        self._live_bytes -= self._sizes.pop(uid, 0)
        if text is not None:
            self._sizes[uid] = len(uid) + len(text) + 20  # canonical JSON is ASCII: chars are bytes
            self._live_bytes += self._sizes[uid]
