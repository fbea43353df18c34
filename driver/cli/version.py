"""``numadra version``: print the version (and Python/grpc versions with ``-v``)."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from driver import DEFAULT_DRIVER_NAME, __version__

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the ``version`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser("version", help="print the numadra version")
    p.add_argument("-v", "--verbose", action="store_true", help="also print Python and library versions")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    print(f"numadra {__version__}")
    if args.verbose:
        from importlib.metadata import version

        print(f"python {platform.python_version()}")
        for dist in ("grpcio", "protobuf", "kubernetes", "structlog"):
            print(f"{dist} {version(dist)}")
        print(f"default driver name {DEFAULT_DRIVER_NAME}")
    return 0
