"""``numadra health clear <device>``: tell the running driver that a device with a sticky fault was repaired.

Writes a request file into the driver's plugin dir (see :mod:`driver.health.clear` for its format
and for what the driver checks before it honours it); the driver consumes it at its next health
poll and logs the clear, or why it refused it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from driver.cli.options import parent

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the ``health`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "health", help="device health actions (clear a sticky fatal fault)", description=__doc__
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    clear = verbs.add_parser(
        "clear",
        parents=[parent("--driver-name", "--plugin-dir")],
        help="clear the sticky fatal fault of a repaired device",
        description="Ask the running driver to clear a device's sticky fatal fault (AER, critical Xid).",
    )
    clear.add_argument("device", help="published device name, e.g. gpu-0000-18-00-0")
    clear.add_argument("--note", default="", help="why (kept in the driver's log), at most 256 characters")
    clear.set_defaults(handler=_clear)


def _clear(args: argparse.Namespace) -> int:
    from driver.errors import ConfigError
    from driver.health.clear import write_clear_request
    from driver.kubelet.paths import default_plugin_dir

    plugin_dir = args.plugin_dir or default_plugin_dir(args.driver_name)
    if not Path(plugin_dir).is_dir():
        raise ConfigError(f"--plugin-dir {plugin_dir} is not a directory (is the driver running here?)")
    path = write_clear_request(plugin_dir, args.device, args.note, time.time())
    sys.stdout.write(
        f"requested a clear of {args.device}: {path}\n"
        "the driver takes it at its next health poll and logs the result\n"
    )
    return 0
