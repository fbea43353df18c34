"""FakePlugin: a stand-in for the claims logic, to drive ``driver/kubelet`` over real sockets.

The real :class:`DriverPlugin` needs an apiserver and a host with devices; the protocol layer does
not, so its tests use this fake. Its behaviour is chosen by the claim *name*, which the kubelet-side
test client controls:

* ``fail-*``: a per-claim error; ``forget-*``: no entry at all (the layer must fill one in);
  ``raise-*``: ``prepare_claims`` raises (the layer must answer gRPC INTERNAL);
* ``sub-*``: the device carries sub-request names (``gpu/high-mem``) that the layer must strip;
* ``share-*``: the device carries a share ID (sent on v1 only);
* anything else: one device per claim, with a CDI ID containing the claim UID.

With ``record`` set, every call appends ``{"pid", "op", "enter", "exit", "uids"}`` as one JSON line,
so a test can prove that calls from two processes never overlapped. With ``state`` set, prepared
UIDs are kept in that JSON file with an unlocked read-modify-write, which loses updates unless the
layer serializes calls across processes.

The kubelet layer reads every claim it is asked to prepare before the plugin sees it; where no
apiserver exists, :class:`StubClaims` stands in for one: it holds the claims a test names (the
kubelet only names claims that exist), each allocated, and answers 404 for any other.

Run ``python -m tests.support.fakeplugin --help`` for a server process (SIGTERM stops it cleanly).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from driver.errors import KubeError
from driver.kube.types import JsonObject
from driver.plugin import Claim, ClaimRef, DeviceHealth, HealthState, PreparedDevice, PrepareResult

__all__ = ["FAKE_DRIVER", "FakePlugin", "StubClaims", "main"]

FAKE_DRIVER = "fake.numadra.dev"


class StubClaims:
    """A stand-in claim source (no apiserver here): allocated claims by namespace/name, else 404."""

    def __init__(self, refs: Sequence[ClaimRef] = ()) -> None:
        self._uids: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        for ref in refs:
            self.add(ref)

    def add(self, ref: ClaimRef) -> None:
        """Make ``ref`` exist (a later ``add`` of the same name re-creates it with its UID)."""
        with self._lock:
            self._uids[(ref.namespace, ref.name)] = ref.uid

    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        """The claim, allocated one device of the fake driver; KubeError 404 when unknown."""
        with self._lock:
            uid = self._uids.get((namespace, name))
        if uid is None:
            raise KubeError(f"get resourceclaims/{namespace}/{name}: HTTP 404: not found", status=404)
        result = {"request": "gpu", "driver": FAKE_DRIVER, "pool": "fake-pool", "device": "dev-0"}
        return {
            "metadata": {"namespace": namespace, "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }

    @classmethod
    def from_file(cls, path: Path) -> StubClaims:
        """Claims from a JSON list of ``{"namespace", "name", "uid"}`` (for a server process)."""
        items = json.loads(path.read_text())
        return cls([ClaimRef(i["namespace"], i["name"], i["uid"]) for i in items])


class FakePlugin:
    """A fake :class:`DriverPlugin` and :class:`HealthSource` (see the module docstring)."""

    def __init__(
        self,
        *,
        driver_name: str = FAKE_DRIVER,
        pool: str = "fake-pool",
        devices: Sequence[str] = ("dev-0", "dev-1", "dev-2", "dev-3"),
        delay: float = 0.0,
        record: Path | None = None,
        state: Path | None = None,
    ) -> None:
        self.driver_name = driver_name
        self.pool = pool
        self.devices = tuple(devices)
        self.delay = delay
        self.record = record
        self.state = state
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.errors: list[tuple[str, str]] = []
        self.prepared: dict[str, PrepareResult] = {}
        self._health = dict.fromkeys(self.devices, (HealthState.HEALTHY, ""))
        self._cond = threading.Condition()
        self._generation = 0
        self._seen = 0

    # DriverPlugin ------------------------------------------------------------------------------

    def _device_for(self, claim: ClaimRef) -> PreparedDevice:
        device = self.devices[zlib.crc32(claim.uid.encode()) % len(self.devices)]
        requests = ("gpu/high-mem", "gpu/low-mem", "nic") if claim.name.startswith("sub-") else ("gpu",)
        return PreparedDevice(
            request_names=requests,
            pool_name=self.pool,
            device_name=device,
            cdi_device_ids=(f"{self.driver_name}/claim={claim.uid}-{device}",),
            share_id=f"share-{claim.uid}" if claim.name.startswith("share-") else None,
        )

    def prepare_claims(self, fetched: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        """Prepare per the name rules above, after ``delay`` seconds."""
        claims = [claim.ref for claim in fetched]
        enter = time.time()
        self.calls.append(("prepare", tuple(c.uid for c in claims)))
        if any(c.name.startswith("raise-") for c in claims):
            raise RuntimeError("fake driver exploded")
        out: dict[str, PrepareResult] = {}
        for claim in claims:
            if claim.name.startswith("forget-"):
                continue
            if claim.name.startswith("fail-"):
                out[claim.uid] = PrepareResult(error=f"fake failure for claim {claim.uid}")
                continue
            out[claim.uid] = self.prepared.get(claim.uid) or PrepareResult(devices=(self._device_for(claim),))
        self.prepared.update((uid, r) for uid, r in out.items() if r.ok)
        self._update_state(add=[u for u, r in out.items() if r.ok], remove=[])
        time.sleep(self.delay)
        self._record("prepare", enter, claims)
        self._changed()
        return out

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Unprepare; unknown claims succeed. ``fail-*`` fails, ``raise-*`` raises."""
        enter = time.time()
        self.calls.append(("unprepare", tuple(c.uid for c in claims)))
        if any(c.name.startswith("raise-") for c in claims):
            raise RuntimeError("fake driver exploded")
        out: dict[str, str] = {}
        for claim in claims:
            if claim.name.startswith("forget-"):
                continue
            out[claim.uid] = f"fake failure for claim {claim.uid}" if claim.name.startswith("fail-") else ""
            if not out[claim.uid]:
                self.prepared.pop(claim.uid, None)
        self._update_state(add=[], remove=[u for u, e in out.items() if not e])
        time.sleep(self.delay)
        self._record("unprepare", enter, claims)
        self._changed()
        return out

    def handle_error(self, err: BaseException, msg: str) -> None:
        """Remember background errors for assertions."""
        self.errors.append((msg, repr(err)))

    def _record(self, op: str, enter: float, claims: Sequence[ClaimRef]) -> None:
        if self.record is None:
            return
        line = json.dumps(
            {
                "pid": os.getpid(),
                "op": op,
                "enter": enter,
                "exit": time.time(),
                "uids": [c.uid for c in claims],
            }
        )
        fd = os.open(self.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def _update_state(self, add: Sequence[str], remove: Sequence[str]) -> None:
        """Deliberately racy read-modify-write: only the layer's lock keeps it consistent."""
        if self.state is None:
            return
        try:
            uids = set(json.loads(self.state.read_text()))
        except FileNotFoundError:
            uids = set()
        time.sleep(self.delay / 2)  # widen the race window
        uids = (uids | set(add)) - set(remove)
        self.state.write_text(json.dumps(sorted(uids)))

    # HealthSource ------------------------------------------------------------------------------

    def set_health(self, device: str, state: HealthState, reason: str = "") -> None:
        """Change one device's health and wake the health stream."""
        self._health[device] = (state, reason)
        self._changed()

    def _changed(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def health_snapshot(self) -> Sequence[DeviceHealth]:
        """Every device; prepared ones carry their CDI IDs."""
        cdi: dict[str, tuple[str, ...]] = {}
        for result in list(self.prepared.values()):
            for dev in result.devices:
                cdi.setdefault(dev.device_name, dev.cdi_device_ids)
        return [
            DeviceHealth(self.pool, name, state, reason, cdi.get(name, ()))
            for name, (state, reason) in sorted(self._health.items())
        ]

    def wait_for_change(self, timeout: float) -> bool:
        """Edge-triggered for a single consumer: True once per batch of changes."""
        with self._cond:
            changed = self._cond.wait_for(lambda: self._generation != self._seen, timeout)
            self._seen = self._generation
            return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a FakePlugin over real sockets until SIGTERM/SIGINT; exit 0 after a clean stop."""
    from driver.kubelet.server import KubeletPluginServer
    from driver.log import configure_logging

    parser = argparse.ArgumentParser(prog="python -m tests.support.fakeplugin", description=__doc__)
    parser.add_argument("--driver-name", default=FAKE_DRIVER)
    parser.add_argument("--node-name", default="fake-node")
    parser.add_argument("--registrar-dir", type=Path, required=True)
    parser.add_argument("--plugin-dir", type=Path, required=True)
    parser.add_argument("--pod-uid", default=os.environ.get("POD_UID"))
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each driver call takes")
    parser.add_argument("--record", type=Path, help="append one JSON line per driver call here")
    parser.add_argument("--state", type=Path, help="keep prepared UIDs in this JSON file")
    parser.add_argument("--health-interval", type=float, default=10.0)
    parser.add_argument("--claims", type=Path, help="JSON list of the claims that exist (StubClaims)")
    parser.add_argument("--no-health", action="store_true")
    parser.add_argument("--log-format", choices=["json", "console"], default="json")
    args = parser.parse_args(argv)
    configure_logging(args.log_format)

    plugin = FakePlugin(driver_name=args.driver_name, delay=args.delay, record=args.record, state=args.state)
    server = KubeletPluginServer(
        driver_name=args.driver_name,
        node_name=args.node_name,
        registrar_dir=args.registrar_dir,
        plugin_dir=args.plugin_dir,
        plugin=plugin,
        claim_source=StubClaims.from_file(args.claims) if args.claims else StubClaims(),
        health=None if args.no_health else plugin,
        pod_uid=args.pod_uid,
        health_resend_interval=args.health_interval,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    server.start()
    while not done.wait(3600):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
