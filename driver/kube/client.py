"""The one apiserver client of the driver: plain JSON dicts in and out, over one transport.

Why this shape:

* Every call (claim reads, the status apply, slice writes and watch, the Node read) goes over
  :mod:`driver.kube.transport`, a pool of kept-alive HTTP/1.1 connections, and the raw
  body is decoded with ``json.loads``: the claim reads and the status apply are on the prepare
  path, and decoding into the official client's models costs more than the HTTP itself.
* Where the apiserver is and how to authorize to it comes from one of two sources, and only
  from there: in a pod (no kubeconfig) the service account's settings
  (:mod:`driver.kube.incluster`), and the official ``kubernetes`` package is never imported; with
  a kubeconfig, the official loader (:mod:`driver.kube.kubeconfig`: exec plugins, client
  certificates, token refresh hooks). A proxy either names is tunnelled through
  (:mod:`driver.kube.proxy`); what the transport cannot honour fails :meth:`KubeClient.configure`
  with a :class:`~driver.errors.ConfigError`.
* One client per process: ``numadra run``'s builder makes it (``driver.app``) and hands it to
  every part that talks to the apiserver, the NRI path included, so there is one connection pool
  and one place where its settings are decided. A part that needs a shorter read passes its own
  ``deadline`` to the call; nothing here is cached at module level.
* Every failure becomes a :class:`~driver.errors.KubeError` carrying verb, resource, name, HTTP
  status, a 429's ``Retry-After`` and the answer's Status object (:mod:`driver.kube.status`),
  mapped in exactly one place (:func:`_raise_for`, :func:`_transport_error`). The client never
  retries by itself (beyond the transport's one resend of an idempotent request on a connection
  the server closed): the loops that call it do, under :class:`~driver.kube.backoff.RetryPolicy`.
* A claim read (GET or LIST) ends by ``read_deadline`` seconds (``--claim-read-timeout``,
  :data:`DEFAULT_READ_DEADLINE` by default), whatever the apiserver does: the transport cuts every
  socket wait at the deadline. A prepare call makes at most two reads in a row (a LIST, then GETs
  for what it lacked), so twice the deadline stays inside the kubelet's 45 s call timeout. Every
  other call ends by ``connect_timeout + timeout``, a watch's reads by its ``timeoutSeconds`` plus
  a margin for the server's own lateness.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from driver import __version__
from driver.errors import ConfigError, KubeError, UntrustedValueError
from driver.kube.incluster import InCluster
from driver.kube.kubeconfig import Kubeconfig
from driver.kube.status import parse_status
from driver.kube.transport import Stream, Transport, TransportSettings
from driver.kube.types import JsonObject
from driver.untrusted.values import ascii_int, bounded_int, json_type, object_or_empty

__all__ = [
    "DEFAULT_READ_DEADLINE",
    "RESOURCE_API",
    "KubeClient",
    "SliceWatch",
    "WatchEvent",
    "error_kind",
    "slice_field_selector",
]

RESOURCE_API = "/apis/resource.k8s.io/v1"
#: default of ``--claim-read-timeout``: two reads in a row stay far inside the kubelet's 45 s call timeout
DEFAULT_READ_DEADLINE = 10.0
_SLICES = f"{RESOURCE_API}/resourceslices"
_JSON = "application/json"
_APPLY = "application/apply-patch+yaml"  # JSON is valid YAML: the body is sent JSON-encoded
#: HTTP statuses after which the same call may succeed later
_TRANSIENT = frozenset({409, 429, 500, 502, 503, 504})

#: bytes of an error answer's Status read from a watch
_MAX_ERROR_BODY = 1 << 20

WatchEvent = tuple[str, dict[str, Any]]  # ("ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK", object)


def slice_field_selector(node_name: str, driver_name: str) -> str:
    """The field selector for this node's slices of this driver (as the kubelet's wipe uses)."""
    return f"spec.nodeName={node_name},spec.driver={driver_name}"


def error_kind(err: KubeError) -> str:
    """A short metric label for an error: unreachable, timeout, not_found, conflict, invalid, server..."""
    status = err.status
    if status is None:
        return "timeout" if "Timeout" in str(err) else "unreachable"
    kinds = {401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "conflict", 410: "gone"}
    if status in kinds:
        return kinds[status]
    if status in (400, 422):
        return "invalid"
    if status == 429:
        return "throttled"
    return "server" if status >= 500 else "client"


def _target(resource: str, name: str) -> str:
    """What a call was about, for messages: "resourceslices/s1", or "resourceslices" for a LIST."""
    return f"{resource}/{name}" if name else resource


#: the longest Retry-After read as a number (seconds); the retry policy caps what it honours far below
_DAY = 86_400


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The ``Retry-After`` of an answer in seconds (delta-seconds only, as client-go reads it).

    Anything but ASCII digits (an HTTP date, ``"²"``, ``"1.5"``) or a delay past a day is ignored:
    the loop then waits its own backoff step, which :class:`~driver.backoff.RetryPolicy` caps anyway.
    """
    try:
        return float(ascii_int(headers.get("retry-after", "").strip(), what="Retry-After", lo=0, hi=_DAY))
    except UntrustedValueError:
        return None


def _raise_for(
    verb: str, resource: str, name: str, status: int, body: bytes, *, headers: Mapping[str, str] | None = None
) -> None:
    """Raise the KubeError for a non-2xx answer, quoting the apiserver's own Status message and
    carrying the Status itself (None for any other body: it decides nothing)."""
    message = ""
    try:
        decoded = json.loads(body)
        if isinstance(decoded, dict):
            message = str(decoded.get("message", ""))
    except ValueError:
        message = body[:200].decode("utf-8", "replace")
    raise KubeError(
        f"{verb} {_target(resource, name)}: HTTP {status}{': ' + message if message else ''}",
        verb=verb,
        resource=resource,
        name=name,
        status=status,
        transient=status in _TRANSIENT,
        retry_after=_retry_after(headers or {}),
        api_status=parse_status(body),
    )


def _transport_error(verb: str, resource: str, name: str, exc: BaseException) -> KubeError:
    """A KubeError for a call that got no HTTP answer (refused, reset, timed out)."""
    err = KubeError(
        f"{verb} {_target(resource, name)}: apiserver unreachable: {type(exc).__name__}: {exc}",
        verb=verb,
        resource=resource,
        name=name,
        status=None,
        transient=True,
    )
    err.__cause__ = exc
    return err


def _decode(verb: str, resource: str, name: str, data: bytes) -> dict[str, Any]:
    """The JSON object of a 2xx answer; anything else is a KubeError naming the call."""
    try:
        obj = json.loads(data) if data else {}
    except ValueError as exc:
        raise KubeError(
            f"{verb} {_target(resource, name)}: undecodable answer",
            verb=verb,
            resource=resource,
            name=name,
            transient=True,
        ) from exc
    if not isinstance(obj, dict):
        raise KubeError(
            f"{verb} {_target(resource, name)}: answer is not an object",
            verb=verb,
            resource=resource,
            name=name,
        )
    return obj


class ClusterAccess(Protocol):
    """Where the apiserver is and how to authorize to it right now: :class:`InCluster` in a pod,
    :class:`~driver.kube.kubeconfig.Kubeconfig` with a kubeconfig."""

    @property
    def settings(self) -> TransportSettings:
        """Where to connect and how (may change: a refresh hook swapping a client certificate)."""
        ...

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header of right now (refreshed tokens included)."""
        ...


class SliceWatch:
    """One open watch stream; iterate for events, :meth:`close` from any thread to end it."""

    def __init__(self, stream: Stream, verb: str) -> None:
        self._stream = stream  # body not yet read
        self._verb = verb
        self._closed = False

    def close(self) -> None:
        """Interrupt a blocked read and release the connection (thread-safe)."""
        self._closed = True
        self._stream.close()

    def __iter__(self) -> Iterator[WatchEvent]:
        """Yield (type, object) until the server ends the stream; ERROR events raise KubeError,
        and so does a stream cut before its end."""
        try:
            while line := self._stream.readline():
                if line.strip():
                    yield self._event(line)
        except Exception as exc:
            if self._closed:
                return
            if isinstance(exc, KubeError):
                raise
            raise _transport_error(self._verb, "resourceslices", "", exc) from exc
        finally:
            self._stream.close()

    def _event(self, line: bytes) -> WatchEvent:
        event = json.loads(line)
        kind, obj = str(event.get("type", "")), event.get("object") or {}
        if not isinstance(obj, dict):  # an event carries an object: else the watch ends, as a cut one
            raise KubeError(
                f"{self._verb} resourceslices: a watch event's object is {json_type(obj)}, not an object",
                verb=self._verb,
                resource="resourceslices",
                transient=True,
            )
        if kind == "ERROR":  # a Status object, e.g. 410 Gone: resourceVersion too old
            status = json.dumps(obj).encode()  # _raise_for quotes the Status' message
            _raise_for(self._verb, "resourceslices", "", _event_code(obj), status)
        return kind, obj


def _list_items(answer: Mapping[str, Any], resource: str, name: str) -> list[Any]:
    """A LIST answer's ``items`` (none when absent); a KubeError naming the call when they are no
    list: the caller's loop backs off as for any failed call, instead of iterating a string."""
    items = answer.get("items") or []
    if not isinstance(items, list):
        raise KubeError(
            f"list {_target(resource, name)}: the answer's items are {json_type(items)}, not a list",
            verb="list",
            resource=resource,
            name=name,
            transient=True,
        )
    return items


def _event_code(status: Mapping[str, Any]) -> int:
    """The HTTP code an ERROR event's Status carries; 500 when it has none that is a status code."""
    try:
        return bounded_int(status.get("code", 500), what="watch ERROR event code", lo=100, hi=599)
    except UntrustedValueError:
        return 500


class KubeClient:
    """Typed apiserver calls exchanging JSON dicts; implements :class:`driver.kube.types.ClaimGetter`.

    Thread-safe: the connection pool is shared by every thread. Construction is cheap and does no
    I/O; the configuration is loaded on the first call (or by :meth:`configure`).

    ``in_cluster``: the in-cluster settings to use instead of the pod's own (tests and benches
    point them at files of their own); only without a kubeconfig.
    """

    def __init__(
        self,
        kubeconfig: str | None = None,
        *,
        timeout: float = 10.0,
        connect_timeout: float = 3.0,
        read_deadline: float = DEFAULT_READ_DEADLINE,
        in_cluster: InCluster | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        #: seconds a claim read (GET or LIST) may take in all; see the module docstring
        self.read_deadline = read_deadline
        self._access: ClusterAccess | None = None if kubeconfig else in_cluster
        self._transport: Transport | None = None
        self._user_agent = f"numadra/{__version__}"
        self._lock = threading.Lock()

    def configure(self) -> None:
        """Load the configuration and the TLS files now, instead of on the first call.

        ``numadra run`` calls this once the plugin has registered, so that a broken kubeconfig or
        service account ends the start with one line (:class:`~driver.errors.ConfigError`, exit 2)
        rather than killing a background thread.
        """
        self._connection()

    # -- transport -------------------------------------------------------------------------------
    def _source(self) -> str:
        return f"kubeconfig {self.kubeconfig}" if self.kubeconfig else "in-cluster configuration"

    def _connection(self) -> tuple[Transport, ClusterAccess]:
        """The transport for the settings of right now, and the access that authorizes requests.

        ConfigError when the configuration cannot be loaded or its TLS files read. The hot path
        takes no lock: the settings object stays the same while nothing changed.
        """
        access, transport = self._access, self._transport
        if access is not None and transport is not None and transport.settings is access.settings:
            return transport, access
        with self._lock:
            if self._access is None:
                self._access = Kubeconfig(self.kubeconfig) if self.kubeconfig else InCluster()
            access = self._access
            settings = access.settings
            old = self._transport
            if old is None or old.settings is not settings:
                try:
                    transport = Transport(
                        settings, connect_timeout=self.connect_timeout, timeout=self.timeout
                    )
                except (OSError, ValueError) as exc:  # an unreadable or invalid CA or client certificate
                    raise ConfigError(
                        f"cannot load the {self._source()}: its TLS files (CA file "
                        f"{settings.ca_file or '(inline)'}, client certificate {settings.cert_file or '-'}): "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                self._transport = transport
                if old is not None:
                    old.close()
            else:
                transport = old
            return transport, access

    def _headers(self, access: ClusterAccess) -> dict[str, str]:
        return {"Accept": _JSON, "User-Agent": self._user_agent, **access.headers()}

    def _call(
        self,
        verb: str,
        resource: str,
        name: str,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: object = None,
        content_type: str = _JSON,
        idempotent: bool,
        deadline: float | None = None,
    ) -> bytes:
        """One request: the 2xx answer's body, or KubeError.

        ``deadline``: seconds for the whole request (``connect_timeout + timeout`` by default).
        ``idempotent``: may be sent once more when a kept-alive connection turns out closed before
        any byte of the answer came.
        """
        limit = deadline if deadline is not None else self.connect_timeout + self.timeout
        target = f"{path}?{urlencode(list(query))}" if query else path
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        try:
            transport, access = self._connection()
            headers = self._headers(access)
            if payload:
                headers["Content-Type"] = content_type
            response = transport.request(
                method, target, headers, payload, idempotent=idempotent, deadline=limit
            )
        except Exception as exc:  # OSError, ssl.SSLError, ProtocolError, ConfigError, a failing hook
            raise _transport_error(verb, resource, name, exc) from exc
        if not 200 <= response.status < 300:
            _raise_for(verb, resource, name, response.status, response.body, headers=response.headers)
        return response.body

    def _get_json(
        self,
        verb: str,
        resource: str,
        name: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        *,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """GET a claim (or a page of them) within the read deadline, whatever the apiserver does."""
        limit = self.read_deadline if deadline is None else deadline
        data = self._call(verb, resource, name, "GET", path, query=query, idempotent=True, deadline=limit)
        return _decode(verb, resource, name, data)

    # -- claims ----------------------------------------------------------------------------------
    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        """GET one ResourceClaim as its JSON object (the prepare hot path).

        The read ends by ``deadline`` seconds (``read_deadline`` by default) whatever the
        apiserver does.
        """
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
        return self._get_json("get", "resourceclaims", f"{namespace}/{name}", path, deadline=deadline)

    # -- pods ------------------------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        """GET one Pod as its JSON object: which PodGroup it belongs to (its
        ``spec.schedulingGroup``), when pinning checks a pod of a claim reserved for a PodGroup.
        Ends by ``deadline`` seconds (``read_deadline`` by default); errors name ``pods/<ns>/<name>``."""
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
        return self._get_json("get", "pods", f"{namespace}/{name}", path, deadline=deadline)

    def list_resource_claims(
        self, namespace: str, *, limit: int = 0, continue_token: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """LIST the claims of one namespace in name order; returns (items, ``metadata.continue``).

        ``limit`` > 0 asks for one page of at most that many; the returned token ("" after the last
        page) goes back as ``continue_token`` for the next one. A token that grew too old gets 410
        Gone: list again from the start. Errors name the namespace ("list resourceclaims/<ns>").
        """
        query = [("limit", str(limit))] if limit > 0 else []
        if continue_token:
            query.append(("continue", continue_token))
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims"
        obj = self._get_json("list", "resourceclaims", namespace, path, query)
        items = _list_items(obj, "resourceclaims", namespace)
        return items, str(object_or_empty(obj.get("metadata")).get("continue") or "")

    def apply_claim_status(
        self, namespace: str, name: str, devices: Sequence[Mapping[str, Any]], field_manager: str
    ) -> None:
        """Server-side apply ``status.devices`` (our entries only) with force.

        An empty ``devices`` removes every entry this field manager applied before. Sent as one
        request of at most ``connect_timeout + timeout`` seconds in all; it may
        be sent twice when a kept-alive connection turns out closed, which is safe: a forced apply
        of the same body by the same field manager leaves the claim as one apply does. The answer
        (the whole claim, some KiB) is not decoded: nobody reads it.
        """
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"devices": [dict(d) for d in devices]},
        }
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}/status"
        query = [("fieldManager", field_manager), ("force", "true")]
        self._call(
            "apply",
            "resourceclaims/status",
            f"{namespace}/{name}",
            "PATCH",
            path,
            query=query,
            body=body,
            content_type=_APPLY,
            idempotent=True,
        )

    # -- nodes -----------------------------------------------------------------------------------
    def get_node(self, name: str) -> dict[str, Any]:
        """GET one Node (the slices' owner reference needs its UID)."""
        data = self._call("get", "nodes", name, "GET", f"/api/v1/nodes/{quote(name)}", idempotent=True)
        return _decode("get", "nodes", name, data)

    # -- events ----------------------------------------------------------------------------------
    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        """POST a core/v1 Event into ``namespace`` (never sent twice; the answer is not decoded)."""
        name = str((event.get("metadata") or {}).get("name") or "")
        path = f"/api/v1/namespaces/{quote(namespace)}/events"
        self._call(
            "create", "events", f"{namespace}/{name}", "POST", path, body=dict(event), idempotent=False
        )

    # -- resource slices -------------------------------------------------------------------------
    # Writes are never sent twice: a create or update the server may have carried out before the
    # connection broke is the publisher's to find out (its next LIST), not a resend's.
    def list_resource_slices(
        self, *, field_selector: str = "", label_selector: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """LIST slices matching the selectors; returns (items, list resourceVersion)."""
        query = [
            (k, v) for k, v in (("fieldSelector", field_selector), ("labelSelector", label_selector)) if v
        ]
        data = self._call("list", "resourceslices", "", "GET", _SLICES, query=query, idempotent=True)
        obj = _decode("list", "resourceslices", "", data)
        items = _list_items(obj, "resourceslices", "")
        return items, str(object_or_empty(obj.get("metadata")).get("resourceVersion", ""))

    def create_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST a new slice; returns the stored object."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        data = self._call("create", "resourceslices", name, "POST", _SLICES, body=dict(obj), idempotent=False)
        return _decode("create", "resourceslices", name, data)

    def update_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """PUT a slice; ``metadata.resourceVersion`` must be the stored one (else 409)."""
        name = str(obj["metadata"]["name"])
        path = f"{_SLICES}/{quote(name)}"
        data = self._call("update", "resourceslices", name, "PUT", path, body=dict(obj), idempotent=False)
        return _decode("update", "resourceslices", name, data)

    def delete_resource_slice(self, name: str, *, uid: str = "", resource_version: str = "") -> None:
        """DELETE a slice, with optional uid/resourceVersion preconditions (mismatch: 409)."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            body["preconditions"] = pre
        self._call(
            "delete",
            "resourceslices",
            name,
            "DELETE",
            f"{_SLICES}/{quote(name)}",
            body=body,
            idempotent=False,
        )

    def watch_resource_slices(
        self, *, field_selector: str = "", resource_version: str = "", timeout_seconds: int = 300
    ) -> SliceWatch:
        """Open a WATCH from ``resource_version``; iterate the result, close it to stop early.

        Every read may wait ``timeout_seconds + 30`` seconds: the server ends the watch after
        ``timeoutSeconds`` and sends bookmarks meanwhile, so a longer silence is a dead connection.
        """
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds))]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if resource_version:
            query.append(("resourceVersion", resource_version))
        verb, resource = "watch", "resourceslices"
        try:
            transport, access = self._connection()
            stream = transport.stream(
                f"{_SLICES}?{urlencode(query)}", self._headers(access), deadline=timeout_seconds + 30.0
            )
        except Exception as exc:  # OSError, ssl.SSLError, ProtocolError, ConfigError
            raise _transport_error(verb, resource, "", exc) from exc
        if not 200 <= stream.status < 300:
            try:
                data = stream.read(_MAX_ERROR_BODY)
            except Exception:
                data = b""
            finally:
                stream.close()
            _raise_for(verb, resource, "", stream.status, data, headers=stream.headers)
        return SliceWatch(stream, verb)

    def close(self) -> None:
        """Release pooled connections; a later call opens new ones."""
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()
