"""``numadra hook create-runtime``: the OCI hook a CDI spec references to pin a container.

The runtime writes the OCI state JSON to stdin. The assignment comes from ``--cpus/--mems``
(what :func:`driver.pinning.hook.cdi_hook_entry` puts in the CDI spec) or, without them, from
the marker env of ``<bundle>/config.json``, which any pod can set: that mode needs
``--journal`` (the claims journal) to check that the container's pod holds the claim, and pins
to the journal's CPUs and nodes (see ``driver.pinning.hook``). On error the hook prints
one line to stderr and exits non-zero, so the runtime fails the container instead of running it
unpinned.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from driver.pinning.types import ClaimBinding

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the ``hook`` subcommand group."""
    p: argparse.ArgumentParser = sub.add_parser("hook", help="OCI hooks run by the container runtime")
    hooks = p.add_subparsers(dest="hook", metavar="HOOK", parser_class=type(p))
    hooks.required = True
    cr: argparse.ArgumentParser = hooks.add_parser(
        "create-runtime", help="pin the container's cpuset (OCI state JSON on stdin)"
    )
    cr.add_argument("--cpus", help="cpulist to pin to (default: NUMADRA_CPUS of the bundle's config.json)")
    cr.add_argument("--mems", help="NUMA node list (default: NUMADRA_MEMS of the bundle's config.json)")
    cr.add_argument(
        "--journal",
        type=Path,
        help="the claims journal (<plugin-dir>/state/journal.log); without --cpus/--mems the "
        "marker env is refused unless the container's pod is one the claim is reserved for here",
    )
    cr.add_argument("--proc-root", type=Path, default=Path("/proc"), help="procfs to read (default /proc)")
    cr.set_defaults(handler=_create_runtime)


def _create_runtime(args: argparse.Namespace) -> int:
    from driver.log import configure_logging
    from driver.pinning.cgroupfs import CgroupfsBackend
    from driver.pinning.hook import HookBackend, run_create_runtime
    from driver.pinning.types import format_cpulist

    # stdout belongs to the runtime; only warnings (affinity fallback) reach stderr
    configure_logging("json", logging.WARNING)
    backend = HookBackend(CgroupfsBackend(proc_root=args.proc_root), proc_root=args.proc_root)
    lookup = None
    if args.journal is not None and args.cpus is None and args.mems is None:
        from driver.pinning.binding import claim_binding
        from driver.state.index import prepared_view
        from driver.state.journal import Journal

        journal = Journal(args.journal, read_only=True)
        journal.load()

        def lookup(claim_uid: str) -> ClaimBinding | None:
            entry = journal.get(claim_uid)
            return None if entry is None else claim_binding(prepared_view(entry))

    outcome = run_create_runtime(sys.stdin.read(), args.cpus, args.mems, backend, lookup)
    if outcome.method == "none":
        sys.stderr.write("numadra hook: no pinning marker for this container; nothing to do\n")
    elif outcome.method == "affinity":
        sys.stderr.write(
            f"numadra hook: pid {outcome.pid} pinned to cpus {format_cpulist(outcome.cpus)} by affinity "
            "only (cgroup not writable; memory nodes not enforced)\n"
        )
    return 0
