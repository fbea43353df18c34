"""``numadra discover``: the ResourceSlices this node would publish, or its topology; needs no cluster."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from driver.cli.options import parent
from driver.config import check_driver_name, check_node_name, default_node_name, device_kinds
from driver.errors import ConfigError
from driver.inventory.cpulist import parse_cpulist

__all__ = ["check_driver_name", "check_node_name", "default_node_name", "register"]


def register(sub: Any) -> None:
    """Add the ``discover`` subcommand."""
    shared = parent(
        "--host-root",
        "--node-name",
        "--driver-name",
        "--reserved-cpus",
        "--isolated-cpus",
        "--devices",
        "--node-allocatable",
        "--aux-cpus",
        "--numa-node-list",
        "--cdi-dir",
        "--nvidia-driver-root",
    )
    p: argparse.ArgumentParser = sub.add_parser(
        "discover",
        parents=[shared],
        help="print this node's devices as ResourceSlices (json/yaml) or as a topology table",
        description="Discover GPUs, NICs, CPUs and memory with their NUMA topology; needs no cluster.",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("json", "yaml", "table", "svg", "html"),
        default="json",
        help="output format (default json); svg/html draw the topology picture",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from driver.inventory.discovery import discover
    from driver.inventory.model import kept_out_cpus
    from driver.pinning.aux import AuxCpus
    from driver.presentation.table import render_table
    from driver.slices.builder import build_slices

    node_name = check_node_name(args.node_name or default_node_name())
    check_driver_name(args.driver_name)
    kinds = device_kinds(args.devices, "--devices")
    try:
        reserved = parse_cpulist(args.reserved_cpus or "")
    except ValueError as exc:
        raise ConfigError(f"--reserved-cpus {args.reserved_cpus!r}: {exc}") from exc
    inventory = discover(args.host_root)
    reserved = kept_out_cpus(inventory, reserved, args.isolated_cpus)
    if args.output == "table":
        userspace = None
        if any(g.vendor == "nvidia" for g in inventory.gpus):
            from driver.claims.hostedits import HostEdits
            from driver.claims.render import claim_cdi_kind

            edits = HostEdits(
                host_root=str(args.host_root),
                driver_root=args.nvidia_driver_root,
                cdi_dir=str(args.cdi_dir),
                claim_kind=claim_cdi_kind(args.driver_name),
            )
            userspace = edits.choose(inventory.gpus)
        sys.stdout.write(render_table(inventory, reserved_cpus=reserved, userspace=userspace))
        return 0
    if args.output in ("svg", "html"):
        from driver.presentation.picture import overlay_for, picture

        overlay = overlay_for(inventory, host_root=args.host_root, reserved_cpus=reserved)
        sys.stdout.write(picture(inventory, overlay, args.output, title=f"numadra discover: {node_name}"))
        return 0
    slices = build_slices(
        inventory,
        node_name=node_name,
        driver_name=args.driver_name,
        reserved_cpus=reserved,
        node_allocatable=args.node_allocatable,
        numa_node_list=args.numa_node_list,
        kinds=kinds,
        aux_cpus=AuxCpus.parse(args.aux_cpus or ""),
    )
    doc = {"apiVersion": "v1", "kind": "List", "items": slices}
    if args.output == "json":
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return 0
