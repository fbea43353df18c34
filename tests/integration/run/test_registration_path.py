"""What ``numadra run`` loads and does before its registration socket appears (issue 15).

The start-to-registered time is measured in bench/startup.py, never asserted here; these tests
keep the causes of a slow start off the registration path instead: a library imported only after
the kubelet registered us (the kubernetes client alone is 0.2 s of CPU), and the cyclic garbage
collector, off until the start-up is over. The entry point is the real one (``driver.cli.main``)
in a fresh interpreter, stopped by SIGTERM as soon as the socket appears.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.integration.run.conftest import NODE, REPO, RunNode

#: libraries of the background start (publisher, metrics, hot-plug) and of nothing before it
AFTER_REGISTRATION = frozenset(
    {"kubernetes", "prometheus_client", "yaml", "pyudev", "urllib3", "pydantic", "requests", "websocket"}
)
#: our modules of the background start (driver.app.build_background)
BACKGROUND_MODULES = frozenset(
    {
        "driver.slices.builder",
        "driver.slices.publisher",
        "driver.claims.status",
        "driver.observability.metrics",
        "driver.observability.server",
        "driver.observability.updater",
        "driver.inventory.watch",
        "driver.pinning.nri",
    }
)

_CHILD = """
import gc, json, os, signal, sys, threading, time

collections = []
gc.callbacks.append(lambda phase, info: collections.append(info["generation"]) if phase == "stop" else None)
from driver.cli import main

argv, socket = json.loads(sys.argv[1]), sys.argv[2]
before = len(collections)
seen = {}

def watch():
    while not os.path.exists(socket):
        time.sleep(0.001)
    seen["modules"] = sorted(sys.modules)
    seen["collections"] = collections[before:]
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=watch, daemon=True).start()
seen["exit"] = main(argv)
print(json.dumps(seen))
"""


def _until_registration_socket(node: RunNode) -> dict[str, Any]:
    argv = ["run", "--node-name", NODE, "--log-format", "json", *node.argv()[4:]]
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(argv), str(node.registration_socket)],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["exit"] == 0, out.stderr[-3000:]
    return seen


def test_the_registration_path_imports_no_background_library(node: RunNode) -> None:
    """When the registration socket appears, neither the kubernetes client nor prometheus, yaml,
    udev or our publisher, status writer and metrics modules are loaded: they come after."""
    modules = set(_until_registration_socket(node)["modules"])
    assert "driver.kubelet.server" in modules  # the snapshot is of the right moment
    assert {m.split(".")[0] for m in modules} & AFTER_REGISTRATION == set()
    assert modules & BACKGROUND_MODULES == set()


def test_no_garbage_collection_before_the_registration_socket(node: RunNode) -> None:
    """The collector is off from main() until the start-up is over: no collection walks the
    start-up objects before the kubelet can register us (each full walk of them is ~25 ms)."""
    assert _until_registration_socket(node)["collections"] == []
