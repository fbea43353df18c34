"""The one file reader and the lock-file opener refuse what is planted, by name and at once.

Every planted kind (``tests/support/planted.py``) is made for real; a FIFO in particular would
block a plain open forever, so these tests would hang (and hit the suite's timeout) if the
reader ever lost ``O_NONBLOCK``.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from driver.errors import UntrustedFileError
from driver.untrusted.files import open_lock_file, open_regular, read_file, read_file_text
from tests.support.planted import PLANTS, plant

CAP = 1 << 20


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_every_planted_kind_is_refused_by_name(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "health-faults.json"
    plant(kind, path)
    with pytest.raises(UntrustedFileError) as caught:
        read_file(path, max_bytes=CAP)
    err = caught.value
    assert err.path == str(path) and str(path) in str(err)
    expected = {
        "fifo": "is a FIFO, not a regular file",
        "socket": "is a unix socket",
        "directory": "is a directory, not a regular file",
        "link-to-dev-zero": "is a symbolic link",
        "link-to-fifo": "is a symbolic link",
        "sparse-1TiB": f"more than the {CAP} allowed",
        "huge": f"more than the {CAP} allowed",
    }[kind]
    assert expected in err.reason
    assert isinstance(err, OSError)  # callers that treat "cannot read" as "absent" keep doing so


def test_a_regular_file_reads_whole(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"x" * 100_000)
    assert read_file(path, max_bytes=100_000) == b"x" * 100_000
    with pytest.raises(UntrustedFileError, match="more than the 99999 allowed"):
        read_file(path, max_bytes=99_999)


def test_missing_stays_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "absent")


def test_sysfs_and_procfs_attributes_are_regular_files() -> None:
    """sysfs reports 4096 bytes and procfs 0 whatever they hold: the read goes by what comes."""
    assert read_file("/proc/self/stat", max_bytes=4096).startswith(str(os.getpid()).encode())
    online = Path("/sys/devices/system/cpu/online")
    if online.exists():
        assert read_file(online, max_bytes=4096).strip()
    with pytest.raises(UntrustedFileError, match="holds more than the 4 bytes"):
        read_file("/proc/self/status", max_bytes=4)


def test_links_are_followed_only_when_the_caller_says_so(tmp_path: Path) -> None:
    """The service account's projected volume links ``token`` to ``..data/token``."""
    (tmp_path / "real").write_text("secret")
    (tmp_path / "token").symlink_to("real")
    with pytest.raises(UntrustedFileError, match="symbolic link"):
        read_file(tmp_path / "token")
    assert read_file(tmp_path / "token", follow_symlinks=True) == b"secret"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-fifo").symlink_to("fifo")
    with pytest.raises(UntrustedFileError, match="is a FIFO"):  # followed, still never blocks
        read_file(tmp_path / "to-fifo", follow_symlinks=True)


def test_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_bytes(b"ok\xff")
    with pytest.raises(UntrustedFileError, match="not UTF-8 text"):
        read_file_text(path)


def test_open_regular_checks_the_descriptor_not_the_path(tmp_path: Path) -> None:
    path = tmp_path / "journal.log"
    path.write_bytes(b"abc")
    fd, st = open_regular(path)
    try:
        path.unlink()
        os.mkfifo(path)  # swapped after the open: the descriptor is still the file
        assert st.st_size == 3 and os.read(fd, 10) == b"abc"
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "link-to-dev-zero", "link-to-fifo"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nri-pinner.lock"
    plant(kind, path)
    with pytest.raises(UntrustedFileError) as caught:
        open_lock_file(path)
    assert caught.value.path == str(path)


def test_a_dangling_link_at_a_lock_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    """O_CREAT through a dangling link would create the target: refused, nothing made."""
    lock = tmp_path / "serialize.lock"
    lock.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UntrustedFileError, match="never taken through one") as caught:
        open_lock_file(lock)
    assert caught.value.errno == errno.ELOOP
    assert not (tmp_path / "elsewhere").exists()


def test_a_lock_file_is_created_and_locks(tmp_path: Path) -> None:
    lock = tmp_path / "serialize.lock"
    fd = open_lock_file(lock)
    try:
        assert oct(lock.stat().st_mode & 0o777) == oct(0o600 & ~_umask())
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other = open_lock_file(lock)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
