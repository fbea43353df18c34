"""``numadra explain``: which of this node's devices could serve each request of a claim, and why not.

The claim comes from a file (``-f claim.yaml``, a ResourceClaim or ResourceClaimTemplate) or from
the apiserver (``--namespace/--name``, kubeconfig or in-cluster). The devices come from discovery
of ``--host-root`` (what this node publishes) or from ``--slices`` (``numadra discover -o json``
output, or ``kubectl get resourceslices -o yaml``). Prepared claims are read from the journal in
``--plugin-dir`` to account for devices and CPUs already in use, and to show the claim's own
devices, CDI IDs, cpuset and memset when it is prepared here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from driver.cli.options import parent
from driver.errors import ConfigError, JournalError, UntrustedValueError
from driver.untrusted.files import MAX_USER_FILE_BYTES, read_file_text
from driver.untrusted.yamldoc import load_yaml_documents

__all__ = ["load_claim_file", "load_device_classes", "register"]

_CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def register(sub: Any) -> None:
    """Add the ``explain`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "explain",
        parents=[parent("--kubeconfig", "--host-root", "--node-name", "--driver-name", "--plugin-dir")],
        help="explain which devices of this node can serve a claim's requests, and why others cannot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("claim (one of)")
    src.add_argument(
        "-f", "--filename", type=Path, help="ResourceClaim or ResourceClaimTemplate file (YAML/JSON)"
    )
    src.add_argument("-n", "--namespace", help="namespace of the claim to GET from the apiserver")
    src.add_argument("--name", help="claim name (with --namespace: from the apiserver; with -f: pick it)")
    devs = p.add_argument_group("devices (default: discover --host-root)")
    devs.add_argument("--slices", type=Path, help="ResourceSlices file (numadra discover -o json output)")
    p.add_argument("--no-journal", action="store_true", help="ignore prepared claims (as on an empty node)")
    p.add_argument(
        "--device-classes",
        type=Path,
        default=None,
        help="more DeviceClass objects (YAML/JSON, e.g. kubectl get deviceclasses -o yaml)",
    )
    p.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format (default text)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list every device and every reason")
    p.set_defaults(handler=_run)


def _documents(path: Path) -> list[Any]:
    try:
        text = read_file_text(path, max_bytes=MAX_USER_FILE_BYTES, follow_symlinks=True)  # the user's path
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from exc
    try:  # JSON is YAML too; the bound on nodes is the bytes' (no aliases expand them)
        docs = load_yaml_documents(text, what=str(path), max_nodes=MAX_USER_FILE_BYTES)
    except UntrustedValueError as exc:
        raise ConfigError(f"{exc} (YAML or JSON expected)") from exc
    out: list[Any] = []
    for doc in docs:
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ConfigError(f"{path}: the {kind}'s items must be a list")
            out.extend(items)
        elif doc is not None:
            out.append(doc)
    return out


def load_claim_file(path: Path, name: str | None = None) -> dict[str, Any]:
    """The (named) ResourceClaim of a file; a ResourceClaimTemplate is read as the claim it makes."""
    claims = [d for d in _documents(path) if isinstance(d, Mapping) and d.get("kind") in _CLAIM_KINDS]
    if name is not None:
        claims = [c for c in claims if (c.get("metadata") or {}).get("name") == name]
    if not claims:
        which = f" named {name!r}" if name else ""
        raise ConfigError(f"{path}: no ResourceClaim or ResourceClaimTemplate{which}")
    if len(claims) > 1:
        names = ", ".join(str((c.get("metadata") or {}).get("name")) for c in claims)
        raise ConfigError(f"{path}: several claims ({names}); pick one with --name")
    claim = dict(claims[0])
    if claim["kind"] == "ResourceClaimTemplate":
        meta = claim.get("metadata") or {}
        spec = (claim.get("spec") or {}).get("spec") or {}
        claim = {
            "kind": "ResourceClaim",
            "metadata": {
                "namespace": meta.get("namespace", ""),
                "name": f"{meta.get('name', '')} (template)",
            },
            "spec": spec,
        }
    return claim


def load_device_classes(path: Path) -> list[Mapping[str, Any]]:
    """The DeviceClass objects of a file."""
    return [d for d in _documents(path) if isinstance(d, Mapping) and d.get("kind") == "DeviceClass"]


def _claim(args: argparse.Namespace) -> dict[str, Any]:
    if args.filename is not None:
        if args.namespace:
            raise ConfigError("give either -f FILE or --namespace/--name, not both")
        return load_claim_file(args.filename, args.name)
    if not (args.namespace and args.name):
        raise ConfigError("which claim? give -f FILE, or --namespace NS --name NAME")
    from driver.kube.client import KubeClient

    return dict(KubeClient(args.kubeconfig).get_resource_claim(args.namespace, args.name))


def _run(args: argparse.Namespace) -> int:
    from driver.cli.discover import default_node_name
    from driver.explain.analyze import DeviceClass, default_device_classes, explain_claim, usage_from_journal
    from driver.explain.devices import devices_from_inventory, load_slices_file
    from driver.explain.render import to_json, to_text

    claim = _claim(args)
    cpu_numa: dict[int, int] | None = None
    if args.slices is not None:
        devices = load_slices_file(args.slices, args.driver_name, args.node_name)
    else:
        from driver.inventory.discovery import discover

        inventory = discover(args.host_root, use_nvml=False)
        node = args.node_name or default_node_name()
        devices = devices_from_inventory(inventory, node, args.driver_name)
        cpu_numa = {c.id: c.numa_node for c in inventory.cpus}
    classes = default_device_classes(args.driver_name)
    if args.device_classes is not None:
        for obj in load_device_classes(args.device_classes):
            cls = DeviceClass.from_object(obj)
            classes[cls.name] = cls
    uid = str((claim.get("metadata") or {}).get("uid", ""))
    entries = [] if args.no_journal else _journal_entries(args.plugin_dir, args.driver_name)
    usage = usage_from_journal(entries, devices, exclude_uid=uid, cpu_numa=cpu_numa)
    if args.slices is None:  # this host's devices: name those the driver withholds, and their owner
        usage = replace(usage, withheld=_withheld_owners(args.plugin_dir, args.driver_name))
    own = next((e for e in entries if uid and e.uid == uid), None)
    explanation = explain_claim(
        claim, devices, driver_name=args.driver_name, classes=classes, usage=usage, journal_entry=own
    )
    if args.output == "json":
        sys.stdout.write(to_json(explanation))
    else:
        sys.stdout.write(to_text(explanation, verbose=args.verbose))
    return 0


def _withheld_owners(plugin_dir: Path | None, driver_name: str) -> dict[str, str]:
    """Device -> its owner, from the running driver's record; an unreadable one is a warning."""
    from driver.cli.state import withheld_record
    from driver.kubelet.paths import default_plugin_dir
    from driver.slices.ownership import Owner

    devices, error = withheld_record(plugin_dir or default_plugin_dir(driver_name))
    if error:
        sys.stderr.write(f"numadra: warning: withheld devices not taken into account: {error}\n")
    return {d.device: Owner(d.reason, d.owner).describe() for d in devices}


def _journal_entries(plugin_dir: Path | None, driver_name: str) -> list[Any]:
    """Prepared claims; a missing journal is none, an unreadable one a warning (explain still works)."""
    from driver.cli.state import load_journal

    try:
        journal = load_journal(plugin_dir, driver_name)
    except JournalError as exc:
        sys.stderr.write(f"numadra: warning: prepared claims not taken into account: {exc}\n")
        return []
    return list(journal.entries())
