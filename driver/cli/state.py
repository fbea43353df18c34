"""``numadra state``: the claims prepared on this node, as the journal records them.

Reads ``<plugin-dir>/state/journal.log`` (read-only; safe while the driver runs: a call being
appended is not read until it is complete)
and lists each claim with its devices, CDI device IDs and CPU/memory pinning.

It also shows state that was lost: claims the driver rebuilt from the files it wrote for them
because the journal had lost them (``state/recoveries.log``, newest last), and claims whose CDI
spec or metadata is on disk right now but which the journal lacks (the driver rebuilds those on
its next call). Either means the journal was damaged: see docs/troubleshooting.md.

And it names the feature gates the running driver found off on the apiserver (the fields of its
slices the apiserver dropped or refused, and what that changes), from the record the driver keeps
in ``<plugin-dir>/api-features.json`` (:mod:`driver.slices.missingfeatures`), and the devices it
left out of its slices because another DRA driver or a device plugin owns them, with the owner
(``<plugin-dir>/withheld.json``, :mod:`driver.slices.withheld`); a prepared device among them is
marked: it stays prepared, but no new claim gets it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.cli.options import parent

if TYPE_CHECKING:
    from driver.slices.missingfeatures import FeatureRecord
    from driver.slices.withheld import WithheldDevice
    from driver.state.evidence import Found
    from driver.state.journal import Journal

__all__ = ["load_journal", "register", "withheld_record"]


def register(sub: Any) -> None:
    """Add the ``state`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "state",
        parents=[parent("--driver-name", "--plugin-dir", "--cdi-dir", "--node-name", "--host-root")],
        help="list the claims prepared on this node (from the journal)",
        description=__doc__,
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "svg", "html"),
        default="text",
        help="output format (default text); svg/html draw the node with the claims' CPUs and devices",
    )
    p.set_defaults(handler=_run)


def load_journal(
    plugin_dir: Path | None, driver_name: str, *, cdi_dir: Path | None = None, node_name: str = ""
) -> Journal:
    """The journal of ``--plugin-dir`` (default: the driver's kubelet plugin dir), loaded.

    With ``cdi_dir``, cross-checked with the files the driver wrote (``Journal.unjournaled``).
    Raises :class:`~driver.errors.JournalError`, which says what is wrong and how to recover.
    """
    from driver.kubelet.paths import default_plugin_dir
    from driver.state.evidence import Evidence
    from driver.state.journal import Journal, journal_path

    directory = plugin_dir or default_plugin_dir(driver_name)
    evidence = None
    if cdi_dir is not None:
        evidence = Evidence(cdi_dir=cdi_dir, plugin_dir=directory, driver_name=driver_name, pool=node_name)
    journal = Journal(journal_path(directory), read_only=True, evidence=evidence)
    journal.load()
    return journal


def _recovery_lines(recoveries: list[dict[str, Any]], unjournaled: list[Found]) -> list[str]:
    lines: list[str] = []
    if unjournaled:
        lines.append(
            f"STATE LOST: {len(unjournaled)} prepared claim(s) have files on disk but no journal "
            "entry (the driver rebuilds them on its next call; docs/troubleshooting.md)"
        )
        for item in unjournaled:
            devices = ",".join(d.device_name for d in item.entry.devices) or "-"
            lines.append(f"  uid {item.uid}  devices {devices}  files {' '.join(item.paths)}")
    if recoveries:
        lines.append(f"{len(recoveries)} claim(s) rebuilt from evidence after the journal lost them:")
        for r in recoveries:
            devices = ",".join(str(d) for d in r.get("devices", ())) or "-"
            lines.append(
                f"  {r.get('time', '?')}  uid {r.get('uid', '?')}  {r.get('claim') or '?/?'}  "
                f"reason {r.get('reason', '?')}  devices {devices}  cpus {r.get('cpus') or '-'}"
            )
    return lines


def _api_features(plugin_dir: Path) -> tuple[FeatureRecord | None, str]:
    """The driver's record of missing api features (None: it wrote none), or why it cannot be read."""
    from driver.errors import UntrustedFileError, UntrustedValueError
    from driver.slices.missingfeatures import load_record

    try:
        return load_record(plugin_dir), ""
    except FileNotFoundError:
        return None, ""
    except (UntrustedFileError, UntrustedValueError, OSError) as exc:
        return None, str(exc)


def _api_feature_lines(record: FeatureRecord | None, error: str) -> list[str]:
    from driver.slices.features import feature

    if error:
        return [f"cannot read the driver's record of missing api features: {error}"]
    if record is None:
        return []
    if not record.features:
        return [
            "the apiserver kept every field of this node's slices "
            f"(driver pid {record.pid}, {record.checked_at})"
        ]
    lines = [
        f"API FEATURES MISSING: the apiserver lacks {len(record.features)} feature gate(s) numadra's slices "
        f"use (driver pid {record.pid}, {record.checked_at}; docs/troubleshooting.md)"
    ]
    for cause in record.features:
        how = "refused a slice that needs" if cause.refused else "dropped"
        lines.append(
            f"  {cause.name}: the apiserver {how} {', '.join(cause.fields)} of ResourceSlice {cause.slice} "
            f"(since {cause.since})"
        )
        entry = feature(cause.name)
        if entry is not None:
            lines.append(f"    {entry.effect}")
    return lines


def _api_features_json(record: FeatureRecord | None, error: str) -> dict[str, Any] | None:
    if error:
        return {"error": error}
    if record is None:
        return None
    missing = [c.to_json() for c in record.features]
    return {"checkedAt": record.checked_at, "pid": record.pid, "missing": missing}


def withheld_record(plugin_dir: Path) -> tuple[list[WithheldDevice], str]:
    """The driver's record of devices withheld from its slices (another party owns them), or why
    it cannot be read; none when the driver never wrote one."""
    from driver.errors import UntrustedFileError, UntrustedValueError
    from driver.slices.withheld import load_withheld

    try:
        return load_withheld(plugin_dir), ""
    except FileNotFoundError:
        return [], ""
    except (UntrustedFileError, UntrustedValueError, OSError) as exc:
        return [], str(exc)


def _withheld_lines(devices: list[WithheldDevice], error: str) -> list[str]:
    if error:
        return [f"cannot read the driver's record of withheld devices: {error}"]
    if not devices:
        return []
    lines = [f"WITHHELD: {len(devices)} device(s) not published, another party owns them (docs/deploy.md)"]
    for d in devices:
        what = "DRA driver" if d.reason.value == "dra-driver" else "device plugin"
        lines.append(f"  {d.device}  owned by {what} {d.owner}")
    return lines


def _run(args: argparse.Namespace) -> int:
    from driver.cli.discover import default_node_name
    from driver.kubelet.paths import default_plugin_dir
    from driver.pinning.types import format_cpulist
    from driver.state.journal import read_recoveries

    journal = load_journal(
        args.plugin_dir,
        args.driver_name,
        cdi_dir=args.cdi_dir,
        node_name=args.node_name or default_node_name(),
    )  # JournalError: exit 1
    path = journal.path
    entries = list(journal.entries())
    if args.output in ("svg", "html"):
        from driver.inventory.discovery import discover
        from driver.presentation.picture import overlay_for, picture

        inventory = discover(args.host_root)
        overlay = overlay_for(inventory, entries, host_root=args.host_root)
        sys.stdout.write(picture(inventory, overlay, args.output, title=f"numadra state: {path}"))
        return 0
    recoveries = read_recoveries(path.parent)
    plugin_dir = args.plugin_dir or default_plugin_dir(args.driver_name)
    features = _api_features(plugin_dir)
    withheld, withheld_error = withheld_record(plugin_dir)
    owner_of = {d.device: d for d in withheld}
    rebuilt = {str(r.get("uid")): str(r.get("reason")) for r in recoveries}
    if args.output == "json":
        claims = [e.to_json() for e in entries]
        for claim in claims:
            for key in ("cdiSpecs", "metadataFiles"):  # file contents are long; paths say enough
                claim[key] = [f["path"] for f in claim[key]]
        doc = {
            "journal": str(path),
            "claims": claims,
            "recoveries": recoveries,
            "unjournaled": [
                {"uid": f.uid, "devices": [d.device_name for d in f.entry.devices], "files": list(f.paths)}
                for f in journal.unjournaled
            ],
            "apiFeatures": _api_features_json(*features),
            "withheld": {"error": withheld_error}
            if withheld_error
            else [{"device": d.device, "reason": d.reason.value, "owner": d.owner} for d in withheld],
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    lines = [f"{len(entries)} prepared claim(s) ({path})" if entries else f"no prepared claims ({path})"]
    for e in entries:
        origin = f"  (rebuilt from evidence: {rebuilt[e.uid]})" if e.uid in rebuilt else ""
        lines.append(f"{e.namespace or '?'}/{e.name or '?'}  uid {e.uid}{origin}")
        for d in e.devices:
            requests = ",".join(d.request_names) or "*"
            admin = "  (admin access)" if d.device_name in e.admin_devices else ""
            owned = owner_of.get(d.device_name)
            # prepared before another party took it: kept, but no new claim gets it
            held = f"  (withheld now: {owned.owner} owns it)" if owned else ""
            lines.append(
                f"  {d.pool_name}/{d.device_name}  requests {requests}  "
                f"cdi {' '.join(d.cdi_device_ids) or '-'}{admin}{held}"
            )
        for a in e.pinning.assignments if e.pinning else ():
            lines.append(
                f"  request {a.request}: cpuset {format_cpulist(a.cpus) or '-'} "
                f"memset {format_cpulist(a.mems) or '-'} ({a.mode.value})"
            )
    lines += _recovery_lines(recoveries, journal.unjournaled)
    lines += _api_feature_lines(*features)
    lines += _withheld_lines(withheld, withheld_error)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
