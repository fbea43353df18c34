"""The grpc experiments the driver starts grpc with (``driver.GRPC_EXPERIMENTS``).

Each check runs in a fresh interpreter: grpc reads ``GRPC_EXPERIMENTS`` once, as it starts, so
what counts is the environment when the first module of the driver is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from driver import GRPC_EXPERIMENTS

_SERVE_ONE_CALL = """
import os, sys
from concurrent.futures import ThreadPoolExecutor
import driver
import grpc
from driver._proto import dra_v1_pb2, dra_v1_pb2_grpc

class Plugin(dra_v1_pb2_grpc.DRAPluginServicer):
    def NodeUnprepareResources(self, request, context):
        return dra_v1_pb2.NodeUnprepareResourcesResponse()

server = grpc.server(ThreadPoolExecutor(max_workers=2), options=[("grpc.so_reuseport", 0)])
dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(Plugin(), server)
server.add_insecure_port("unix://" + sys.argv[1])
server.start()
with grpc.insecure_channel("unix://" + sys.argv[1]) as channel:
    dra_v1_pb2_grpc.DRAPluginStub(channel).NodeUnprepareResources(
        dra_v1_pb2.NodeUnprepareResourcesRequest(), timeout=10
    )
server.stop(0).wait()
print(os.environ["GRPC_EXPERIMENTS"])
"""


def _run(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60, check=True
    )


def _env_without_experiments() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}


def test_importing_the_driver_sets_the_experiments() -> None:
    """Without a setting of the environment's, the driver's is there before grpc is imported."""
    done = _run("import os, driver; print(os.environ['GRPC_EXPERIMENTS'])", _env_without_experiments())
    assert done.stdout.strip() == GRPC_EXPERIMENTS == "-event_engine_listener"


def test_the_environments_own_setting_is_kept() -> None:
    """An operator's ``GRPC_EXPERIMENTS`` wins, even an empty one (grpc's own defaults)."""
    for own in ("", "event_engine_listener"):
        env = {**_env_without_experiments(), "GRPC_EXPERIMENTS": own}
        done = _run("import os, driver; print(repr(os.environ['GRPC_EXPERIMENTS']))", env)
        assert done.stdout.strip() == repr(own)


_UNKNOWN = "unknown experiment"


def test_grpc_knows_the_experiment_and_serves_a_call(tmp_path: Path) -> None:
    """The installed grpc accepts the setting (it names an unknown experiment on stderr and then
    ignores it) and a server under it answers a call over a unix socket.

    The check looks for grpc's own words, not for "experiment" alone: the socket's temp path
    carries this test's name, and grpc logs that path when it tears a connection down."""
    done = _run(_SERVE_ONE_CALL, _env_without_experiments(), str(tmp_path / "dra.sock"))
    assert done.stdout.strip() == GRPC_EXPERIMENTS
    assert _UNKNOWN not in done.stderr.lower(), done.stderr


def test_grpc_names_an_experiment_it_does_not_know(tmp_path: Path) -> None:
    """The words the check above looks for are what this grpc prints for a name it lacks, so that
    check can fail."""
    env = {**_env_without_experiments(), "GRPC_EXPERIMENTS": "-no_such_experiment_here"}
    done = _run(_SERVE_ONE_CALL, env, str(tmp_path / "dra.sock"))
    assert _UNKNOWN in done.stderr.lower() and "no_such_experiment_here" in done.stderr, done.stderr
