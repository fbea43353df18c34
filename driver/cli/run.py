"""``numadra run``: the DaemonSet entrypoint, as a subcommand: its parser and its exit code.

Its flags and their checks are :mod:`driver.cli.runflags` (the fields of
:class:`driver.config.RunConfig`); what it does once configured, the file limit, signals, the
shutdown pipe and the serve loop, is :mod:`driver.cli.runloop`. The names callers use from here
come from those two modules.
"""

from __future__ import annotations

import argparse
import errno
import logging
from typing import Any

from driver.cli.runflags import OPTIONS, add_flags, config_from_args
from driver.cli.runloop import MIN_OPEN_FILES, Shutdown, Signals, check_open_files, serve
from driver.errors import DriverError

__all__ = [
    "MIN_OPEN_FILES",
    "OPTIONS",
    "Shutdown",
    "Signals",
    "check_open_files",
    "config_from_args",
    "register",
    "serve",
]


def register(sub: Any) -> None:
    """Add the ``run`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run the kubelet plugin (the DaemonSet entrypoint)",
        description="Serve the kubelet (registration, DRA, health), publish ResourceSlices, pin CPUs.",
        epilog="Every flag can also be set by the environment variable shown with it; the flag wins.",
    )
    add_flags(p)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from driver.log import configure_logging

    config = config_from_args(args)
    check_open_files()
    configure_logging(config.log_format, getattr(logging, config.log_level.upper()), cache=True)
    signals = Signals()
    try:
        with signals.installed():
            return serve(config, signals)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):  # the limit reached later, under load
            raise DriverError(f"out of file descriptors: {exc}; raise the open file limit") from exc
        raise
