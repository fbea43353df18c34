"""The one apiserver client of the driver: plain JSON dicts in and out, over the standard library.

Why this shape:

* Every call (claim reads, the status apply, slice writes and watch, the Node read) goes over
  :mod:`driver.kube.transport`, a pool of kept-alive stdlib ``http.client`` connections, and the
  raw body is decoded with ``json.loads``. The official client's ``call_api`` cost 0.95 ms of the
  calling thread's CPU per status apply against 0.52 ms on the pool, and decoding into its
  pydantic models cost milliseconds per claim on the prepare path (issue 15, real
  kube-apiserver 1.37.2 over TLS on loopback, interleaved on a loaded 2-core machine).
* In a pod (no kubeconfig, no proxy in the environment) the settings are the service account's,
  read by :mod:`driver.kube.incluster`, and the official ``kubernetes`` package is never imported:
  importing it alone takes 33 MiB of RSS (11 to 44 MiB for ``python -c 'import kubernetes'``), and
  the DaemonSet's steady RSS went from 73 to 56 MiB without it (bench/prepare.py, same run
  shape). With a kubeconfig (development, tests, benches) the official client loads it (exec
  plugins, client certificates, token refresh hooks) and the pool is configured from the same
  ``Configuration``, authorized through its own ``auth_settings()`` per request. Where that
  configuration asks for what the pool cannot do (a proxy...), the official client carries the
  calls, as before.
* Every component shares one client (:func:`shared_client`).
* Every failure becomes a :class:`~driver.errors.KubeError` carrying verb, resource, name and HTTP
  status, mapped in exactly one place (:func:`_raise_for`, :func:`_transport_error`).
* A claim read (GET or LIST) ends by ``read_deadline`` seconds (``--claim-read-timeout``, 10 s by
  default), whatever the apiserver does: the pool cuts every socket wait at the deadline; on the
  official client, whose timeouts are per socket read, the calling thread stops waiting at the
  deadline and the stuck read is left to a small pool of its own. A prepare call makes at most
  two reads in a row (a LIST, then GETs for what it lacked), 20 s by default, well inside the
  kubelet's 45 s call timeout. Every other call ends by ``connect_timeout + timeout`` (13 s), a
  watch's reads by its ``timeoutSeconds`` + 30 s.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote, urlencode

from driver import __version__
from driver.errors import ConfigError, KubeError
from driver.kube.incluster import InCluster
from driver.kube.transport import (
    Stream,
    Transport,
    UnsupportedConfigError,
    configuration_key,
    settings_from_configuration,
)
from driver.kube.types import JsonObject
from driver.log import get_logger

__all__ = [
    "DEFAULT_READ_DEADLINE",
    "RESOURCE_API",
    "KubeClient",
    "SliceWatch",
    "WatchEvent",
    "error_kind",
    "shared_client",
    "slice_field_selector",
]

RESOURCE_API = "/apis/resource.k8s.io/v1"
#: default of ``--claim-read-timeout``: two reads in a row stay far inside the kubelet's 45 s
DEFAULT_READ_DEADLINE = 10.0
_SLICES = f"{RESOURCE_API}/resourceslices"
_JSON = "application/json"
_APPLY = "application/apply-patch+yaml"  # JSON is valid YAML: the body is sent JSON-encoded
#: HTTP statuses after which the same call may succeed later
_TRANSIENT = frozenset({409, 429, 500, 502, 503, 504})

WatchEvent = tuple[str, dict[str, Any]]  # ("ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK", object)

_log = get_logger("kube.client")


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


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The ``Retry-After`` of an answer in seconds (delta-seconds only, as client-go reads it)."""
    value = headers.get("retry-after", "").strip()
    return float(value) if value.isdigit() else None


def _raise_for(
    verb: str, resource: str, name: str, status: int, body: bytes, *, headers: Mapping[str, str] | None = None
) -> None:
    """Raise the KubeError for a non-2xx answer, quoting the apiserver's own Status message."""
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
    )


def _transport_error(verb: str, resource: str, name: str, exc: BaseException) -> KubeError:
    """A KubeError for a call that got no HTTP answer (refused, reset, timed out)."""
    cause = exc
    reason = getattr(exc, "reason", None)  # urllib3 MaxRetryError wraps the real cause
    if isinstance(reason, BaseException):
        cause = reason
    err = KubeError(
        f"{verb} {_target(resource, name)}: apiserver unreachable: {type(cause).__name__}: {cause}",
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


def _request_headers(api: Any) -> dict[str, str]:
    """The headers of one lean request: the ApiClient's defaults and the Authorization of right now.

    ``auth_settings()`` runs the configuration's refresh hook (in-cluster token rotation, exec and
    oidc kubeconfig users) exactly as the official client does before each of its requests.
    """
    headers = {str(k): str(v) for k, v in api.default_headers.items()}
    if api.cookie:
        headers["Cookie"] = str(api.cookie)
    headers["Accept"] = _JSON
    setting = api.configuration.auth_settings().get("BearerToken")
    if setting and setting.get("value"):
        if setting.get("in") != "header":
            raise ValueError(f"unsupported auth setting location {setting.get('in')!r}")
        headers[str(setting["key"])] = str(setting["value"])
    return headers


class SliceWatch:
    """One open watch stream; iterate for events, :meth:`close` from any thread to end it.

    Over the lean transport (a :class:`~driver.kube.transport.Stream`) or the official client's
    urllib3 response, whichever carried the request.
    """

    def __init__(self, response: Stream | Any, verb: str) -> None:
        self._response = response  # body not yet read
        self._verb = verb
        self._closed = False

    def close(self) -> None:
        """Interrupt a blocked read and release the connection (thread-safe)."""
        self._closed = True
        if isinstance(self._response, Stream):
            self._response.close()
            return
        shutdown = getattr(self._response, "shutdown", None)
        if shutdown is not None:
            shutdown()
        self._response.release_conn()

    def _lines(self) -> Iterator[bytes]:
        response = self._response
        if isinstance(response, Stream):
            while line := response.readline():
                yield line
            return
        pending = b""
        for chunk in response.stream(amt=None, decode_content=True):
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                yield line

    def __iter__(self) -> Iterator[WatchEvent]:
        """Yield (type, object) until the server ends the stream; ERROR events raise KubeError."""
        try:
            for line in self._lines():
                if line.strip():
                    yield self._event(line)
        except Exception as exc:
            if self._closed:
                return
            if isinstance(exc, KubeError):
                raise
            raise _transport_error(self._verb, "resourceslices", "", exc) from exc
        finally:
            if isinstance(self._response, Stream):
                self._response.close()
            else:
                self._response.release_conn()

    def _event(self, line: bytes) -> WatchEvent:
        event = json.loads(line)
        kind, obj = str(event.get("type", "")), event.get("object") or {}
        if kind == "ERROR":  # a Status object, e.g. 410 Gone: resourceVersion too old
            status = json.dumps(obj).encode()  # _raise_for quotes the Status' message
            _raise_for(self._verb, "resourceslices", "", int(obj.get("code", 500)), status)
        return kind, obj


#: proxy settings the official client honours and the lean transport does not (it falls back)
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


@dataclass(frozen=True, slots=True)
class _Lean:
    """The lean transport to use now and the headers of a request on it (auth of right now)."""

    transport: Transport
    headers: Callable[[], dict[str, str]]


class KubeClient:
    """Typed apiserver calls exchanging JSON dicts; implements :class:`driver.kube.types.ClaimGetter`.

    Thread-safe: the connection pools are shared by every thread. Construction is cheap and does
    no I/O; the configuration is loaded on the first call (or by :meth:`configure`).

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
        #: runs claim reads that must go through the official client, so that the caller can stop
        #: waiting at the deadline (created on first use; proxied configurations only)
        self._slow_reads: ThreadPoolExecutor | None = None
        self._api: Any = None
        #: (configuration_key, lean transport or None for "use the official client"), built lazily
        self._reads: tuple[tuple[Any, ...], Transport | None] | None = None
        self._in_cluster = in_cluster
        #: the lean transport of an in-cluster client (no official client at all), built lazily
        self._pod: _Lean | None = None
        self._lock = threading.Lock()

    def configure(self) -> None:
        """Load the configuration now, instead of on the first call.

        ``numadra run`` calls this once the plugin has registered, so that a broken kubeconfig or
        service account ends the start with one line (:class:`~driver.errors.ConfigError`, exit 2)
        rather than killing a background thread.
        """
        try:
            if self._pod_mode():
                self._pod_lean()
                return
            self._lean_transport(self._api_client().configuration)  # reads the TLS files too
        except ConfigError:
            raise
        except Exception as exc:
            source = f"kubeconfig {self.kubeconfig}" if self.kubeconfig else "in-cluster configuration"
            raise ConfigError(f"cannot load the {source}: {type(exc).__name__}: {exc}") from exc

    # -- transport -------------------------------------------------------------------------------
    def _pod_mode(self) -> bool:
        """In a pod, without a proxy to honour: the official client is never imported.

        A proxy in the environment is the official client's to honour (with its NO_PROXY rules);
        the lean transport connects directly, so it steps aside.
        """
        if self.kubeconfig:
            return False
        return self._in_cluster is not None or not any(os.environ.get(v) for v in _PROXY_VARIABLES)

    def _pod_lean(self) -> _Lean:
        pod = self._pod
        if pod is not None:  # the hot path takes no lock
            return pod
        with self._lock:
            if self._pod is None:
                source = self._in_cluster or InCluster()  # ConfigError names what is missing
                try:
                    transport = Transport(
                        source.settings,
                        connect_timeout=self.connect_timeout,
                        timeout=self.timeout,
                        deadline=self.read_deadline,
                    )
                except (OSError, ValueError) as exc:  # an unreadable or invalid CA file
                    raise ConfigError(
                        f"cannot load the in-cluster configuration: CA file {source.settings.ca_file}: {exc}"
                    ) from exc
                agent = f"numadra/{__version__}"

                def headers() -> dict[str, str]:
                    return {"Accept": _JSON, "User-Agent": agent, "Authorization": source.authorization()}

                self._in_cluster = source
                self._pod = _Lean(transport, headers)
            return self._pod

    def _api_client(self) -> Any:
        api = self._api
        if api is not None:  # the hot path takes no lock
            return api
        with self._lock:
            if self._api is None:
                from kubernetes import client, config

                cfg = client.Configuration()
                if self.kubeconfig:
                    config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
                else:
                    config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
                cfg.retries = 1  # one quick retry for a stale pooled connection; callers back off
                # urllib3 logs each retry as a plain-text warning; we report failures ourselves
                logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
                cfg.connection_pool_maxsize = 64  # 32 concurrent claim GETs must not queue
                # The refresh hook re-assigns ``host`` before every request, and while the proxy
                # comes from the environment the host setter re-reads the whole environment
                # (~0.1 ms a call). Pin the proxy it resolved now (the value does not change).
                cfg.proxy = cfg.proxy
                self._api = client.ApiClient(configuration=cfg)
            return self._api

    def _send(
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
        timeout: float | tuple[float, float] | None = None,
        stream: bool = False,
    ) -> Any:
        """Send one request on the official client; the raw urllib3 response (2xx only) or
        KubeError."""
        api = self._api_client()
        headers = {"Accept": _JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            _, url, headers, body, _ = api.param_serialize(
                method,
                path,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                _request_timeout=timeout or (self.connect_timeout, self.timeout),
            )
        except KubeError:
            raise
        except Exception as exc:  # urllib3 errors, ssl, ApiException(status=0)
            raise _transport_error(verb, resource, name, exc) from exc
        raw = resp.response
        if not 200 <= resp.status < 300:
            try:
                data = raw.data
            except Exception:
                data = b""
            _raise_for(verb, resource, name, resp.status, data)
        if stream:
            return raw
        try:
            return raw.data
        except Exception as exc:
            raise _transport_error(verb, resource, name, exc) from exc

    def _lean_transport(self, cfg: Any) -> Transport | None:
        """The lean transport under the official client's ``cfg`` now, or None: use the official
        client for everything.

        Rebuilt when a field it was made from changes (a refresh hook swapping the client
        certificate); the key check is the whole hot-path cost.
        """
        key = configuration_key(cfg)
        reads = self._reads
        if reads is not None and reads[0] == key:
            return reads[1]
        with self._lock:
            reads = self._reads
            if reads is None or reads[0] != key:
                old = reads[1] if reads is not None else None
                transport: Transport | None = None
                try:
                    settings = settings_from_configuration(cfg)
                    transport = Transport(
                        settings,
                        connect_timeout=self.connect_timeout,
                        timeout=self.timeout,
                        deadline=self.read_deadline,
                    )
                except UnsupportedConfigError as exc:
                    _log.info("apiserver calls use the official client", reason=str(exc))
                reads = self._reads = (key, transport)
                if old is not None:
                    old.close()
        return reads[1]

    def _lean(self, verb: str, resource: str, name: str) -> _Lean | None:
        """The lean transport to use now and its headers, or None: the official client's turn."""
        try:
            if self._pod_mode():
                return self._pod_lean()
            api = self._api_client()
            transport = self._lean_transport(api.configuration)
        except Exception as exc:  # no service account, an unreadable CA or client certificate
            raise _transport_error(verb, resource, name, exc) from exc
        if transport is None:
            return None
        return _Lean(transport, lambda: _request_headers(api))

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
        bounded: bool = False,
    ) -> bytes:
        """One request, on the lean transport where it can go: the 2xx answer's body, or KubeError.

        ``deadline``: seconds for the whole request (``connect_timeout + timeout`` by default).
        ``idempotent``: may be sent once more when a kept-alive connection turns out closed before
        any byte of the answer came. ``bounded``: on the official client too, the caller stops
        waiting at ``deadline`` (claim reads: the official client's timeouts are per socket read).
        """
        lean = self._lean(verb, resource, name)
        limit = deadline if deadline is not None else self.connect_timeout + self.timeout
        if lean is None:
            call = partial(
                self._send,
                verb,
                resource,
                name,
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
            )
            if bounded:
                return self._bounded(verb, resource, name, limit, call)
            data: bytes = call()
            return data
        target = f"{path}?{urlencode(list(query))}" if query else path
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        try:
            headers = lean.headers()
            if payload:
                headers["Content-Type"] = content_type
            response = lean.transport.request(
                method, target, headers, payload, idempotent=idempotent, deadline=limit
            )
        except Exception as exc:  # OSError, ssl.SSLError, ProtocolError, a failing refresh hook
            raise _transport_error(verb, resource, name, exc) from exc
        if not 200 <= response.status < 300:
            _raise_for(verb, resource, name, response.status, response.body, headers=response.headers)
        return response.body

    def _get_json(
        self, verb: str, resource: str, name: str, path: str, query: Sequence[tuple[str, str]] = ()
    ) -> dict[str, Any]:
        """GET a claim (or a page of them) within the read deadline, whatever the apiserver does."""
        data = self._call(
            verb,
            resource,
            name,
            "GET",
            path,
            query=query,
            idempotent=True,
            deadline=self.read_deadline,
            bounded=True,
        )
        return _decode(verb, resource, name, data)

    def _bounded(self, verb: str, resource: str, name: str, limit: float, call: Callable[[], bytes]) -> bytes:
        """``call()`` on the slow-read pool, waited for ``limit`` seconds at most."""
        with self._lock:
            if self._slow_reads is None:
                self._slow_reads = ThreadPoolExecutor(16, thread_name_prefix="kube-slow-read")
            pool = self._slow_reads
        future = pool.submit(call)
        try:
            return future.result(timeout=limit)
        except FutureTimeoutError:
            future.cancel()
            err = KubeError(
                f"{verb} {_target(resource, name)}: apiserver unreachable: TimeoutError: no complete "
                f"answer within the deadline of {limit:g} s",
                verb=verb,
                resource=resource,
                name=name,
                status=None,
                transient=True,
            )
            raise err from None

    # -- claims ----------------------------------------------------------------------------------
    def get_resource_claim(self, namespace: str, name: str) -> JsonObject:
        """GET one ResourceClaim as its JSON object (the prepare hot path)."""
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
        return self._get_json("get", "resourceclaims", f"{namespace}/{name}", path)

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
        items = obj.get("items") or []
        if not isinstance(items, list):
            raise KubeError(
                f"list {_target('resourceclaims', namespace)}: items is not a list",
                verb="list",
                resource="resourceclaims",
                name=namespace,
            )
        return items, str((obj.get("metadata") or {}).get("continue") or "")

    def apply_claim_status(
        self, namespace: str, name: str, devices: Sequence[Mapping[str, Any]], field_manager: str
    ) -> None:
        """Server-side apply ``status.devices`` (our entries only) with force.

        An empty ``devices`` removes every entry this field manager applied before. Sent over the
        lean transport where the claim reads use it, as one request of at most ``connect_timeout
        + timeout`` seconds in all (13 s by default); it may be sent twice when a kept-alive
        connection turns out closed, which is safe: a forced apply of the same body by the same
        field manager leaves the claim as one apply does. The answer (the whole claim, some KiB)
        is not decoded: nobody reads it, and decoding cost 50 us a call.
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
        items = obj.get("items") or []
        return list(items), str((obj.get("metadata") or {}).get("resourceVersion", ""))

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
        lean = self._lean(verb, resource, "")
        if lean is None:
            raw = self._send(
                verb,
                resource,
                "",
                "GET",
                _SLICES,
                query=query,
                stream=True,
                timeout=(self.connect_timeout, timeout_seconds + 30.0),
            )
            return SliceWatch(raw, verb)
        try:
            stream = lean.transport.stream(
                f"{_SLICES}?{urlencode(query)}", lean.headers(), deadline=timeout_seconds + 30.0
            )
        except Exception as exc:  # OSError, ssl.SSLError, ProtocolError
            raise _transport_error(verb, resource, "", exc) from exc
        if not 200 <= stream.status < 300:
            try:
                data = stream.read()
            except Exception:
                data = b""
            finally:
                stream.close()
            _raise_for(verb, resource, "", stream.status, data, headers=stream.headers)
        return SliceWatch(stream, verb)

    def close(self) -> None:
        """Release pooled connections (every transport); a later call opens new ones."""
        with self._lock:
            api, self._api = self._api, None
            reads, self._reads = self._reads, None
            pod, self._pod = self._pod, None
            slow, self._slow_reads = self._slow_reads, None
        if slow is not None:
            slow.shutdown(wait=False, cancel_futures=True)
        if reads is not None and reads[1] is not None:
            reads[1].close()
        if pod is not None:
            pod.transport.close()
        if api is not None:
            api.close()


_shared: dict[str | None, KubeClient] = {}
_shared_lock = threading.Lock()


def shared_client(kubeconfig: str | None = None) -> KubeClient:
    """The process-wide client for a kubeconfig (None: in-cluster); one connection pool for all."""
    with _shared_lock:
        client = _shared.get(kubeconfig)
        if client is None:
            client = _shared[kubeconfig] = KubeClient(kubeconfig)
        return client
