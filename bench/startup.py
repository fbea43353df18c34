"""Start-to-registered time and steady RSS of the real ``numadra run`` process, beside the floor.

``bench/prepare.py`` measures the prepare path in a child that wires only that path; this one
starts the whole DaemonSet entrypoint (``python -m driver.cli run``: inventory, journal, claims,
kubelet server, health monitor, publisher, metrics server) on a generated DGX-class host tree,
against the fake apiserver on loopback, and plays the kubelet with the test client:

* ``start_to_registered_s``: from spawn until the kubelet client's registration (GetInfo polled
  as the kubelet does when the socket appears, then NotifyRegistrationStatus) succeeded; median
  and max over ``--starts`` cold starts;
* ``start_to_published_s``: from spawn until the slices are in the apiserver (first start);
* ``steady_rss_mib``: VmRSS of the process after ``--prepares`` prepare/unprepare pairs (each a
  NIC VF and a 2-CPU share), once the process has settled;
* ``cpu_s_at_registered``: the CPU seconds (all threads) the process had used when registered:
  what the start costs, less bent by a loaded machine than the wall time (10 ms ticks).

The floor, measured in the same rounds (each round starts every program once, in turn), so the
load of a shared machine hits them alike:

* ``floor_python_s``: spawn until exit of ``python -c pass`` (the interpreter and ``site``);
* ``floor_import_grpc_s``: the same for ``python -c "import grpc"``;
* ``floor_plugin_registered_s``: spawn until registered of bench/_floorplugin.py, a plugin that
  only imports grpc and the v1 DRA and registration stubs and answers the registration: what any
  Python plugin pays before its own work (``floor_plugin_cpu_s_at_registered``: its CPU).
  ``registered_vs_floor`` divides numadra's by it.

Bytecode: the image installs numadra with pip, which compiles every module to ``.pyc``, so a
node's process never compiles source. A source tree under ``PYTHONDONTWRITEBYTECODE=1`` (as the
shells of the 2-core CI machine set it) compiles every module of ``driver`` at every start: 0.08
to 0.09 s of CPU more there when idle, 0.3 s at a load of 4. So the children get a bytecode cache
of their own (``PYTHONPYCACHEPREFIX`` in the run's temp dir, filled by one untimed start of each
program); ``--no-bytecode`` measures the source tree as it is instead. One difference stays: the
dev venv holds ``rich`` (import-linter needs it), which structlog imports when present, about 60
ms that the image, without it, does not spend. To measure the image's interpreter and venv, run
this file inside the image (the command is in bench/README.md).

Targets (issue 15): registered <= 0.1 s, steady RSS <= 64 MiB. Prints one JSON object;
``measure()`` is what ``bench/prepare.py`` imports to report the same figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import nic_cpu_claim, rss_mib  # noqa: E402 (needs REPO on sys.path)

DRIVER = "numadra.dev"
NODE = "bench-run"


def _argv(root: Path, kubeconfig: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "driver.cli",
        "run",
        "--node-name",
        NODE,
        "--host-root",
        str(root / "host"),
        "--kubeconfig",
        kubeconfig,
        "--registrar-dir",
        str(root / "reg"),
        "--plugin-dir",
        str(root / "plugin"),
        "--cdi-dir",
        str(root / "cdi"),
        "--metrics-address",
        "127.0.0.1:0",
        "--log-format",
        "json",
        "--hotplug",
        "off",
    ]


def child_env(pycache: Path | None) -> dict[str, str]:
    """The children's environment: with a bytecode cache of their own, or compiling from source."""
    env = dict(os.environ)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _registered(
    argv: list[str], reg_sock: Path, kubelet: Any, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], float, float, str]:
    """Spawn a plugin; return it, seconds until registered, its CPU seconds then, its DRA endpoint."""
    from harness.kubeletclient import KubeletClient

    assert isinstance(kubelet, KubeletClient)
    reg_sock.unlink(missing_ok=True)
    started = time.monotonic()
    child = subprocess.Popen(  # logs discarded
        argv,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while True:
        if reg_sock.exists():
            try:
                reg = kubelet.register(reg_sock)
                break
            except Exception:  # not answering yet: poll again
                pass
        if child.poll() is not None:
            raise SystemExit(f"{argv[1:4]} exited with {child.returncode}")
        time.sleep(0.002)
    seconds = time.monotonic() - started
    return child, seconds, _cpu_s(child.pid), reg.info.endpoint


def _exited(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn until a short program exited (0 required)."""
    started = time.monotonic()
    subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, check=True)
    return time.monotonic() - started


def _stop(child: subprocess.Popen[bytes]) -> None:
    child.terminate()
    try:
        child.wait(timeout=15)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _floor(root: Path, env: dict[str, str]) -> dict[str, float]:
    """One start of each floor program: seconds each."""
    from harness.kubeletclient import KubeletClient

    reg_sock = root / "floor" / "floor-reg.sock"
    argv = [sys.executable, "-m", "bench._floorplugin", str(reg_sock), str(root / "floor" / "dra.sock")]
    with KubeletClient() as kubelet:
        child, seconds, cpu, _ = _registered(argv, reg_sock, kubelet, env)
        _stop(child)
    return {
        "plugin": seconds,
        "plugin_cpu": cpu,
        "python": _exited([sys.executable, "-c", "pass"], env),
        "grpc": _exited([sys.executable, "-c", "import grpc"], env),
    }


def measure(
    base: str = "/tmp", starts: int = 5, prepares: int = 100, bytecode: bool = True
) -> dict[str, Any]:
    """Run the measurement; the figures as a dict (keys documented in the module docstring)."""
    from driver.inventory.discovery import discover
    from driver.plugin import ClaimRef
    from harness.fakeapiserver import FakeApiServer
    from harness.hosttree import write_host_tree
    from harness.kubeletclient import KubeletClient
    from harness.topologies import TOPOLOGIES

    root = Path(tempfile.mkdtemp(prefix="bs", dir=base))
    env = child_env(root / "pycache" if bytecode else None)
    try:
        for sub in ("reg", "cdi", "plugin", "floor"):
            (root / sub).mkdir()
        write_host_tree(root / "host", TOPOLOGIES["dgx"])
        inventory = discover(root / "host", use_nvml=False)
        vfs = [(nic.name, nic.pci.numa_node) for nic in inventory.nics if nic.pci.numa_node is not None][:32]
        reg_sock = root / "reg" / f"{DRIVER}-reg.sock"
        with FakeApiServer() as api:
            api.put_object(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "bench-uid"}}
            )
            refs = []
            for i, (vf, numa) in enumerate(vfs):
                uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"startup-{i}"))
                api.put_object(nic_cpu_claim(uid, f"claim-{i}", vf, numa, driver=DRIVER, node=NODE))
                refs.append(ClaimRef("bench", f"claim-{i}", uid))

            if bytecode:  # one untimed start of each program fills the cache, as pip did in the image
                with KubeletClient() as kubelet:
                    _stop(_registered(_argv(root, api.kubeconfig_path), reg_sock, kubelet, env)[0])
                _floor(root, env)

            registered: list[float] = []
            floors: dict[str, list[float]] = {"plugin": [], "plugin_cpu": [], "python": [], "grpc": []}
            registered_cpu: list[float] = []
            published_s = float("nan")
            rss_registered = rss_steady = float("nan")
            for attempt in range(starts):
                if attempt % 2:  # numadra first in even rounds, the floor first in odd ones
                    for key, seconds in _floor(root, env).items():
                        floors[key].append(seconds)
                with KubeletClient() as kubelet:
                    child, seconds, cpu, endpoint = _registered(
                        _argv(root, api.kubeconfig_path), reg_sock, kubelet, env
                    )
                    registered.append(seconds)
                    registered_cpu.append(cpu)
                    try:
                        if attempt == 0:
                            rss_registered = rss_mib(child.pid)
                            t0 = time.monotonic() - seconds
                            while not api.objects("ResourceSlice"):
                                time.sleep(0.01)
                            published_s = time.monotonic() - t0
                        if attempt == starts - 1:
                            for i in range(prepares):
                                ref = refs[i % len(refs)]
                                out = kubelet.prepare(endpoint, [ref])
                                if out.claims[ref.uid].error:
                                    raise SystemExit(f"prepare failed: {out.claims[ref.uid].error}")
                                kubelet.unprepare(endpoint, [ref])
                            time.sleep(1.0)  # let background threads (status writes, metrics) settle
                            rss_steady = rss_mib(child.pid)
                    finally:
                        _stop(child)
                if not attempt % 2:
                    for key, seconds in _floor(root, env).items():
                        floors[key].append(seconds)
        median = statistics.median(registered)
        return {
            "starts": starts,
            "bytecode": bytecode,
            "start_to_registered_s_median": round(median, 3),
            "start_to_registered_s_max": round(max(registered), 3),
            "cpu_s_at_registered_median": round(statistics.median(registered_cpu), 3),
            "floor_python_s_median": round(statistics.median(floors["python"]), 3),
            "floor_import_grpc_s_median": round(statistics.median(floors["grpc"]), 3),
            "floor_plugin_registered_s_median": round(statistics.median(floors["plugin"]), 3),
            "floor_plugin_cpu_s_at_registered_median": round(statistics.median(floors["plugin_cpu"]), 3),
            "registered_vs_floor": round(median / statistics.median(floors["plugin"]), 2),
            "start_to_published_s": round(published_s, 3),
            "rss_at_registration_mib": round(rss_registered, 1),
            "prepares_before_rss": prepares,
            "steady_rss_mib": round(rss_steady, 1),
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=5, help="cold starts to time")
    parser.add_argument("--prepares", type=int, default=100, help="prepare/unprepare pairs before the RSS")
    parser.add_argument("--base", default="/tmp", help="where the host tree and kubelet dirs live")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="no bytecode cache for the children: every start compiles the source tree",
    )
    args = parser.parse_args()
    from driver.log import configure_logging

    configure_logging("console", logging.WARNING)  # stdout is for the JSON alone
    print(json.dumps(measure(args.base, args.starts, args.prepares, bytecode=not args.no_bytecode), indent=2))


if __name__ == "__main__":
    main()
