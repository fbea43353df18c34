"""How the suite is split between pytest-xdist workers (``python -m pytest -n auto``).

Two rules, both about correctness first and speed second:

* A **tier group** runs whole on one worker, in the seed's order. The e2e and node tiers start a
  control plane, containerd and a kubelet once per *process* (session fixtures), and they share
  host state with each other: the node tier's host check compares ``/var/run/cdi`` before and
  after, where the podman test of the e2e tier writes its specs. So both are one group, ``kube``;
  the QEMU VM tier is ``vm``. A test elsewhere that needs one of these resources to itself (or
  must not overlap them) gets its path (a directory, a module or a node id prefix) added to
  :data:`TIER_GROUPS` with that group; a new host resource gets a group of its own there.
* A module that defines (or whose conftest.py defines) a module-, class- or package-scoped
  fixture runs whole on one worker, so that fixture (an apiserver of its own, a built wheel)
  starts once, as in a serial run. Every other test goes to whichever worker is free: a module
  of 70 slow parametrized cases is shared by both.

The groups are decided here, on the controller, from node ids and files, not from
``xdist_group`` marks: pytest 9.2 derives ``Item.nodeid`` from a field xdist 3.8 does not set, so
xdist's own ``loadgroup`` sees no group at all. The tier groups are handed out first (each is
minutes of one worker), then the whole modules, the largest first, then single tests.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

#: the e2e tier's cluster and the node tier's containerd + kubelet (and ``/var/run/cdi``)
KUBE = "kube"
#: the VM tier's QEMU guest (one TCG boot, minutes of a CPU)
VM = "vm"
#: node id prefix (a directory, a module, a test) -> the group of every test it covers
TIER_GROUPS: Mapping[str, str] = {"tests/e2e/": KUBE, "tests/node/": KUBE, "tests/vm/": VM}

_SHARED_SCOPE = re.compile(r"""scope\s*=\s*["'](?:module|class|package)["']""")

if TYPE_CHECKING:  # xdist has no type information: the base is Any to mypy
    _Base = Any
else:
    from xdist.scheduler import LoadScopeScheduling as _Base


def group_of(nodeid: str) -> str | None:
    """The tier group of a test by its node id, None for a test of no tier group."""
    for prefix, group in TIER_GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    return None


@functools.cache
def shares_a_fixture(rootdir: Path, module: str) -> bool:
    """Whether the module (a path from ``rootdir``) or a conftest.py above it defines a fixture
    of a scope wider than one test and narrower than a worker's session."""
    path = rootdir / module
    files = [path, *(d / "conftest.py" for d in path.parents if d == rootdir or rootdir in d.parents)]
    return any(f.is_file() and _SHARED_SCOPE.search(f.read_text(errors="replace")) for f in files)


class TierScheduling(_Base):  # type: ignore[misc]
    """xdist's scope scheduling with this suite's units, the tier groups handed out first."""

    def _split_scope(self, nodeid: str) -> str:
        """The unit a test is scheduled with: its tier group, else its module when the module
        shares a fixture between tests, else the test alone."""
        group = group_of(nodeid)
        if group is not None:
            return group
        module = nodeid.split("::", 1)[0]
        return module if shares_a_fixture(Path(self.config.rootpath), module) else nodeid

    def _assign_work_unit(self, node: Any) -> None:
        """A tier group is the longest unit of work: started last, it would leave one worker
        running it alone at the end."""
        for scope in self.workqueue:
            if scope in _TIERS:
                self.workqueue.move_to_end(scope, last=False)
                break
        super()._assign_work_unit(node)


_TIERS = frozenset(TIER_GROUPS.values())
