"""The ``numadra`` console command: a thin argparse front over the subcommand modules.

Each subcommand lives in its own module under ``driver.cli`` and exposes
``register(subparsers) -> None``, which adds its parser and sets ``handler`` (a callable taking the
parsed namespace and returning the exit code). Exit codes: 0 ok, 2 bad usage/config (one-line
reason on stderr), 1 runtime failure.

Start-up runs without the cyclic garbage collector: importing what ``numadra run`` needs makes
tens of thousands of objects that live as long as the process, and the collector, triggered by
allocation counts, would walk all of them again and again before the registration socket
appears, and again while the kubernetes client is imported after it (bench/startup.py times the
start).
:func:`main` turns it off first; ``run`` turns it on when its start-up is over
(:func:`driver.cli.runloop.serve`, after freezing the start-up heap), every other command before its
handler runs.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from driver.errors import ConfigError, DriverError

__all__ = ["EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

#: subcommand modules, in the order ``numadra --help`` lists them
SUBCOMMANDS: tuple[str, ...] = ("version", "discover", "run", "hook", "explain", "state", "health")

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"numadra: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every subcommand registered."""
    parser = _Parser(prog="numadra", description="NUMA-aligned DRA driver for GPUs, NICs, CPUs and memory")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"driver.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    collecting = gc.isenabled()
    gc.disable()  # until the start-up is over (module docstring)
    try:
        return _dispatch(argv, collecting)
    finally:
        if collecting:  # a caller in this process (tests) gets its collector back
            gc.enable()


def _dispatch(argv: Sequence[str] | None, collecting: bool) -> int:
    import structlog  # here, not at import: after the collector is off

    from driver.log import configure_logging

    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    if collecting and args.command != "run":
        gc.enable()
    # commands that print data: warnings (a skipped GPU) go to stderr, never into the data; `run`
    # and `hook` configure their own logging. The caller's configuration is restored afterwards.
    configured, previous = structlog.is_configured(), structlog.get_config()
    configure_logging("console", logging.WARNING)
    try:
        return handler(args)
    except ConfigError as exc:
        sys.stderr.write(f"numadra: {exc}\n")
        return EXIT_USAGE
    except DriverError as exc:
        sys.stderr.write(f"numadra: {exc}\n")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_FAILURE
    finally:
        if configured:
            structlog.configure(**previous)
        else:
            structlog.reset_defaults()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
