"""The toolkit finder lists a CDI dir again only when a spec name came or went, and misses none.

numadra's CDI dir holds one spec per prepared claim; the finder looks for the toolkit's spec
ahead of every prepare on a GPU node. A look must not read the whole dir each time (that grows
with the node's claims), yet a spec the toolkit adds, removes or renames in must be seen at the
very next look, whatever happened to the dir in between. Real dirs and files, the kernel's
inotify; the only stand-in is a spy on ``os.scandir`` that counts the entries read.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.inventory.dirnames import DirNames
from driver.inventory.nvidia_toolkit import ToolkitSpecFinder

OWN = "numadra.dev_claim_"
SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
}


def _finder(static: Path, cdi: Path) -> ToolkitSpecFinder:
    return ToolkitSpecFinder("/", [str(static), str(cdi)], skip_prefix=OWN)


class _EntriesRead:
    """Counts the entries every ``os.scandir`` yields (the real scandir does the reading)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = os.scandir
        outer = self

        class Counted:
            def __init__(self, path: Any) -> None:
                self._inner = real(path)

            def __enter__(self) -> Counted:
                return self

            def __exit__(self, *exc: object) -> None:
                self._inner.close()

            def __iter__(self) -> Iterator[os.DirEntry[str]]:
                for entry in self._inner:
                    outer.count += 1
                    yield entry

        monkeypatch.setattr(os, "scandir", Counted)


def test_a_look_after_numadras_own_writes_reads_no_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 claim specs of numadra's beside the toolkit's: after the first look, prepares and
    unprepares (numadra's own specs written through a dot-named temp file, and removed) leave the
    next look without a single entry read; a toolkit spec renamed in is then seen at once."""
    static, cdi = tmp_path / "etc-cdi", tmp_path / "cdi"
    static.mkdir()
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_text(json.dumps(SPEC))
    for i in range(1000):
        (cdi / f"{OWN}{i}.json").write_text("{}")
    finder = _finder(static, cdi)
    assert finder.find().files == (str(cdi / "nvidia.yaml"),)
    read = _EntriesRead(monkeypatch)
    for i in range(1000, 1010):  # ten prepares and an unprepare each, as numadra writes them
        temp = cdi / f".{OWN}{i}.json.1.2.3.tmp"
        temp.write_text("{}")
        temp.rename(cdi / f"{OWN}{i}.json")
        (cdi / f"{OWN}{i - 1000}.json").unlink()
        assert finder.find().files == (str(cdi / "nvidia.yaml"),)
    assert read.count == 0
    temp = cdi / ".nvidia.yaml.tmp"
    temp.write_text(json.dumps(SPEC))
    temp.rename(cdi / "other.json")
    assert finder.find().files == (str(cdi / "nvidia.yaml"), str(cdi / "other.json"))


def test_a_dir_that_cannot_be_watched_is_listed_every_time(tmp_path: Path) -> None:
    """A dir that does not exist yet is looked at on every call, and watched once it exists."""
    missing = tmp_path / "later"
    names = DirNames([str(missing)], lambda name: name.endswith(".json"))
    assert names.names(str(missing)) == []
    missing.mkdir()
    (missing / "a.json").write_text("{}")
    assert names.names(str(missing)) == ["a.json"]
    before = names.listings
    assert names.names(str(missing)) == ["a.json"]
    assert names.listings == before  # watched now: nothing came or went
    names.close()
    (missing / "b.json").write_text("{}")
    assert names.names(str(missing)) == ["a.json", "b.json"]  # closed: listed every time


_NAMES = st.sampled_from(
    ["nvidia.yaml", "a.json", "b.yaml", f"{OWN}1.json", f"{OWN}2.json", "README", ".x.json"]
)
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "rename-in", "rename-out", "delete", "replace-dir", "remove-dir"]),
        st.sampled_from([0, 1]),
        _NAMES,
    ),
    max_size=25,
)


def _apply(op: str, directory: Path, name: str, scratch: Path) -> None:
    path = directory / name
    if op == "write" and directory.is_dir():
        path.write_text(json.dumps(SPEC))
    elif op == "rename-in" and directory.is_dir():
        temp = directory / ".incoming.tmp"
        temp.write_text(json.dumps(SPEC))
        temp.rename(path)
    elif op == "rename-out" and path.exists():
        path.rename(scratch / f"gone-{len(list(scratch.iterdir()))}")
    elif op == "delete" and path.exists():
        path.unlink()
    elif op == "replace-dir":  # a new dir moved over the path: its inode is another
        fresh = scratch / f"dir-{len(list(scratch.iterdir()))}"
        fresh.mkdir()
        (fresh / name).write_text(json.dumps(SPEC))
        shutil.rmtree(directory, ignore_errors=True)
        fresh.rename(directory)
    elif op == "remove-dir":
        shutil.rmtree(directory, ignore_errors=True)


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_every_look_sees_what_a_fresh_listing_sees(ops: list[tuple[str, int, str]]) -> None:
    """Whatever happens to the dirs between looks, the kept finder finds what a new one finds."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dirs, scratch = [root / "static", root / "cdi"], root / "scratch"
        for directory in (*dirs, scratch):
            directory.mkdir()
        kept = _finder(*dirs)
        for op, which, name in ops:
            _apply(op, dirs[which], name, scratch)
            assert kept.find().files == _finder(*dirs).find().files, (op, which, name)
