"""The text of the paths prepare writes: claim files below a few directories.

The names that go into those paths (claim UIDs, request names) are checked first by the rules in
:mod:`driver.names`, so a name like ``../x`` never gets near the file system.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["dir_prefix"]


@functools.lru_cache(maxsize=64)
def dir_prefix(directory: Path) -> str:
    """``str(directory / name) == dir_prefix(directory) + name`` for a checked name without ``/``.

    Every prepare builds several paths below the same few directories; joining strings to a
    cached prefix costs far less than a pathlib object per path, and gives the same text.
    """
    return str(directory / "_")[:-1]
