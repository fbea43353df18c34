"""Things planted where the claims driver reads its state: refused by name, never a hang.

The CDI dir is shared with every CDI producer of the node and the plugin dir is a hostPath; a
FIFO, socket, directory, link or sparse file can appear at any path the driver reads there. Case 2
of issue 20: a FIFO named like a claim spec (``numadra.dev_claim_<uuid>.json``) plus a lost
journal blocked the cross-check under the claims lock, so every prepare and unprepare of the node
waited forever. Each call here runs in a thread with a generous deadline; the old code never
returned.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from driver.errors import JournalError
from driver.plugin import ClaimRef
from driver.state.journal import journal_path
from tests.integration.claims._world import GPU0, GPU1, NIC0, ServedDriver, World, claim, result
from tests.support.planted import PLANTS, plant

pytestmark = pytest.mark.fault

FIRST = "6a1d2c3b-0d1b-4c3a-9e8f-00000000000a"
SECOND = "6a1d2c3b-0d1b-4c3a-9e8f-00000000000b"
THIRD = "6a1d2c3b-0d1b-4c3a-9e8f-00000000000c"
PLANTED = "6a1d2c3b-0d1b-4c3a-9e8f-0000000000ff"  # no claim has this UID
#: far beyond what a call takes on a loaded machine; the old code never returned at all
DEADLINE_S = 10.0
#: kinds numadra can never have written (atomic writes make regular files only)
NOT_REGULAR = sorted(k for k in PLANTS if k not in ("sparse-1TiB", "huge"))

T = TypeVar("T")


def within_deadline(call: Callable[[], T]) -> T:
    """``call()``'s result, or a failure when it has not returned within :data:`DEADLINE_S`."""
    box: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), f"still blocked after {DEADLINE_S} s"
    if errors:
        raise errors[0]
    return box[0]


def _prepared(world: World) -> tuple[ServedDriver, ClaimRef, ClaimRef, ClaimRef]:
    """FIRST holds GPU0; SECOND (GPU1) and THIRD (NIC0) are known to the apiserver, unprepared."""
    first = world.getter.add(claim(FIRST, "train", "ml", results=[result("gpu", GPU0)]))
    second = world.getter.add(claim(SECOND, "infer", "ml", results=[result("gpu", GPU1)]))
    third = world.getter.add(claim(THIRD, "net", "ml", results=[result("nic", NIC0)]))
    drv = world.driver()
    drv.reconcile()
    assert drv.prepare_claims([first])[FIRST].ok
    assert drv.prepare_claims([third])[THIRD].ok
    return drv, first, second, third


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_a_lost_journal_with_a_planted_spec_name_still_answers(world: World, kind: str) -> None:
    """Case 2 while running: the journal is deleted and something not a file sits under a claim
    spec's name. The cross-check skips it (logged), rebuilds the real lost claim, and an
    unrelated prepare and unprepare answer."""
    drv, _first, second, third = _prepared(world)
    plant(kind, world.cdi_dir / f"numadra.dev_claim_{PLANTED}.json")
    journal_path(world.plugin_dir).unlink()
    got = within_deadline(lambda: drv.prepare_claims([second]))
    assert got[SECOND].ok, got[SECOND].error
    assert within_deadline(lambda: drv.unprepare_claims([third])) == {THIRD: ""}
    held = {e.uid for e in drv.prepared_claims()}
    assert held == {FIRST, SECOND}  # the lost claim was rebuilt from its spec, the planted one not


@pytest.mark.parametrize("kind", ["sparse-1TiB", "huge"])
def test_an_oversized_spec_of_a_lost_claim_is_refused_by_name(world: World, kind: str) -> None:
    """A regular file under a claim's name may be numadra's, damaged: its devices are unknown, so
    the driver refuses (the documented recovery), at once and naming it, without reading it."""
    drv, _, second, _ = _prepared(world)
    spec = world.cdi_dir / f"numadra.dev_claim_{PLANTED}.json"
    plant(kind, spec)
    journal_path(world.plugin_dir).unlink()
    with pytest.raises(JournalError, match=f"state lost: claim {PLANTED} .*{spec}.*more than the"):
        within_deadline(lambda: drv.prepare_claims([second]))


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_a_planted_metadata_stream_is_skipped(world: World, kind: str) -> None:
    drv, _, second, _ = _prepared(world)
    plant(kind, world.plugin_dir / "dra-device-metadata" / f"{PLANTED}_gpu.json")
    journal_path(world.plugin_dir).unlink()
    got = within_deadline(lambda: drv.prepare_claims([second]))
    assert got[SECOND].ok, got[SECOND].error


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_a_planted_journal_is_refused_by_name_at_start(world: World, kind: str) -> None:
    """Nothing but a regular file of a plausible size is read as the journal."""
    world.plugin_dir.mkdir(parents=True, exist_ok=True)
    path = journal_path(world.plugin_dir)
    plant(kind, path)
    with pytest.raises(JournalError, match=f"journal {path} "):
        within_deadline(lambda: world.driver().reconcile())


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_a_planted_file_at_a_journaled_path_is_replaced(world: World, kind: str) -> None:
    """Reconcile compares each journaled file with the disk: what is planted there is rewritten."""
    _prepared(world)
    spec = world.cdi_dir / f"numadra.dev_claim_{FIRST}.json"
    want = spec.read_bytes()
    plant(kind, spec)
    if kind == "directory":  # a rename cannot replace a directory: the write fails, by name
        with pytest.raises(OSError, match=str(spec)):
            within_deadline(lambda: world.driver().reconcile())
        return
    assert within_deadline(lambda: world.driver().reconcile()) >= 1
    assert spec.read_bytes() == want and not spec.is_symlink()
