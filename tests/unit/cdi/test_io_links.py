"""cdi.io under planted links and any umask: nothing is written through a link, modes are exact."""

from __future__ import annotations

import errno
import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import cdi


@pytest.fixture
def umask0() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    out = tmp_path / "victim"
    out.mkdir()
    return out


def test_write_below_a_root_refuses_a_link_on_the_way(tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "b").symlink_to(victim)
    target = root / "a" / "b" / "c" / "file.json"
    with pytest.raises(cdi.SymlinkError) as info:
        cdi.atomic_write_bytes(target, b"{}", roots=[str(root)], dir_mode=0o755)
    assert info.value.errno == errno.ELOOP
    assert info.value.filename == str(root / "a" / "b")
    assert (
        str(info.value)
        == f"{root / 'a' / 'b'} is a symbolic link, which numadra never makes: refusing to follow it"
    )
    assert list(victim.iterdir()) == []


def test_the_root_itself_may_be_a_link(tmp_path: Path, victim: Path) -> None:
    """/var/run/cdi lies below the /var/run -> /run link on most hosts: the root is followed."""
    root = tmp_path / "run-link"
    root.symlink_to(victim)
    cdi.atomic_write_bytes(root / "spec.json", b"{}", roots=[str(root)], sync=False)
    assert (victim / "spec.json").read_bytes() == b"{}"


def test_write_replaces_a_link_at_the_target_instead_of_following_it(tmp_path: Path, victim: Path) -> None:
    (victim / "keep").write_text("precious")
    target = tmp_path / "spec.json"
    target.symlink_to(victim / "keep")
    cdi.atomic_write_bytes(target, b"{}", roots=[str(tmp_path)])
    assert not target.is_symlink() and target.read_bytes() == b"{}"
    assert (victim / "keep").read_text() == "precious"


def test_dirs_made_below_a_root_get_exact_modes_and_refuse_links(
    tmp_path: Path, victim: Path, umask0: None
) -> None:
    """A write that makes its directories walks them without following links."""
    root = tmp_path / "plugin"
    root.mkdir()
    roots = [str(root)]
    cdi.atomic_write_bytes(root / "meta" / "sub" / "a.json", b"{}", roots=roots, dir_mode=0o755)
    for rel in ("meta", "meta/sub"):
        assert (root / rel).stat().st_mode & 0o777 == 0o755, rel
    (root / "meta" / "planted").symlink_to(victim)
    with pytest.raises(cdi.SymlinkError, match="planted is a symbolic link"):
        cdi.atomic_write_bytes(root / "meta" / "planted" / "a.json", b"{}", roots=roots, dir_mode=0o755)
    with pytest.raises(cdi.SymlinkError):
        cdi.atomic_write_bytes(root / "meta" / "planted" / "d" / "a.json", b"{}", roots=roots, dir_mode=0o755)
    assert list(victim.iterdir()) == []


def test_files_get_their_mode_under_umask_000(tmp_path: Path, umask0: None) -> None:
    cdi.atomic_write_bytes(tmp_path / "a.json", b"{}", roots=[str(tmp_path)])
    cdi.atomic_write_bytes(tmp_path / "b.json", b"{}", mode=0o600)
    cdi.atomic_write_bytes(tmp_path / "d" / "c.json", b"{}", roots=[str(tmp_path)], dir_mode=0o755)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.json").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755


def test_ensure_dir_makes_exact_modes_and_refuses_a_link(tmp_path: Path, victim: Path, umask0: None) -> None:
    cdi.ensure_dir(tmp_path / "x" / "state", 0o700)
    assert (tmp_path / "x").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "x" / "state").stat().st_mode & 0o777 == 0o700
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(cdi.SymlinkError):
        cdi.ensure_dir(tmp_path / "link", 0o700)


def test_a_failed_write_names_the_target_not_the_temp_file(tmp_path: Path) -> None:
    """Every OSError of a write carries the file the caller asked for."""
    target = tmp_path / "missing-dir" / "spec.json"
    with pytest.raises(FileNotFoundError) as info:
        cdi.atomic_write_bytes(target, b"{}")
    assert info.value.filename == str(target)
    with pytest.raises(FileNotFoundError) as info:
        cdi.atomic_write_bytes(target, b"{}", roots=[str(tmp_path)])
    assert info.value.filename == str(tmp_path / "missing-dir")


def test_a_name_error_is_a_spec_error() -> None:
    """Callers that report spec errors per claim report name errors too (a bad shareID)."""
    with pytest.raises(cdi.CdiSpecError, match="invalid CDI device name 'a/b'"):
        cdi.qualified_name("numadra.dev/claim", "a/b")


def test_removals_below_a_root_never_follow_links(tmp_path: Path, victim: Path) -> None:
    """remove_file refuses a link on the way to the target: a planted metadata dir."""
    root = tmp_path / "plugin"
    root.mkdir()
    (victim / "abc_req.json").write_text("keep")
    (root / "dra-device-metadata").symlink_to(victim)
    roots = [str(root)]
    with pytest.raises(cdi.SymlinkError):
        cdi.remove_file(root / "dra-device-metadata" / "abc_req.json", roots=roots)
    assert (victim / "abc_req.json").read_text() == "keep"
    assert cdi.remove_file(root / "gone" / "x.json", roots=roots) is False


def test_a_missing_root_is_made_on_first_write(tmp_path: Path) -> None:
    """--cdi-dir that does not exist yet: made on the first write, as before the walk existed."""
    root = tmp_path / "run" / "cdi"
    with pytest.raises(FileNotFoundError):
        cdi.atomic_write_bytes(root / "spec.json", b"{}", roots=[str(root)])
    cdi.atomic_write_bytes(root / "spec.json", b"{}", roots=[str(root)], dir_mode=0o755)
    assert (root / "spec.json").read_bytes() == b"{}"


def test_held_directories_refuse_a_link_planted_after_the_first_write(tmp_path: Path, victim: Path) -> None:
    """DirsUnder keeps the metadata dir open between calls; a link put in its place later is
    still refused, and nothing is written or removed where it points."""
    root = tmp_path / "plugin"
    dirs = cdi.DirsUnder([str(root)])
    target = f"{root}/dra-device-metadata/abc_req.json"
    dirs.write(target, b"one", 0o644)
    assert Path(target).read_bytes() == b"one"
    (root / "dra-device-metadata").rename(tmp_path / "moved-away")
    (root / "dra-device-metadata").symlink_to(victim)
    (victim / "abc_req.json").write_text("keep")
    with pytest.raises(cdi.SymlinkError) as info:
        dirs.write(target, b"two", 0o644)
    assert info.value.filename == str(root / "dra-device-metadata")
    with pytest.raises(cdi.SymlinkError):
        dirs.remove(target)
    assert (victim / "abc_req.json").read_text() == "keep"
    assert sorted(p.name for p in victim.iterdir()) == ["abc_req.json"]
    assert (tmp_path / "moved-away" / "abc_req.json").read_bytes() == b"one"  # the held one: untouched
    dirs.close()


def test_held_directories_follow_a_directory_made_anew(tmp_path: Path) -> None:
    """A directory removed and made again (by hand, or a cleanup) is walked again: the next file
    lands where the path names, never in the removed directory the old descriptor still holds."""
    root = tmp_path / "cdi"
    dirs = cdi.DirsUnder([str(root)])
    dirs.write(f"{root}/sub/a.json", b"a", 0o644)
    (root / "sub" / "a.json").unlink()
    (root / "sub").rmdir()
    dirs.write(f"{root}/sub/b.json", b"b", 0o600)
    assert (root / "sub" / "b.json").read_bytes() == b"b"
    assert (root / "sub" / "b.json").stat().st_mode & 0o777 == 0o600
    assert dirs.remove(f"{root}/sub/b.json") is True
    assert dirs.remove(f"{root}/sub/b.json") is False
    assert dirs.remove(f"{root}/gone/c.json") is False
    dirs.close()


def _open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def test_held_directories_stay_bounded(tmp_path: Path) -> None:
    """However many directories a caller names, at most max_dirs descriptors stay open."""
    root = tmp_path / "root"
    dirs = cdi.DirsUnder([str(root)], max_dirs=3)
    before = _open_fds()
    for i in range(20):
        dirs.write(f"{root}/d{i}/f.json", b"x", 0o644)
    assert _open_fds() - before <= 3
    dirs.close()
    assert _open_fds() == before


def test_a_call_checks_each_directory_once_and_the_next_call_again(tmp_path: Path, victim: Path) -> None:
    """Within one call the held directory is checked at its first use; a link planted between
    calls is refused by the next one."""
    root = tmp_path / "plugin"
    dirs = cdi.DirsUnder([str(root)])
    meta = root / "dra-device-metadata"
    with dirs.call():
        dirs.write(f"{meta}/a_x.json", b"a", 0o644)
        dirs.write(f"{meta}/a_y.json", b"b", 0o644)
    assert sorted(p.name for p in meta.iterdir()) == ["a_x.json", "a_y.json"]
    meta.rename(tmp_path / "moved-away")
    meta.symlink_to(victim)
    with dirs.call(), pytest.raises(cdi.SymlinkError):
        dirs.write(f"{meta}/b_x.json", b"c", 0o644)
    assert list(victim.iterdir()) == []
    dirs.close()


def test_held_directories_go_with_their_owner(tmp_path: Path) -> None:
    """An owner let go without close() (a claims driver replaced, a test's driver) takes its
    descriptors with it: a long-lived process does not run out of them.

    The count is taken after a collection: garbage that earlier tests in this worker left (an
    inotify-backed finder that closes its descriptor when collected) must not be counted as
    this test's. A leak would leave 50 more descriptors open, never fewer."""
    gc.collect()
    before = _open_fds()
    for i in range(50):
        dirs = cdi.DirsUnder([str(tmp_path)])
        dirs.write(f"{tmp_path}/d{i}/f.json", b"x", 0o644)
        del dirs
    gc.collect()
    assert _open_fds() <= before
