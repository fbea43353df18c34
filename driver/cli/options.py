"""The options of the ``numadra`` subcommands, each declared once, and the parent parsers made of them.

An :class:`Option` holds a flag's help, its default (from :mod:`driver.defaults`, as the text a
flag or an environment variable would carry) and, for ``numadra run``, its environment variables.
The options several subcommands take are in :data:`SHARED`; a subcommand takes the ones it needs
through :func:`parent` (``add_parser(..., parents=[parent("--host-root", ...)])``), so every
subcommand shows the same help for the same flag. ``numadra run`` declares its own options
with the same type and reads every option from its environment variable too (``with_env``): its
parser leaves a flag that was not given at None, and :func:`driver.cli.run.config_from_args`
falls back to the variable, then to the default.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from driver import defaults

__all__ = ["SHARED", "Option", "env_name", "parent"]


def env_name(flag: str) -> str:
    """``NUMADRA_<FLAG>``: the environment variable of a ``run`` option without a documented name."""
    return "NUMADRA_" + flag.removeprefix("--").replace("-", "_").upper()


@dataclass(frozen=True, slots=True)
class Option:
    """One option: its flag, help, default and environment variables (the first set one counts)."""

    flag: str
    help: str
    default: str = ""  # "" where the default is derived (described by the help) or empty
    env: tuple[str, ...] = ()  # () -> (NUMADRA_<FLAG>,)
    choices: tuple[str, ...] = ()
    boolean: bool = False
    path: bool = False  # argparse hands a Path (run converts every option itself)
    metavar: str = ""

    @property
    def dest(self) -> str:
        """The argparse attribute name."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def variables(self) -> tuple[str, ...]:
        """The environment variables ``run`` reads for it, in order."""
        return self.env or (env_name(self.flag),)

    @property
    def where(self) -> str:
        """How an error names it: the flag and its variables."""
        return f"{self.flag} (env {', '.join(self.variables)})"

    def add_to(self, parser: argparse.ArgumentParser, *, with_env: bool = False) -> None:
        """Declare it on ``parser``; ``with_env``: not given means None, and the help names the variables."""
        shown = f"{self.help} [env {', '.join(self.variables)}]" if with_env else self.help
        if self.boolean:
            default = None if with_env else self.default == "true"
            parser.add_argument(
                self.flag, dest=self.dest, action=argparse.BooleanOptionalAction, default=default, help=shown
            )
            return
        if self.default:
            shown = f"{shown} (default {self.default})"
        metavar = self.metavar or (f"{{{','.join(self.choices)}}}" if self.choices else self.dest.upper())
        if with_env:  # run checks and converts the text itself, the environment's alike
            parser.add_argument(self.flag, dest=self.dest, default=None, metavar=metavar, help=shown)
            return
        parser.add_argument(
            self.flag,
            dest=self.dest,
            default=self.default or None,
            choices=self.choices or None,
            type=Path if self.path else str,
            metavar=metavar,
            help=shown,
        )


def _bool(value: bool) -> str:
    return "true" if value else "false"


#: the options more than one subcommand takes, by flag
SHARED: dict[str, Option] = {
    o.flag: o
    for o in (
        Option(
            "--node-name", "node and pool name (default: $NODE_NAME, else the host name)", env=("NODE_NAME",)
        ),
        Option("--driver-name", "DRA driver name", defaults.DRIVER_NAME),
        Option("--host-root", "where the host's /sys, /proc and /dev are mounted", str(defaults.HOST_ROOT)),
        Option(
            "--plugin-dir",
            f"the driver's sockets, journal and metadata (default {defaults.PLUGINS_DIR}/<driver>)",
            path=True,
        ),
        Option(
            "--cdi-dir", "where the driver writes the claims' CDI specs", str(defaults.CDI_DIR), path=True
        ),
        Option(
            "--kubeconfig",
            "kubeconfig file (default: the in-cluster service account)",
            env=(env_name("--kubeconfig"), "KUBECONFIG"),
        ),
        Option(
            "--reserved-cpus",
            'CPUs never handed out and kept out of the "cpus" capacity, kernel list format ("0-1,64")',
            metavar="LIST",
        ),
        Option(
            "--isolated-cpus",
            "whether the kernel's isolcpus= CPUs count in the cpus capacity and are handed out",
            defaults.ISOLATED_CPUS,
            choices=("include", "exclude"),
        ),
        Option(
            "--node-allocatable",
            "publish nodeAllocatableResources on cpu devices (KEP-5517, alpha)",
            _bool(defaults.NODE_ALLOCATABLE),
            boolean=True,
        ),
        Option(
            "--numa-node-list",
            "publish resource.kubernetes.io/numaNode as the KEP-6072 list: the node, then the "
            "same-socket nodes at the minimum SLIT distance (needs the DRAListTypeAttributes gate)",
            _bool(defaults.NUMA_NODE_LIST),
            boolean=True,
        ),
        Option(
            "--nvidia-driver-root",
            "host path of the NVIDIA driver's files, mounted into CUDA containers without the "
            "toolkit's CDI spec",
            defaults.NVIDIA_DRIVER_ROOT,
        ),
    )
}


def parent(*flags: str, with_env: bool = False) -> argparse.ArgumentParser:
    """A parent parser holding these shared options, in this order (KeyError for an unknown one)."""
    parser = argparse.ArgumentParser(add_help=False)
    for flag in flags:
        SHARED[flag].add_to(parser, with_env=with_env)
    return parser
