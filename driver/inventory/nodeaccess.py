"""Which group a non-root container process needs to open a device node, read from the host.

Render nodes (``/dev/dri/renderD*``) and ``/dev/kfd`` are usually ``0660 root:render`` (or
``video``): a container running as a non-root user gets the node but no permission to open it. The
group that owns the node on the host, given to the container's process as a supplementary group
(CDI ``additionalGids``), opens it exactly as it opens it for a member of that group on the host.

No group is needed when everyone may read and write the node (``/dev/nvidia*`` are ``0666``), and
none is handed out when the group may not read and write it either, or when it is ``root`` (GID 0
would give the process every file of the root group; runtimes refuse it anyway). The node is read
at prepare time, so a udev rule that changed its group since discovery counts.
"""

from __future__ import annotations

import os
import stat

from driver.inventory.hostfiles import host_join

__all__ = ["access_gid", "access_gid_of"]

# ruff: noqa: PTH116 - os.stat on plain strings, as the inventory's readers do

_RW_OTHER = stat.S_IROTH | stat.S_IWOTH
_RW_GROUP = stat.S_IRGRP | stat.S_IWGRP


def access_gid(host_root: str, path: str) -> int | None:
    """The GID that opens device node ``path`` (a host path) for a non-root process, or None."""
    try:
        st = os.stat(host_join(host_root, path), follow_symlinks=False)
    except OSError:
        return None
    return access_gid_of(st)


def access_gid_of(st: os.stat_result) -> int | None:
    """:func:`access_gid` from the node's ``lstat`` result, for a caller that has it already."""
    if st.st_mode & _RW_OTHER == _RW_OTHER or st.st_mode & _RW_GROUP != _RW_GROUP or st.st_gid == 0:
        return None
    return st.st_gid
