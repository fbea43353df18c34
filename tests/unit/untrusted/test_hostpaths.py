"""The rule for host paths given to containers, on real trees: who owns each step, who may write it.

Each test builds a small host tree under ``tmp_path`` (CI runs as root, so files are root's unless
a test gives them to a user with ``chown``) and asks :func:`check_host_path_for_container` about
one path. The last test throws random trees at it and holds the rule as a property: whatever is
accepted resolves, component by component, only through steps owned by root in directories no
one else may change.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from driver.errors import UntrustedHostPathError
from driver.untrusted.hostpaths import CheckedDirs, check_host_path_for_container, checked_child

USER = 1000

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")


def _tree(root: Path) -> Path:
    """/usr/lib/x86_64-linux-gnu/libcuda.so.1 -> libcuda.so.550, /lib -> usr/lib, a sticky /tmp."""
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.550").write_text("cuda")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.550")
    (root / "lib").symlink_to("usr/lib")
    (root / "tmp").mkdir()
    (root / "tmp").chmod(0o1777)
    (root / "etc").mkdir()
    return root


def test_root_owned_links_in_root_only_dirs_are_followed(tmp_path: Path) -> None:
    """The links of a normal system (merged /usr, SONAME links) resolve; no link is left."""
    root = _tree(tmp_path)
    got = check_host_path_for_container(str(root), "/lib/x86_64-linux-gnu/libcuda.so.1")
    assert got == "/usr/lib/x86_64-linux-gnu/libcuda.so.550"


def test_a_missing_path_is_refused_by_name(tmp_path: Path) -> None:
    """Nothing there: refused, naming the component (the caller drops the mount)."""
    root = _tree(tmp_path)
    with pytest.raises(UntrustedHostPathError, match=r"/tmp/nvidia-mps: No such file") as caught:
        check_host_path_for_container(str(root), "/tmp/nvidia-mps")
    assert caught.value.path == "/tmp/nvidia-mps"


def test_a_step_owned_by_a_user_is_refused(tmp_path: Path) -> None:
    """A directory on the way that a user owns: they could put anything below it."""
    root = _tree(tmp_path)
    os.chown(root / "usr/lib", USER, USER)
    with pytest.raises(UntrustedHostPathError, match=r"/usr/lib is owned by uid 1000, not root"):
        check_host_path_for_container(str(root), "/usr/lib/x86_64-linux-gnu/libcuda.so.550")


def test_a_group_writable_directory_is_refused(tmp_path: Path) -> None:
    """Writable by its group and not sticky: a member could rename the next step away."""
    root = _tree(tmp_path)
    (root / "usr/lib").chmod(0o775)
    with pytest.raises(UntrustedHostPathError, match=r"/usr/lib is writable by others \(mode 775"):
        check_host_path_for_container(str(root), "/usr/lib/x86_64-linux-gnu/libcuda.so.550")


def test_a_link_into_a_sticky_dir_is_refused_even_when_roots(tmp_path: Path) -> None:
    """A root-owned link in /tmp is refused too: no link is followed where others can write."""
    root = _tree(tmp_path)
    (root / "tmp/dir").symlink_to("/etc")
    with pytest.raises(UntrustedHostPathError, match=r"/tmp/dir is a symbolic link in /tmp"):
        check_host_path_for_container(str(root), "/tmp/dir")


def test_a_link_that_points_into_a_users_dir_is_refused_there(tmp_path: Path) -> None:
    """A root link is fine; where it leads is checked as well."""
    root = _tree(tmp_path)
    (root / "home/u").mkdir(parents=True)
    os.chown(root / "home/u", USER, USER)
    (root / "home/u/f").write_text("x")
    (root / "etc/f").symlink_to("/home/u/f")
    with pytest.raises(UntrustedHostPathError, match=r"/home/u is owned by uid 1000"):
        check_host_path_for_container(str(root), "/etc/f")


def test_links_never_leave_the_host_root(tmp_path: Path) -> None:
    """``..`` and absolute targets stay below the host root, as on the host itself."""
    root = _tree(tmp_path / "host")
    (root / "etc/up").symlink_to("../../../../../etc")
    assert check_host_path_for_container(str(root), "/etc/up") == "/etc"


def test_inside_a_driver_root_absolute_links_start_there(tmp_path: Path) -> None:
    """A driver container's root: its absolute links point into it; the result carries it."""
    root = tmp_path / "host"
    drv = _tree(root / "run/nvidia/driver")
    (drv / "etc/libcuda.so").symlink_to("/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    got = check_host_path_for_container(str(root), "/etc/libcuda.so", inside="/run/nvidia/driver")
    assert got == "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550"
    os.chown(root / "run/nvidia", USER, USER)  # the driver root itself is on the path too
    with pytest.raises(UntrustedHostPathError, match=r"/run/nvidia is owned by uid 1000"):
        check_host_path_for_container(str(root), "/etc/libcuda.so", inside="/run/nvidia/driver")


def test_a_link_loop_is_refused(tmp_path: Path) -> None:
    """Links that never end: refused after the kernel's 40."""
    root = _tree(tmp_path)
    (root / "etc/a").symlink_to("b")
    (root / "etc/b").symlink_to("a")
    with pytest.raises(UntrustedHostPathError, match="too many levels"):
        check_host_path_for_container(str(root), "/etc/a")


def test_checked_dirs_give_the_same_answers(tmp_path: Path) -> None:
    """The parent cache of one check answers as a fresh walk does, refusals included."""
    root = _tree(tmp_path)
    dirs = CheckedDirs()
    for path in ("/lib/x86_64-linux-gnu/libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.550"):
        assert check_host_path_for_container(str(root), path, dirs=dirs) == check_host_path_for_container(
            str(root), path
        )
    (root / "tmp/x").symlink_to("/etc")
    with pytest.raises(UntrustedHostPathError, match="symbolic link in /tmp"):
        check_host_path_for_container(str(root), "/tmp/x", dirs=dirs)


def test_checked_child_takes_one_plain_name(tmp_path: Path) -> None:
    """numadra's own file in a checked directory: one component, never a way out."""
    root = _tree(tmp_path)
    directory = check_host_path_for_container(str(root), "/etc")
    assert checked_child(directory, "a.json") == "/etc/a.json"
    for bad in ("", ".", "..", "a/b", "a\0b"):
        with pytest.raises(UntrustedHostPathError, match="not one plain file name"):
            checked_child(directory, bad)


# -- the rule as a property, on random trees --------------------------------------------------

_NAMES = ("a", "b", "c")
_MODES = (0o755, 0o775, 0o777, 0o1777, 0o700)


@st.composite
def _entries(draw: st.DrawFn) -> list[tuple[str, str, int, int, str]]:
    """Random (path, kind, mode, owner, link target) entries two levels deep."""
    out = []
    for first in _NAMES:
        kind = draw(st.sampled_from(("dir", "file", "link", "none")))
        if kind == "none":
            continue
        owner = draw(st.sampled_from((0, USER)))
        target = draw(st.sampled_from(("/a", "/b/c", "../c", "a", "/c/a")))
        out.append((first, kind, draw(st.sampled_from(_MODES)), owner, target))
        if kind == "dir":
            for second in _NAMES:
                kind2 = draw(st.sampled_from(("dir", "file", "link", "none")))
                if kind2 != "none":
                    target2 = draw(st.sampled_from(("/a", "/b/c", "../c", "a", "/c/a")))
                    mode2 = draw(st.sampled_from(_MODES))
                    out.append((f"{first}/{second}", kind2, mode2, draw(st.sampled_from((0, USER))), target2))
    return out


def _build(root: Path, entries: list[tuple[str, str, int, int, str]]) -> None:
    for rel, kind, mode, owner, target in entries:
        path = root / rel
        if kind == "dir":
            path.mkdir()
            path.chmod(mode)
        elif kind == "file":
            path.write_text(rel)
            path.chmod(mode & 0o777)
        else:
            path.symlink_to(target)
        os.lchown(path, owner, owner)


def _steps_are_roots_own(root: Path, resolved: str) -> None:
    """Every component of the result: root's, no link, in a directory only root may change."""
    parent = os.lstat(root)
    current = root
    for part in [p for p in resolved.split("/") if p]:
        current = current / part
        here = os.lstat(current)
        assert here.st_uid == 0, f"{current} is not root's"
        assert not stat.S_ISLNK(here.st_mode), f"{current} is a link"
        writable = parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        assert not writable or parent.st_mode & stat.S_ISVTX, f"{current}'s directory is open"
        parent = here


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=_entries(), path=st.sampled_from(["/a", "/b", "/c", "/a/b", "/b/c", "/c/a", "/a/a/c"]))
def test_whatever_is_accepted_only_root_could_change(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[str, str, int, int, str]], path: str
) -> None:
    """Random trees of dirs, files and links of root and of a user, in every kind of directory."""
    root = tmp_path_factory.mktemp("host")
    _build(root, entries)
    try:
        resolved = check_host_path_for_container(str(root), path)
    except UntrustedHostPathError as exc:
        assert exc.path == path
        assert exc.reason
        event("refused")
        return
    event("accepted")
    _steps_are_roots_own(root, resolved)
