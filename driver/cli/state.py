"""``numadra state``: the claims prepared on this node, as the journal records them.

Reads ``<plugin-dir>/state/journal.log`` (read-only, also a version 1 ``journal.json`` without
adopting it; safe while the driver runs: a call being appended is not read until it is complete)
and lists each claim with its devices, CDI device IDs and CPU/memory pinning.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver import DEFAULT_DRIVER_NAME

if TYPE_CHECKING:
    from driver.state.journal import Journal

__all__ = ["load_journal", "register"]


def register(sub: Any) -> None:
    """Add the ``state`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "state", help="list the claims prepared on this node (from the journal)", description=__doc__
    )
    p.add_argument(
        "--driver-name", default=DEFAULT_DRIVER_NAME, help=f"DRA driver name (default {DEFAULT_DRIVER_NAME})"
    )
    p.add_argument(
        "--plugin-dir",
        type=Path,
        default=None,
        help="plugin dir holding the journal (default /var/lib/kubelet/plugins/<driver>)",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "svg", "html"),
        default="text",
        help="output format (default text); svg/html draw the node with the claims' CPUs and devices",
    )
    p.add_argument("--host-root", default="/", help="for svg/html: where the host's /sys is (default /)")
    p.set_defaults(handler=_run)


def load_journal(plugin_dir: Path | None, driver_name: str) -> Journal:
    """The journal of ``--plugin-dir`` (default: the driver's kubelet plugin dir), loaded.

    Raises :class:`~driver.errors.JournalError`, which says what is wrong and how to recover.
    """
    from driver.kubelet.paths import default_plugin_dir
    from driver.state.journal import Journal, journal_path

    journal = Journal(journal_path(plugin_dir or default_plugin_dir(driver_name)), read_only=True)
    journal.load()
    return journal


def _run(args: argparse.Namespace) -> int:
    from driver.pinning.types import format_cpulist

    journal = load_journal(args.plugin_dir, args.driver_name)  # JournalError: exit 1
    path = journal.path
    entries = list(journal.entries())
    if args.output in ("svg", "html"):
        from driver.cli._picture import overlay_for, picture
        from driver.inventory.discovery import discover

        inventory = discover(args.host_root)
        overlay = overlay_for(inventory, entries, host_root=args.host_root)
        sys.stdout.write(picture(inventory, overlay, args.output, title=f"numadra state: {path}"))
        return 0
    if args.output == "json":
        claims = [e.to_json() for e in entries]
        for claim in claims:
            for key in ("cdiSpecs", "metadataFiles"):  # file contents are long; paths say enough
                claim[key] = [f["path"] for f in claim[key]]
        doc = {"journal": str(path), "claims": claims}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    if not entries:
        sys.stdout.write(f"no prepared claims ({path})\n")
        return 0
    lines = [f"{len(entries)} prepared claim(s) ({path})"]
    for e in entries:
        lines.append(f"{e.namespace}/{e.name}  uid {e.uid}")
        for d in e.devices:
            requests = ",".join(d.request_names) or "*"
            admin = "  (admin access)" if d.device_name in e.admin_devices else ""
            lines.append(
                f"  {d.pool_name}/{d.device_name}  requests {requests}  "
                f"cdi {' '.join(d.cdi_device_ids) or '-'}{admin}"
            )
        for a in e.pinning.assignments if e.pinning else ():
            lines.append(
                f"  request {a.request}: cpuset {format_cpulist(a.cpus) or '-'} "
                f"memset {format_cpulist(a.mems) or '-'} ({a.mode.value})"
            )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
