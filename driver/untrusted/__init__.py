"""How numadra takes in what others wrote: reading a file, parsing it, and checking its shape.

* :mod:`driver.untrusted.files`: every file numadra reads, and every lock file it opens, is
  opened here (no link followed, never blocking, regular files only, a size cap), so a FIFO, a
  socket, a link or a sparse file planted in a directory others can write is refused by name.
* :mod:`driver.untrusted.values`: JSON documents and the numbers in them (fields of the files
  above, container env markers) are parsed here, bounded before any work that grows with the
  value, so a bad entry is an :class:`~driver.errors.UntrustedValueError` naming it, never an
  ``OverflowError`` or a ``RecursionError`` escaping into a crash loop.
* :mod:`driver.untrusted.yamldoc`: YAML documents, parsed without aliases or anchors and with
  bounded nesting and node count, so the bytes a read allows bound the work they cause.
* :mod:`driver.untrusted.shape`: declared shapes of documents (every field's type and bounds);
  a wrong field is an UntrustedValueError naming its path, never an ``AttributeError`` or
  ``TypeError`` later in the code that reads it.

* :mod:`driver.untrusted.hostpaths`: the other direction, every host path numadra hands to a
  container in a CDI spec (mounts, device nodes) is checked here: it must resolve only through
  links and directories that root alone can change, so a link planted in ``/tmp`` is refused.

The kernel's CPU list format has its own bounded parser, :mod:`driver.inventory.cpulist`.
``tests/unit/test_untrusted_reads.py`` holds every read in ``driver/`` and ``cdi/`` to this package.
"""

from __future__ import annotations

from driver.untrusted.files import (
    DEFAULT_MAX_BYTES,
    MAX_USER_FILE_BYTES,
    open_lock_file,
    open_regular,
    read_file,
    read_file_text,
    read_from,
)
from driver.untrusted.values import MAX_WALL_CLOCK_S, bounded_int, bounded_number, loads_json

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_USER_FILE_BYTES",
    "MAX_WALL_CLOCK_S",
    "bounded_int",
    "bounded_number",
    "loads_json",
    "open_lock_file",
    "open_regular",
    "read_file",
    "read_file_text",
    "read_from",
]
