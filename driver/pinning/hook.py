"""``--pinning hook``: an OCI ``createRuntime`` hook, referenced from the CDI spec, writes the cpuset.

runc calls ``createRuntime`` hooks after it created and configured the container cgroup, with
``runc init`` (the future workload) already inside it and before the user process runs, so
``mems`` applies before the workload allocates anything. The hook receives the OCI state JSON on
stdin (``pid``, ``bundle``); the assignment comes from its argv (the CDI hook entry carries it)
or, checked against the claims journal, from the marker env in ``<bundle>/config.json``.

When the cgroup cannot be written (no cpuset controller, read-only cgroupfs), the hook falls back
to ``sched_setaffinity`` on every thread of the process: CPUs are still confined (children
inherit the mask) but memory nodes are not, and the outcome says so.

This pins the claim's containers only; it does not keep other containers off those CPUs (that
needs NRI): "pinning without isolation", see docs/pinning.md.

**Who may be pinned.** numadra's CDI specs pass the assignment in argv, and that is bound to the
pod by construction: the runtime runs a CDI hook only in containers that got the claim's CDI
device, and the kubelet hands a claim's CDI devices only to containers of a pod the claim is
reserved for. A pod cannot trigger the hook, nor change its argv, through its own env. The env
mode (no ``--cpus``/``--mems``, e.g. the hook registered by hand as a global OCI hook) would
trust env any pod can set, so it pins only with the claims journal (``--journal``) to check
against: the container's pod, from the OCI annotations the runtime sets
(``io.kubernetes.cri.sandbox-uid`` / ``-namespace`` with containerd, ``io.kubernetes.pod.uid`` /
``.namespace`` as the kubelet's labels), must be one the claim was reserved for, and the CPUs
and nodes are the journal's. Where the annotations are missing the hook cannot tell the pod and
refuses.

**Which consumers the env mode knows.** The hook runs in the runtime's process, with no apiserver
credentials of its own, so it reads only what the journal records: the pods reserved when the
claim was prepared (and at any repeated prepare), plus those the running driver learned since (a
rebuilt entry's, read by the driver's adopted-claims check). A later pod of a shared claim is not
recorded until then, and is refused with a message saying so. The hook does not ask the driver
over a socket: that would add a second local RPC surface into the driver for a mode numadra does not
deploy, while the argv mode above needs no record at all (the kubelet hands the claim's CDI
device, and so the hook, only to the claim's pods), shared claims included.

**PodGroups.** A claim reserved for a PodGroup (workload-aware scheduling) names the group, not
its pods, and a pod's group is in its spec on the apiserver, which the hook cannot read. So the
env mode applies the same rule as NRI where it can: a pod recorded in the journal (the pod the
claim was prepared for, or one the driver confirmed as a member since) is pinned; any other pod
of the group is refused, with a message that says why. The argv mode pins every pod of the group,
as the kubelet hands the claim's CDI device to each of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdi.spec import Hook
from driver import defaults
from driver.errors import PinningError, PinRefusedError, UntrustedValueError
from driver.log import get_logger
from driver.pinning.backend import PinningKind, PinTarget
from driver.pinning.binding import bind
from driver.pinning.cgroupfs import CgroupfsBackend
from driver.pinning.failures import REASON_CONSUMERS_UNKNOWN, REASON_NOT_RESERVED
from driver.pinning.types import (
    ENV_CLAIM_UID,
    ENV_CPUS,
    ENV_MEMS,
    ENV_REQUEST,
    ClaimBinding,
    CpuAssignment,
    CpuMode,
    env_markers,
    format_cpulist,
    parse_cpulist,
)
from driver.untrusted.files import read_file
from driver.untrusted.shape import Field, Integer, Record, Text
from driver.untrusted.values import ascii_int, loads_json

__all__ = [
    "DEFAULT_HOOK_PATH",
    "HookBackend",
    "HookOutcome",
    "OciState",
    "assignment_from_bundle",
    "bundle_config",
    "cdi_hook",
    "cdi_hook_entry",
    "parse_oci_state",
    "run_create_runtime",
]

#: where the DaemonSet installs the numadra executable on the host (the runtime execs host paths)
DEFAULT_HOOK_PATH = defaults.HOOK_PATH
#: the largest bundle ``config.json`` the hook reads (an OCI spec with many mounts and env vars)
_MAX_BUNDLE_CONFIG = 16 << 20
#: the largest PID Linux hands out (``kernel.pid_max`` can be at most 2**22)
_MAX_PID = 2**22
#: seconds the runtime waits for the hook before failing the container
HOOK_TIMEOUT_S = 5
#: OCI annotations naming the container's pod: containerd's CRI ones, then the kubelet's labels
POD_UID_ANNOTATIONS = ("io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid")
POD_NAMESPACE_ANNOTATIONS = ("io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace")

#: claim UID -> the driver's record of it (None: not prepared)
ClaimLookup = Callable[[str], ClaimBinding | None]

_log = get_logger("pinning.hook")


@dataclass(frozen=True, slots=True)
class OciState:
    """The fields of the OCI runtime state the hook uses."""

    container_id: str
    pid: int
    bundle: Path


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """What the hook did: ``method`` is "cgroup", "affinity" (CPUs only) or "none" (no marker)."""

    method: str
    pid: int
    cpus: frozenset[int]
    mems: frozenset[int]


def _oci_state(*, pid: int, bundle: str, container_id: str = "") -> OciState:
    return OciState(container_id=container_id, pid=pid, bundle=Path(bundle))


#: the fields of the runtime's state the hook reads, by type (a ``true`` pid is not process 1)
_OCI_STATE = Record(
    _oci_state,
    {
        "id": Field("container_id", Text(max_len=1024)),
        "pid": Field("pid", Integer(1, _MAX_PID), required=True),
        "bundle": Field("bundle", Text(min_len=1), required=True),
    },
)


def parse_oci_state(text: str) -> OciState:
    """Parse the OCI state JSON a runtime writes to a hook's stdin."""
    try:
        doc = loads_json(text, what="OCI state on stdin")
    except ValueError as exc:
        raise PinningError(str(exc)) from exc
    if not isinstance(doc, dict):
        raise PinningError("OCI state on stdin is not a JSON object")
    try:
        return _OCI_STATE.check(doc)
    except UntrustedValueError as exc:
        raise PinningError(f"OCI state on stdin: {exc}") from None


@dataclass(frozen=True, slots=True)
class BundleConfig:
    """What the hook reads from ``<bundle>/config.json``: the marker env and the OCI annotations."""

    markers: dict[str, str]
    annotations: dict[str, str]

    def first(self, keys: tuple[str, ...]) -> str:
        """The value of the first of ``keys`` that is set ("" when none is)."""
        return next((self.annotations[k] for k in keys if self.annotations.get(k)), "")


def bundle_config(bundle: Path) -> BundleConfig:
    """The marker env (``process.env``) and ``annotations`` of ``<bundle>/config.json``."""
    path = bundle / "config.json"
    try:
        doc: Any = loads_json(read_file(path, max_bytes=_MAX_BUNDLE_CONFIG), what=str(path))
    except OSError as exc:
        raise PinningError(f"read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise PinningError(str(exc)) from exc
    if not isinstance(doc, dict):
        doc = {}
    process = doc.get("process")
    env = process.get("env") if isinstance(process, dict) else None
    if not isinstance(env, list):
        env = []
    raw = doc.get("annotations")
    annotations = (
        {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(raw, dict)
        else {}
    )
    return BundleConfig(env_markers(item for item in env if isinstance(item, str)), annotations)


def assignment_from_bundle(bundle: Path) -> tuple[str | None, str | None]:
    """The marker env values (cpus, mems) from ``<bundle>/config.json`` ``process.env``."""
    values = bundle_config(bundle).markers
    return values.get(ENV_CPUS), values.get(ENV_MEMS)


def _bound_from_env(state: OciState, lookup: ClaimLookup | None) -> CpuAssignment | None:
    """The env mode: the claim the marker names, checked against its record (module docstring)."""
    config = bundle_config(state.bundle)
    values = config.markers
    if ENV_CPUS not in values and ENV_MEMS not in values:
        return None
    who = f"container {state.container_id or '?'} (bundle {state.bundle})"
    if lookup is None:
        raise PinningError(
            f"{who} carries a pinning marker in its env, which any pod can set: the hook pins from "
            "env only with the claims journal to check it against (--journal); numadra's own CDI "
            "specs pass --cpus/--mems"
        )
    claim_uid = values.get(ENV_CLAIM_UID, "")
    binding = lookup(claim_uid) if claim_uid else None
    if binding is None:
        raise PinningError(
            f"{who} carries a pinning marker for claim {claim_uid or '<none>'} that this driver has "
            "not prepared"
        )
    pod_uid = config.first(POD_UID_ANNOTATIONS)
    if not pod_uid and binding.pods is not None:
        raise PinningError(
            f"{who}: cannot tell its pod (no {' or '.join(POD_UID_ANNOTATIONS)} annotation), so "
            f"cannot check that claim {claim_uid} is reserved for it: refusing to pin from env"
        )
    pod_ns = config.first(POD_NAMESPACE_ANNOTATIONS)
    who = f"container {state.container_id or '?'} of pod {pod_ns or '?'} (uid {pod_uid or 'unknown'})"
    try:
        return bind(
            binding, request=values.get(ENV_REQUEST, ""), pod_uid=pod_uid, pod_namespace=pod_ns, who=who
        )
    except PinRefusedError as exc:
        if exc.reason not in (REASON_NOT_RESERVED, REASON_CONSUMERS_UNKNOWN):
            raise
        groups = ""
        if binding.pod_groups:
            groups = (
                " The claim is reserved for PodGroup "
                f"{', '.join(sorted(binding.group_names))}: the hook cannot read which group a pod "
                "belongs to (that is the pod's spec on the apiserver), so a pod of the group is "
                "pinned from env only once the driver recorded it."
            )
        raise PinRefusedError(
            f"{exc}.{groups} The hook knows only the consumers recorded in the journal (it cannot "
            "ask the apiserver): a later pod of a shared claim is recorded by the driver only when it is "
            "prepared again, a rebuilt entry's pods within a round of the driver's check. "
            "numadra's own CDI hook (--cpus/--mems, what --pinning hook writes) needs no record: "
            "the kubelet gives it only to the claim's pods",
            reason=exc.reason,
        ) from exc


def _cpulist(text: str, what: str) -> frozenset[int]:
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise PinningError(f"malformed {what} list {text!r}: {exc}") from exc


class HookBackend:
    """Pins a container from inside its ``createRuntime`` hook: cgroup write, affinity fallback."""

    def __init__(self, cgroupfs: CgroupfsBackend | None = None, proc_root: Path = Path("/proc")) -> None:
        self._cgroupfs = cgroupfs or CgroupfsBackend(proc_root=proc_root)
        self._proc = proc_root

    @property
    def kind(self) -> PinningKind:
        """Always :attr:`PinningKind.HOOK`."""
        return PinningKind.HOOK

    def apply(self, target: PinTarget, assignment: CpuAssignment) -> None:
        """Pin the process ``target.pid`` (its cgroup, else its threads' affinity)."""
        self.pin(target, assignment)

    def pin(self, target: PinTarget, assignment: CpuAssignment) -> str:
        """Like :meth:`apply`, returning the method used ("cgroup" or "affinity")."""
        if target.pid is None:
            raise PinningError("hook pinning needs the container's pid")
        try:
            self._cgroupfs.apply(PinTarget(pid=target.pid, cgroup=target.cgroup), assignment)
        except PinningError as cgroup_error:
            if not assignment.cpus:
                raise
            try:
                self._set_affinity(target.pid, assignment.cpus)
            except OSError as exc:
                raise PinningError(
                    f"{cgroup_error}; sched_setaffinity fallback for pid {target.pid} "
                    f"failed too: {exc.strerror}"
                ) from exc
            _log.warning(
                "cgroup write impossible, CPUs pinned by affinity only (memory nodes not enforced)",
                pid=target.pid,
                error=str(cgroup_error),
                cpus=format_cpulist(assignment.cpus),
            )
            return "affinity"
        return "cgroup"

    def release(self, target: PinTarget) -> None:
        """Nothing to undo: the container's cgroup goes away with the container."""

    def _set_affinity(self, pid: int, cpus: frozenset[int]) -> None:
        """Set the CPU mask of every thread of ``pid`` (the exec'ing thread may be any of them)."""
        try:
            tids = [
                tid
                for t in (self._proc / str(pid) / "task").iterdir()
                if (tid := _task_id(t.name)) is not None
            ]
        except OSError:
            tids = [pid]
        for tid in sorted(tids):
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:
                continue  # thread exited meanwhile


def run_create_runtime(
    state_text: str,
    cpus_arg: str | None = None,
    mems_arg: str | None = None,
    backend: HookBackend | None = None,
    lookup: ClaimLookup | None = None,
) -> HookOutcome:
    """The body of ``numadra hook create-runtime``: parse, find the assignment, pin.

    The assignment comes from argv (numadra's CDI specs) or, without it, from the marker env of
    the bundle, checked against ``lookup`` (the claims journal; see the module docstring).
    """
    state = parse_oci_state(state_text)
    if cpus_arg is None and mems_arg is None:
        bound = _bound_from_env(state, lookup)
        cpus = bound.cpus if bound is not None else frozenset()
        mems = bound.mems if bound is not None else frozenset()
    else:
        cpus = _cpulist(cpus_arg or "", "cpu")
        mems = _cpulist(mems_arg or "", "memory node")
    if not cpus and not mems:
        return HookOutcome(method="none", pid=state.pid, cpus=cpus, mems=mems)
    assignment = CpuAssignment(request="", mode=CpuMode.EXCLUSIVE, cpus=cpus, mems=mems)
    method = (backend or HookBackend()).pin(
        PinTarget(pid=state.pid, container_id=state.container_id), assignment
    )
    return HookOutcome(method=method, pid=state.pid, cpus=cpus, mems=mems)


def cdi_hook(assignment: CpuAssignment, path: str = DEFAULT_HOOK_PATH) -> Hook:
    """The CDI hook (``cdi.spec.Hook``) that pins a request's containers; needs cdiVersion 0.3.0+."""
    args = [Path(path).name, "hook", "create-runtime"]
    if assignment.cpus:
        args += ["--cpus", format_cpulist(assignment.cpus)]
    if assignment.mems:
        args += ["--mems", format_cpulist(assignment.mems)]
    return Hook(hook_name="createRuntime", path=path, args=tuple(args), timeout=HOOK_TIMEOUT_S)


def cdi_hook_entry(assignment: CpuAssignment, path: str = DEFAULT_HOOK_PATH) -> dict[str, Any]:
    """The same hook as a CDI ``containerEdits.hooks`` JSON entry."""
    return cdi_hook(assignment, path).to_json()


def _task_id(name: str) -> int | None:
    """A thread id from a ``/proc/PID/task`` entry's name; None for anything else."""
    try:
        return ascii_int(name, what="task id", lo=1, hi=(1 << 32) - 1)
    except UntrustedValueError:
        return None
