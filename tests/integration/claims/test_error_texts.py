"""Per-claim error texts name the claim, the file and the cause (issue 13).

Before: a full disk gave "cannot write ?: No space left on device" (``os.write`` raises without a
file name) and a shareID that makes an invalid CDI device name gave "internal error:
CdiNameError(...)".
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.claims._world import GPU0, World, claim, cpu_result, result

pytestmark = pytest.mark.fault

UID = "5f2c8a9e-0d1b-4c3a-9e8f-0000000000e1"


@contextlib.contextmanager
def _tiny_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real, small file system (root only; CI runs as root)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=False)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_names_the_claim_the_file_and_the_cause(world: World) -> None:
    """ENOSPC while writing the claim's CDI spec: the error names all three; nothing is left."""
    with _tiny_tmpfs(world.cdi_dir, "8k"):
        filler = world.cdi_dir / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as fh:
            while True:
                fh.write(b"x" * 1024)
                fh.flush()
        ref = world.getter.add(claim(UID, "train", "ml", results=[result("gpu", GPU0)]))
        got = world.driver().prepare_claims([ref])[UID]
        spec = world.cdi_dir / f"numadra.dev_claim_{UID}.json"
        assert got.error == f"claim ml/train (uid {UID}): cannot write {spec}: No space left on device"
        assert "?" not in got.error
        assert sorted(p.name for p in world.cdi_dir.iterdir()) == ["filler"]  # no temp file left


def test_a_share_id_that_makes_an_invalid_cdi_name_is_that_claims_error(world: World) -> None:
    """An allocation shareID that would make an invalid CDI name (it was "internal error:
    CdiNameError(...)"): a per-claim error quoting the shareID, from the shareID check that now
    runs before any name is built; the other claim of the call is prepared."""
    bad = world.getter.add(claim(UID, "train", "ml", results=[cpu_result("cpu", 2, share="bad/share id")]))
    good_uid = UID.replace("e1", "e2")
    good = world.getter.add(claim(good_uid, "ok", "ml", results=[result("gpu", GPU0)]))
    out = world.driver().prepare_claims([bad, good])
    assert out[good_uid].ok
    error = out[UID].error
    assert error == (
        f"claim ml/train (uid {UID}): request 'cpu': device 'cpu-numa0': shareID 'bad/share id' is not a UID"
    )
    assert "internal error" not in error and "CdiNameError" not in error
