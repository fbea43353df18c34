"""What the JSON text of one prepared claim costs to make, and what msgspec would make it in.

Why this exists: a prepare writes two documents it encodes itself, the claim's journal record
(:meth:`~driver.state.entry.JournalEntry.json_text`, which carries the spec and metadata files
as JSON strings) and its CDI spec (:func:`cdi.spec_text`). Both are hand-written encoders, and
swapping them for msgspec (a C library, not a dependency of numadra) is the one speed-up of the
encoding that has not been tried in the driver. This script prices it before anyone does: it
prepares the claim ``bench/prepare.py``'s numadra child prepares (a NIC VF and a 2-CPU share on
a generated DGX-class host tree with the NVIDIA toolkit's spec), then times

* ``ours``: each encoder on that claim's objects, as a prepare calls it (the spec's checks,
  which a prepare runs whichever encoder writes the text, apart);
* ``msgspec`` (only when ``import msgspec`` works: ``pip install msgspec``): msgspec's encoder
  on the same documents as plain JSON objects, which is the least it would cost; the building of
  those objects is left out, so the saving it shows is an upper bound. Beside it, one frozen
  dataclass of the journal (``StoredFile``) made against a frozen msgspec ``Struct`` of the same
  fields: what carrying a claim's parts in Structs would save an object.

Prints one JSON object; times in microseconds, each the median of ``--repeat`` runs of
``--number`` calls, on a warm core (``bench/cold_core.py`` shows what a busy node adds).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import timeit
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import claimed_vfs, in_memory_driver, nic_cpu_claim, nvidia_node  # noqa: E402

DRIVER = "numadra.dev"
NODE = "bench-node"


def _median_us(call: Callable[[], object], number: int, repeat: int) -> float:
    runs = timeit.repeat(call, number=number, repeat=repeat)
    return round(statistics.median(runs) / number * 1e6, 2)


def _prepared_entry(root: Path) -> Any:
    """The journal entry of the bench's claim, prepared for real on a generated host tree."""
    from driver.inventory.discovery import discover
    from driver.kubelet import claims as claim_layer
    from driver.log import configure_logging
    from driver.plugin import ClaimRef
    from harness.topologies import TOPOLOGIES

    configure_logging("json", logging.WARNING)
    nvidia_node(root / "host", TOPOLOGIES["dgx"], "nvidia")
    inventory = discover(root / "host", use_nvml=False)
    (vf, numa), *_ = claimed_vfs(inventory, 1)
    uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, "encoders"))
    claims = {("bench", "claim-0"): nic_cpu_claim(uid, "claim-0", vf, numa, driver=DRIVER, node=NODE)}
    driver, fetcher = in_memory_driver(
        inventory,
        claims,
        driver=DRIVER,
        node=NODE,
        cdi_dir=root / "cdi",
        plugin_dir=root / "plugin",
        host_root=root / "host",
    )
    try:
        result = claim_layer.prepare(driver, fetcher, None, [ClaimRef("bench", "claim-0", uid)])
        if result[uid].error:
            raise SystemExit(f"the bench claim failed: {result[uid].error}")
        (entry,) = driver.prepared_claims()
        return entry
    finally:
        driver.close()
        fetcher.close()


def measure(number: int, repeat: int) -> dict[str, Any]:
    """The figures (see the module docstring)."""
    from cdi import spec_from_json, spec_text
    from cdi.spec import validate_spec
    from driver.state.entry import StoredFile
    from driver.untrusted.values import loads_json

    root = Path(tempfile.mkdtemp(prefix="numadra-encoders-"))
    try:
        entry = _prepared_entry(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    (stored,) = entry.cdi_specs
    spec = spec_from_json(loads_json(stored.content, what=stored.path))
    if spec_text(spec) != stored.content:
        raise SystemExit("the spec read back does not encode to the text written: not the same document")
    ours = {
        "journal_record": _median_us(entry.json_text, number, repeat),
        "cdi_spec": _median_us(spec.json_text, number, repeat),
    }
    out: dict[str, Any] = {
        "bytes": {"journal_record": len(entry.json_text()), "cdi_spec": len(stored.content)},
        "ours_us": ours,
        "ours_total_us": round(sum(ours.values()), 2),
        # checks, not encoding: a prepare pays them whichever encoder writes the text
        "cdi_spec_validation_us": _median_us(lambda: validate_spec(spec), number, repeat),
    }
    try:
        import msgspec  # type: ignore[import-not-found]
    except ImportError:
        out["msgspec_us"] = None
        out["msgspec"] = "not installed (pip install msgspec to price it)"
        return out
    encode = msgspec.json.Encoder().encode
    record, spec_doc = json.loads(entry.json_text()), json.loads(stored.content)
    theirs = {
        "journal_record": _median_us(lambda: encode(record), number, repeat),
        "cdi_spec": _median_us(lambda: encode(spec_doc), number, repeat),
    }
    out["msgspec_us"] = theirs
    out["msgspec"] = msgspec.__version__
    out["saving_at_most_us"] = round(sum(ours.values()) - sum(theirs.values()), 2)

    # StoredFile's fields as a frozen msgspec Struct
    stored_struct = msgspec.defstruct(
        "StoredStruct", [("path", str), ("content", str), ("mode", int, 0o644)], frozen=True
    )
    path, content = stored.path, stored.content
    out["one_frozen_object_us"] = {
        "dataclass": _median_us(lambda: StoredFile(path, content, 0o644), number, repeat),
        "msgspec_struct": _median_us(lambda: stored_struct(path, content, 0o644), number, repeat),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per timed run")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs (the median is kept)")
    args = parser.parse_args()
    print(json.dumps(measure(args.number, args.repeat), indent=1))


if __name__ == "__main__":
    main()
