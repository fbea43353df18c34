"""What the NVIDIA user space adds to a prepare: one NVIDIA GPU claim, three ways, in one run.

On a generated host tree with 8 NVIDIA GPUs and a stand-in driver (harness/nvidia.py), the
real ``ClaimsDriver`` prepares and unprepares one-GPU claims (files on ``--base``, /dev/shm by
default) with:

* ``off``: no host edits (the claim's spec without any NVIDIA user space);
* ``driver_root``: the driver root's files mounted by numadra's spec (the driver root's lookup is
  cached; the toolkit dirs are still listed per prepare);
* ``toolkit``: a toolkit spec in the CDI dir, checked against the host per prepare (every mount
  source, node and hook of the device resolved in the host root).

The three run interleaved, ``--rounds`` rounds of ``--claims`` claims each; the figure is each
way's median prepare time and its ratio to ``off`` measured in the same run (only ratios mean
anything on a shared machine). Needs root (the tree's device nodes are character devices).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from driver.claims import ClaimsDriver, claims_journal  # noqa: E402 (needs REPO on sys.path)
from driver.claims.hostedits import HostEdits  # noqa: E402
from driver.inventory.discovery import discover  # noqa: E402
from driver.inventory.model import Inventory  # noqa: E402
from driver.plugin import Claim, ClaimRef  # noqa: E402
from harness.hostspec import GpuSpec, Topology  # noqa: E402
from harness.hosttree import write_host_tree  # noqa: E402
from harness.nvidia import (  # noqa: E402
    NvidiaDriver,
    ToolkitGpu,
    make_char_devices,
    toolkit_spec,
    write_nvidia_driver,
    write_toolkit_spec,
)

WAYS = ("off", "driver_root", "toolkit")
UUIDS = [f"GPU-{k:08x}-0000-4000-8000-000000000000" for k in range(8)]
NODES = [*(f"/dev/nvidia{k}" for k in range(8)), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def host(base: Path) -> tuple[Path, Inventory]:
    topo = Topology(
        name="bench",
        gpus=tuple(
            GpuSpec(bus_id=f"0000:{0x17 + k:02x}:00.0", nvidia_minor=k, nvidia_uuid=UUIDS[k])
            for k in range(8)
        ),
    )
    tree = write_host_tree(base / "tree", topo)
    write_nvidia_driver(tree, NvidiaDriver())
    make_char_devices(tree, NODES)
    hook = tree / "usr/bin/nvidia-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    return tree, discover(tree, use_nvml=False)


def claim(uid: str, device: str) -> dict[str, Any]:
    result = {"request": "gpu", "driver": "numadra.dev", "pool": "node", "device": device}
    return {
        "metadata": {"namespace": "bench", "name": f"c-{uid}", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}},
        "status": {"allocation": {"devices": {"results": [result], "config": []}}},
    }


def driver(way: str, base: Path, tree: Path, inventory: Inventory) -> ClaimsDriver:
    cdi = base / way / "cdi"
    cdi.mkdir(parents=True)
    if way == "toolkit":
        gpus = [ToolkitGpu(k, UUIDS[k], k) for k in range(8)]
        write_toolkit_spec(cdi / "nvidia.yaml", toolkit_spec(gpus, NvidiaDriver()))
    edits = None
    if way != "off":
        edits = HostEdits(
            host_root=str(tree), driver_root="/", cdi_dir=str(cdi), claim_kind="numadra.dev/claim"
        )
    return ClaimsDriver(
        driver_name="numadra.dev",
        node_name="node",
        inventory=lambda: inventory,
        cdi_dir=cdi,
        plugin_dir=base / way / "plugin",
        journal=claims_journal(
            cdi_dir=cdi, plugin_dir=base / way / "plugin", driver_name="numadra.dev", pool="node"
        ),
        host_edits=edits,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--base", default="/dev/shm")
    args = parser.parse_args()
    import structlog

    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())  # no log output in the figures
    base = Path(tempfile.mkdtemp(prefix="numadra-bench-gpu-", dir=args.base))
    try:
        tree, inventory = host(base)
        drivers = {way: driver(way, base, tree, inventory) for way in WAYS}
        device = inventory.gpus[0].name
        samples: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):
            for way in WAYS:
                for _ in range(args.claims):
                    uid = str(uuid.uuid4())
                    ref = ClaimRef("bench", f"c-{uid}", uid)
                    t0 = time.perf_counter()
                    out = drivers[way].prepare_claims([Claim(ref, claim(uid, device))])
                    samples[way].append(time.perf_counter() - t0)
                    assert out[uid].ok, out[uid].error
                    drivers[way].unprepare_claims([ref])
        for d in drivers.values():
            d.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    median = {way: statistics.median(samples[way]) * 1e6 for way in WAYS}
    print(
        json.dumps(
            {
                "claims_per_way": args.rounds * args.claims,
                "median_prepare_us": {way: round(v) for way, v in median.items()},
                "ratio_to_off": {way: round(v / median["off"], 2) for way, v in median.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
