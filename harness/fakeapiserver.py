"""A FAKE kube-apiserver for tests and benchmarks: real HTTP on 127.0.0.1, objects in memory.

It serves only what the driver uses, with the apiserver's observable behaviour where the driver
depends on it: ResourceSlices (GET, LIST and WATCH with field/label selectors, POST, PUT with
resourceVersion conflicts, DELETE with preconditions, DELETE collection as the kubelet's wipe),
ResourceClaims (GET, LIST of a namespace with ``limit``/``continue`` paging in name order, answered
chunked when big as Go's server does, server-side apply of ``status.devices`` merged by key and
owned per field manager, with the API limits), Nodes (GET), Pods (GET: a pod's
``spec.schedulingGroup`` is what pinning reads of one) and core/v1 Events (POST). It records
every request so tests can count writes, injects faults, and can be stopped and started on the
same port to play an unreachable apiserver. The real control plane is the e2e tier's job.

Usage::

    api = FakeApiServer(); url = api.start(); api.put_object(node)
    KubeClient(api.kubeconfig_path) ...; api.writes(); api.stop()
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import json
import re
import select
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from driver.kube.types import allocation_results

__all__ = ["FakeApiServer", "Fault", "RecordedRequest", "WatchFault"]

Obj = dict[str, Any]
_KINDS = {
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
    "Node": "nodes",
    "Event": "events",
    "Pod": "pods",
}
_ROUTES = [
    (re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$"), "nodes"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$"), "events"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$"), "pods"),
    (re.compile(r"^/apis/resource\.k8s\.io/v1/resourceslices(?:/(?P<name>[^/]+))?$"), "resourceslices"),
    (
        re.compile(
            r"^/apis/resource\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/resourceclaims"
            r"(?:/(?P<name>[^/]+)(?P<sub>/status)?)?$"
        ),
        "resourceclaims",
    ),
]
_CORE = frozenset({"nodes", "events", "pods"})  # the resources of the core group ("" in a Status' details)
_SLICE_FIELDS = {"spec.nodeName", "spec.driver", "spec.pool.name", "metadata.name"}
_TAINT_EFFECTS = {"None", "NoSchedule", "NoExecute"}
_CONTINUE_VERSION = "meta.k8s.io/v1"
_CHUNKED_ABOVE = 2048  # Go's net/http answers chunked once a handler writes more than this unflushed
_CONFLICT = (
    'Operation cannot be fulfilled on resourceslices "{name}": the object has been modified; '
    "please apply your changes to the latest version and try again"
)


class _HttpError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def _not_found(resource: str, name: str, qualified: str = "") -> _HttpError:
    """The apiserver's NotFound for one object, with the ``details`` naming it (the message
    names the resource as ``qualified``, ``resource`` if empty)."""
    group = "" if resource in _CORE else "resource.k8s.io"
    details = {"name": name, "kind": resource, **({"group": group} if group else {})}
    return _HttpError(404, "NotFound", f'{qualified or resource} "{name}" not found', details)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the fake saw it."""

    method: str
    path: str
    query: str = ""

    @property
    def is_write(self) -> bool:
        """True for every method that can change an object."""
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


#: hostile answers to a watch, each ending it at once (:attr:`Fault.watch`)
WatchFault = Literal["", "empty", "gone-event", "cut"]


@dataclass(slots=True)
class Fault:
    """Answer matching requests with ``status`` (0: drop the connection) after ``delay`` seconds.

    A request matches when its method is ``method`` (any when empty), its path contains
    ``path_contains`` and its query ``query_contains``; the fault answers ``times`` of them.
    ``retry_after`` adds a ``Retry-After`` header (seconds, or any text) to the answer; ``body``
    answers these raw bytes instead of a Status object. ``watch`` plays a
    broken watch instead of ``status``: ``empty`` (200, no event, the stream ends), ``gone-event``
    (200, one ERROR event carrying a 410 Status, the end) or ``cut`` (200, one event, then the
    connection is closed without the stream's last chunk).
    """

    status: int
    method: str = ""
    path_contains: str = ""
    times: int = 1
    delay: float = 0.0
    query_contains: str = ""
    retry_after: int | str | None = None
    watch: WatchFault = ""
    body: bytes | None = None


@dataclass(slots=True)
class _Store:
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)  # (resource, ns, name)
    events: list[tuple[int, str, Obj]] = field(default_factory=list)  # slices only
    compacted_rv: int = 0
    rv: int = 100
    owners: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # claim -> entry -> manager


def _field(obj: Obj, dotted: str) -> str:
    cur: Any = obj
    for part in dotted.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def _selector(raw: str) -> list[tuple[str, str | None]]:
    terms: list[tuple[str, str | None]] = []
    for term in filter(None, raw.split(",")):
        key, sep, value = term.replace("==", "=").partition("=")
        terms.append((key.strip(), value.strip() if sep else None))
    return terms


def _matches(obj: Obj, fields: list[tuple[str, str | None]], labels: list[tuple[str, str | None]]) -> bool:
    obj_labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(_field(obj, k) == (v or "") for k, v in fields) and all(
        k in obj_labels and (v is None or obj_labels[k] == v) for k, v in labels
    )


def _device_key(entry: Mapping[str, Any]) -> str:
    return "/".join(str(entry.get(k, "")) for k in ("driver", "pool", "device", "shareID"))


@dataclass(slots=True)
class Held:
    """Requests held by :meth:`FakeApiServer.hold`: each waits for :attr:`released` before it is
    served; :attr:`arrived` is set by the first to come in, :attr:`count` counts them all."""

    method: str
    path_contains: str
    #: the longest a request is held (a test that never releases does not hang the server)
    cap_s: float = 60.0
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    count: int = 0


class FakeApiServer:
    """See the module docstring. Thread-safe; every accessor returns deep copies."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._store = _Store()
        self._cond = threading.Condition()
        self._requests: list[RecordedRequest] = []
        self._faults: list[Fault] = []
        #: (method, path part, seconds): matching requests are served, that much later
        self._latencies: list[tuple[str, str, float]] = []
        self._held: list[Held] = []
        self._server: ThreadingHTTPServer | None = None
        self._conns: set[socket.socket] = set()
        #: connections accepted so far (kept-alive requests share one)
        self.connections = 0
        self._dir = tempfile.TemporaryDirectory(prefix="fakeapiserver-")
        self.kubeconfig_path = str(Path(self._dir.name) / "kubeconfig")

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL (stable across stop/start)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Listen (again, on the same port after a stop) and return the base URL."""
        if self._server is not None:
            return self.url
        server = _Server((self.host, self.port), _Handler)
        server.fake = self
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.05,), name="fakeapiserver", daemon=True).start()
        self._write_kubeconfig()
        return self.url

    def stop(self) -> None:
        """Become unreachable: close the listener, open watches and kept-alive connections."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._cond:
            conns, self._conns = set(self._conns), set()
            self._cond.notify_all()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop and remove the kubeconfig directory."""
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> FakeApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }
        Path(self.kubeconfig_path).write_text(json.dumps(config))

    # -- test-side access ------------------------------------------------------------------------
    def put_object(self, obj: Obj) -> Obj:
        """Store (create or replace) a Node, ResourceClaim or ResourceSlice as the server would."""
        resource = _KINDS[obj["kind"]]
        meta = obj.get("metadata") or {}
        with self._cond:
            key = (resource, str(meta.get("namespace", "")), str(meta["name"]))
            return copy.deepcopy(
                self._save(key, copy.deepcopy(obj), "MODIFIED" if key in self._store.objects else "ADDED")
            )

    def objects(self, kind: str) -> list[Obj]:
        """Every stored object of a kind ("ResourceSlice", ...), sorted by namespace/name."""
        resource = _KINDS[kind]
        with self._cond:
            items = sorted((k, v) for k, v in self._store.objects.items() if k[0] == resource)
            return [copy.deepcopy(v) for _, v in items]

    def get_object(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """One stored object, or None."""
        with self._cond:
            obj = self._store.objects.get((_KINDS[kind], namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def wipe_slices(self, node_name: str, driver: str = "") -> int:
        """Delete a node's slices as the kubelet does at start or after the wiping delay."""
        fields: list[tuple[str, str | None]] = [("spec.nodeName", node_name)]
        if driver:
            fields.append(("spec.driver", driver))
        with self._cond:
            return self._delete_matching(fields)

    def compact(self) -> None:
        """Forget the event history: watches and LIST continue tokens from before get 410 Gone."""
        with self._cond:
            self._store.events.clear()
            self._store.compacted_rv = self._store.rv

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in order."""
        with self._cond:
            return list(self._requests)

    def writes(self, resource: str = "") -> list[RecordedRequest]:
        """The recorded writes, optionally only those whose path contains ``resource``."""
        return [r for r in self.requests if r.is_write and resource in r.path]

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        with self._cond:
            self._requests.clear()

    def inject_fault(self, fault: Fault) -> None:
        """Answer the next matching request(s) with an error status instead of serving them."""
        with self._cond:
            self._faults.append(fault)

    def add_latency(self, seconds: float, *, method: str = "GET", path_contains: str = "") -> None:
        """Serve matching requests normally, but ``seconds`` late (a slow apiserver, not a broken
        one: unlike a :class:`Fault`, the answer is the real one). Rules add up when several match."""
        with self._cond:
            self._latencies.append((method, path_contains, seconds))

    def hold(self, *, method: str = "", path_contains: str = "") -> Held:
        """Hold matching requests until the returned :class:`Held` is released, then serve them:
        a barrier for tests that prove a caller went on while its request was still unanswered."""
        held = Held(method, path_contains)
        with self._cond:
            self._held.append(held)
        return held

    def _latency(self, method: str, path: str) -> float:
        return sum(s for m, part, s in self._latencies if m in ("", method) and part in path)

    # -- store (callers hold self._cond) ---------------------------------------------------------
    def _save(self, key: tuple[str, str, str], obj: Obj, event: str) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self._store.objects[key] = obj
        return self._changed(key[0], obj, event)

    def _delete(self, key: tuple[str, str, str]) -> Obj:
        return self._changed(key[0], self._store.objects.pop(key), "DELETED")

    def _changed(self, resource: str, obj: Obj, event: str) -> Obj:
        """Give a written object the next resourceVersion; slices also get a watch event."""
        store = self._store
        store.rv += 1
        obj["metadata"]["resourceVersion"] = str(store.rv)
        if resource == "resourceslices":
            store.events.append((store.rv, event, copy.deepcopy(obj)))
            self._cond.notify_all()
        return obj

    def _delete_matching(self, fields: list[tuple[str, str | None]]) -> int:
        keys = [
            k for k, v in self._store.objects.items() if k[0] == "resourceslices" and _matches(v, fields, [])
        ]
        for key in keys:
            self._delete(key)
        return len(keys)

    def _take_fault(self, method: str, path: str, query: str) -> Fault | None:
        for fault in self._faults:
            if fault.method in ("", method) and fault.path_contains in path and fault.query_contains in query:
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    # -- request handling ------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, str], body: Obj | None) -> tuple[int, Obj]:
        """Serve one non-watch request: (HTTP status, JSON object)."""
        resource, name, ns, sub = self._route(path)
        with self._cond:
            if resource == "nodes" and method == "GET":
                return 200, self._get((resource, "", name))
            if resource == "pods" and method == "GET":
                return 200, self._get((resource, ns, name))
            if resource == "resourceclaims":
                if method == "GET" and not name:
                    return 200, self._list_claims(ns, query)
                if method == "GET" and not sub:
                    return 200, self._get((resource, ns, name))
                if method == "PATCH" and sub:
                    return 200, self._apply_status((resource, ns, name), query, body or {})
            if resource == "resourceslices":
                return self._slices(method, name, query, body)
            if resource == "events" and method == "POST":
                return 201, self._create_event(ns, body or {})
        raise _HttpError(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    def _route(self, path: str) -> tuple[str, str, str, str]:
        for pattern, resource in _ROUTES:
            m = pattern.match(path)
            if m:
                groups = m.groupdict()
                return (
                    resource,
                    unquote(groups.get("name") or ""),
                    unquote(groups.get("ns") or ""),
                    (groups.get("sub") or ""),
                )
        raise _HttpError(404, "NotFound", f"the server could not find the requested resource ({path})")

    def _create_event(self, namespace: str, obj: Obj) -> Obj:
        """POST a core/v1 Event: a name from generateName; the involved object's namespace must
        be the Event's, as the apiserver's validation requires."""
        meta = obj.setdefault("metadata", {})
        involved = obj.get("involvedObject") or {}
        if meta.get("namespace", namespace) != namespace or involved.get("namespace", namespace) != namespace:
            raise _HttpError(422, "Invalid", "involvedObject.namespace: does not match event.namespace")
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'event.')}{uuid.uuid4().hex[:10]}"
        meta["namespace"] = namespace
        return copy.deepcopy(self._save(("events", namespace, meta["name"]), copy.deepcopy(obj), "ADDED"))

    def _get(self, key: tuple[str, str, str]) -> Obj:
        obj = self._store.objects.get(key)
        if obj is None:
            raise _not_found(key[0], key[2])
        return copy.deepcopy(obj)

    def _list_claims(self, namespace: str, query: dict[str, str]) -> Obj:
        """One page of a namespace's claims in name order, paged as the real apiserver pages.

        The continue token has the real one's shape (unpadded base64url of
        ``{"v","rv","start"}``), but later pages show the current objects, not a snapshot at ``rv``.
        """
        raw_limit = query.get("limit", "")
        try:
            limit = int(raw_limit) if raw_limit else 0
        except ValueError:
            raise _HttpError(
                400, "BadRequest", f'strconv.ParseInt: parsing "{raw_limit}": invalid syntax'
            ) from None
        rv, after = self._store.rv, ""
        token = query.get("continue", "")
        if token:
            rv, after = self._decode_continue(token)
        names = sorted(
            k[2]
            for k in self._store.objects
            if k[0] == "resourceclaims" and k[1] == namespace and k[2] > after
        )
        page = names[:limit] if limit > 0 else names
        meta: Obj = {"resourceVersion": str(rv)}
        if len(page) < len(names):
            start = {"v": _CONTINUE_VERSION, "rv": rv, "start": f"/{page[-1]}\x00"}
            encoded = base64.urlsafe_b64encode(json.dumps(start, separators=(",", ":")).encode())
            meta["continue"] = encoded.rstrip(b"=").decode()
            meta["remainingItemCount"] = len(names) - len(page)
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimList",
            "metadata": meta,
            "items": [copy.deepcopy(self._store.objects[("resourceclaims", namespace, n)]) for n in page],
        }

    def _decode_continue(self, token: str) -> tuple[int, str]:
        """(resourceVersion, last name served) of a continue token; 400 if malformed, 410 if compacted."""
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            rv, start = int(decoded["rv"]), str(decoded["start"])
            if decoded.get("v") != _CONTINUE_VERSION or rv <= 0 or not start.startswith("/"):
                raise ValueError("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            message = f"invalid continue token: continue key is not valid: {exc}"
            raise _HttpError(400, "BadRequest", message) from None
        if rv < self._store.compacted_rv:
            raise _HttpError(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter.",
            )
        return rv, start[1:].rstrip("\x00")

    def _slices(self, method: str, name: str, query: dict[str, str], body: Obj | None) -> tuple[int, Obj]:
        fields = _selector(query.get("fieldSelector", ""))
        unsupported = [k for k, _ in fields if k not in _SLICE_FIELDS]
        if unsupported:
            raise _HttpError(400, "BadRequest", f'field label not supported: "{unsupported[0]}"')
        key = ("resourceslices", "", name)
        if method == "GET" and name:
            return 200, self._get(key)
        if method == "GET":
            labels = _selector(query.get("labelSelector", ""))
            items = [
                copy.deepcopy(v)
                for k, v in sorted(self._store.objects.items())
                if k[0] == "resourceslices" and _matches(v, fields, labels)
            ]
            meta = {"resourceVersion": str(self._store.rv)}
            return 200, {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSliceList",
                "metadata": meta,
                "items": items,
            }
        if method == "DELETE" and not name:
            self._delete_matching(fields)
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if method == "DELETE":
            current = self._get(key)
            pre = (body or {}).get("preconditions") or {}
            for field_name in ("uid", "resourceVersion"):
                if pre.get(field_name) and pre[field_name] != current["metadata"][field_name]:
                    raise _HttpError(
                        409, "Conflict", f"Precondition failed: {field_name} mismatch for {name}"
                    )
            return 200, copy.deepcopy(self._delete(key))
        if body is None or method not in ("POST", "PUT"):
            raise _HttpError(400, "BadRequest", f"{method} needs a body and a supported verb")
        return self._create_slice(copy.deepcopy(body)) if method == "POST" else self._replace_slice(key, body)

    def _create_slice(self, obj: Obj) -> tuple[int, Obj]:
        meta = obj.setdefault("metadata", {})
        key = ("resourceslices", "", str(meta.get("name", "")))
        if key in self._store.objects:
            raise _HttpError(409, "AlreadyExists", f'resourceslices "{key[2]}" already exists')
        for server_field in ("uid", "resourceVersion", "creationTimestamp"):
            meta.pop(server_field, None)
        self._validate_slice(obj, None)
        meta["generation"] = 1
        return 201, copy.deepcopy(self._save(key, obj, "ADDED"))

    def _replace_slice(self, key: tuple[str, str, str], body: Obj) -> tuple[int, Obj]:
        current = self._get(key)
        obj = copy.deepcopy(body)
        meta, old_meta = obj.setdefault("metadata", {}), current["metadata"]
        if meta.get("resourceVersion") != old_meta["resourceVersion"]:
            raise _HttpError(409, "Conflict", _CONFLICT.format(name=key[2]))
        self._validate_slice(obj, current)
        meta["uid"], meta["creationTimestamp"] = old_meta["uid"], old_meta.get("creationTimestamp")
        meta["generation"] = old_meta.get("generation", 1) + (obj.get("spec") != current.get("spec"))
        return 200, copy.deepcopy(self._save(key, obj, "MODIFIED"))

    def _validate_slice(self, obj: Obj, current: Obj | None) -> None:
        spec = obj.get("spec") or {}
        errors = [f"spec.{f}: Required value" for f in ("driver", "pool") if not spec.get(f)]
        devices = spec.get("devices") or []
        tainted = any(d.get("taints") for d in devices)
        limit = 64 if tainted else 128
        if len(devices) > limit:
            errors.append(f"spec.devices: Too many: {len(devices)}: must have at most {limit} items")
        for i, device in enumerate(devices):
            for taint in device.get("taints") or []:
                if taint.get("effect") not in _TAINT_EFFECTS:
                    errors.append(
                        f"spec.devices[{i}].taints.effect: Unsupported value: {taint.get('effect')!r}"
                    )
                if len(str(taint.get("value", ""))) > 63:
                    errors.append(f"spec.devices[{i}].taints.value: Invalid value: must be no more than 63")
                taint.setdefault("timeAdded", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if current is not None:
            for dotted in ("spec.driver", "spec.nodeName", "spec.pool.name"):
                if _field(obj, dotted) != _field(current, dotted):
                    errors.append(f"{dotted}: Invalid value: field is immutable")
        if errors:
            raise _HttpError(422, "Invalid", "ResourceSlice is invalid: " + "; ".join(errors))

    def _apply_status(self, key: tuple[str, str, str], query: dict[str, str], body: Obj) -> Obj:
        manager = query.get("fieldManager", "")
        if not manager:
            raise _HttpError(400, "BadRequest", "PATCH is not supported without fieldManager for apply")
        claim = self._store.objects.get(key)
        if claim is None:
            raise _not_found("resourceclaims", key[2], "resourceclaims.resource.k8s.io")
        allocated = {_device_key(r) for r in allocation_results(claim)}
        applied = list((body.get("status") or {}).get("devices") or [])
        for i, entry in enumerate(applied):
            where = f"status.devices[{i}]"
            if _device_key(entry) not in allocated:
                raise _HttpError(
                    422, "Invalid", f"{where}: Invalid value: must be an allocated device in the claim"
                )
            if len(entry.get("conditions") or []) > 8:
                raise _HttpError(422, "Invalid", f"{where}.conditions: Too many: must have at most 8 items")
            for cond in entry.get("conditions") or []:
                if any(
                    not cond.get(f) for f in ("type", "status", "reason", "message", "lastTransitionTime")
                ):
                    raise _HttpError(422, "Invalid", f"{where}.conditions: Required value")
            ips = (entry.get("networkData") or {}).get("ips") or []
            if len(ips) > 16 or any("/" not in ip for ip in ips):
                raise _HttpError(
                    422, "Invalid", f"{where}.networkData.ips: Invalid value: at most 16, CIDR form"
                )
            if len(json.dumps(entry.get("data", {}))) > 10240:
                raise _HttpError(422, "Invalid", f"{where}.data: Too long: must have at most 10240 bytes")
        owners = self._store.owners.setdefault(key[1:], {})
        new_keys = {_device_key(e) for e in applied}
        status = claim.setdefault("status", {})
        kept = [
            e
            for e in status.get("devices") or []
            if _device_key(e) not in new_keys and owners.get(_device_key(e)) != manager
        ]
        for dropped in [k for k, m in owners.items() if m == manager and k not in new_keys]:
            del owners[dropped]
        owners.update(dict.fromkeys(new_keys, manager))
        status["devices"] = kept + applied
        if not status["devices"]:
            del status["devices"]
        return copy.deepcopy(self._save(key, claim, "MODIFIED"))

    def watch_events(self, query: dict[str, str], alive: Callable[[], bool]) -> Iterator[Obj]:
        """Watch events (JSON objects) for slices until timeoutSeconds, or ``alive()`` turns False."""
        fields, labels = _selector(query.get("fieldSelector", "")), _selector(query.get("labelSelector", ""))
        deadline = time.monotonic() + float(query.get("timeoutSeconds", "1800"))
        since = int(query.get("resourceVersion") or 0)
        with self._cond:
            if since == 0:  # "" / "0": synthetic ADDED for the current state first
                for k, v in sorted(self._store.objects.items()):
                    if k[0] == "resourceslices" and _matches(v, fields, labels):
                        yield {"type": "ADDED", "object": copy.deepcopy(v)}
                since = self._store.rv
            elif since < self._store.compacted_rv:
                gone = _status(410, "Expired", f"too old resource version: {since}")
                yield {"type": "ERROR", "object": gone}
                return
        while alive() and time.monotonic() < deadline:
            with self._cond:
                fresh = [(rv, t, o) for rv, t, o in self._store.events if rv > since]
                if not fresh:
                    self._cond.wait(min(0.5, max(0.0, deadline - time.monotonic())))
                    continue
            for rv, kind, obj in fresh:
                since = rv
                if _matches(obj, fields, labels):
                    yield {"type": kind, "object": copy.deepcopy(obj)}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeApiServer

    def process_request(self, request: Any, client_address: Any) -> None:
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go servers do: no 40 ms stalls
        with self.fake._cond:
            self.fake._conns.add(request)
            self.fake.connections += 1
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (timeouts, closed watches) are normal here; report anything else."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.fake._cond:
            self.fake._conns.discard(request)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 60

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _serve(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        with fake._cond:
            fake._requests.append(RecordedRequest(self.command, parts.path, parts.query))
            fault = fake._take_fault(self.command, parts.path, parts.query)
            latency = fake._latency(self.command, parts.path)
            held = [h for h in fake._held if h.method in ("", self.command) and h.path_contains in parts.path]
            for h in held:
                h.count += 1
        for h in held:
            h.arrived.set()
            h.released.wait(h.cap_s)
        if latency:
            time.sleep(latency)
        if fault is not None:
            time.sleep(fault.delay)
            if fault.watch:
                self._broken_watch(fault.watch)
                return
            if fault.status == 0:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
            if fault.body is not None:
                self._reply_raw(fault.status, fault.body, headers)
                return
            self._reply(fault.status, _status(fault.status, "Injected", "injected fault"), headers)
            return
        try:
            body = yaml.safe_load(raw) if raw else None  # JSON is YAML: covers apply-patch+yaml too
            if query.get("watch") in ("true", "1") and self.command == "GET":
                if fake._route(parts.path)[0] != "resourceslices":
                    raise _HttpError(
                        405, "MethodNotAllowed", f"watch is only served on slices, not {parts.path}"
                    )
                self._watch(query)
                return
            code, obj = fake.handle(self.command, parts.path, query, body)
        except _HttpError as exc:
            code, obj = exc.code, _status(exc.code, exc.reason, exc.message, exc.details)
        except yaml.YAMLError as exc:
            code, obj = 400, _status(400, "BadRequest", f"undecodable body: {exc}")
        self._reply(code, obj)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815

    def _reply(self, code: int, obj: Obj, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if obj.get("kind") == "ResourceClaimList" and len(data) > _CHUNKED_ABOVE:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for offset in range(0, len(data), 4096):
                piece = data[offset : offset + 4096]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reply_raw(self, code: int, data: bytes, headers: Mapping[str, str]) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _alive(self) -> bool:
        """The server still serves and the client has not hung up."""
        if self.server.fake._server is not self.server:
            return False
        readable, _, _ = select.select([self.connection], [], [], 0)
        try:
            return not readable or self.connection.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    def _broken_watch(self, kind: WatchFault) -> None:
        """A watch answer that ends at once, the hostile way ``kind`` names (see :class:`Fault`)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        try:
            if kind == "gone-event":
                gone = _status(410, "Expired", "too old resource version: 1 (2)")
                line = json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            if kind == "cut":  # a whole event, then the connection ends without the last chunk
                line = json.dumps({"type": "BOOKMARK", "object": {"metadata": {}}}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return

    def _watch(self, query: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        try:
            for event in self.server.fake.watch_events(query, self._alive):
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return


def _status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "code": code,
        "message": message,
    }
    if details is not None:
        status["details"] = details
    return status
