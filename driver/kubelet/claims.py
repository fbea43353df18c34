"""The claim layer of the kubelet side: read the claims of a call, check them, then call the driver.

This is what the Go ``kubeletplugin`` helper does around ``PrepareResourceClaims``, in one place
and with one set of rules:

1. the references are checked once, by the protocol check
   (:func:`driver.kubelet.translate.check_claims`: names, duplicate UIDs, batch size), before
   :func:`prepare_checked`: on the kubelet path by the servicer, for a caller outside it
   (benchmarks, tests of a driver) by :func:`prepare`, so both meet the same rules and messages;
2. :class:`ClaimFetcher` reads the claims from the apiserver (one GET, or one LIST for many of a
   namespace, see below), *before* any lock is taken, so slow API calls never hold up other calls,
   also not those of the other process of a rolling update;
3. :func:`check_claim` checks what holds for every driver: the object's UID is the reference's
   (else the claim was deleted and re-created under the name) and it has ``status.allocation``;
   what the allocation says about devices (driver, pool, device, configs) is the driver's;
4. :func:`prepare_checked` holds the cross-process lock (``SerializeLock``) around the driver call only
   and hands it the fetched claims; :func:`unprepare` reads nothing and holds it around the call.

A claim that fails 1-3 gets its per-claim error (naming namespace/name and UID) and never reaches
the driver; the other claims of the call go on.

Reading: the kubelet names the claims of a pod (all in the pod's namespace) and the driver must
read each from the apiserver; nothing else in the request says what was allocated. The Go helper
GETs them one after another. On a node the cost of a GET is mostly per request (TLS record, HTTP
framing, authentication and authorization, a quorum read, JSON), so for many claims of one
namespace a single LIST of that namespace is far cheaper than as many GETs.

A LIST without ``resourceVersion`` is a consistent read, exactly like a GET, so the answer is the
same; only its size differs. To keep a crowded namespace from costing more than the GETs it
replaces, the LIST asks for one page of at most ``4 x claims`` (at least 64) objects: a claim on
that page is taken from it, a claim missing from a complete listing does not exist (the GET's
404), and a claim missing from an incomplete page, or from a page with junk items (not objects,
no name), is fetched with its own GET. Any LIST failure
falls back to GETs for the whole namespace; a 403 (RBAC without ``list``) turns LISTs off for the
process after one warning, so a cluster that grants only ``get`` still works.

Time is bounded: each read ends by the source's ``read_deadline`` (the client enforces it), and a
call waits for its GETs on the shared I/O pool no longer than two read deadlines (plus a second)
after it started, so that GETs queued behind other calls' stuck reads still end in a per-claim
error within the kubelet's 45 s call timeout.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeGuard, runtime_checkable

from driver.errors import KubeError
from driver.kube.types import ClaimGetter, JsonObject
from driver.kubelet.translate import check_claims
from driver.log import get_logger
from driver.plugin import Claim, ClaimRef, DriverPlugin, PrepareResult, describe_claim, read_ahead_of

__all__ = [
    "ClaimFetcher",
    "ClaimLister",
    "Fetched",
    "Hold",
    "check_claim",
    "prepare",
    "prepare_checked",
    "read_claims",
    "unprepare",
]

_log = get_logger("kubelet.claims")

#: the cross-process lock of one call (``SerializeLock.hold``), or None (tests of one process)
Hold = Callable[[], AbstractContextManager[None]] | None

#: per claim UID: the claim object, or the error text that becomes the claim's prepare error
Fetched = dict[str, JsonObject | str]


@runtime_checkable
class ClaimLister(Protocol):
    """A claim source that can also LIST a namespace (``driver.kube.client.KubeClient``)."""

    def list_resource_claims(
        self, namespace: str, *, limit: int = 0, continue_token: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """One page of the namespace's claims sorted by name, and the ``continue`` token ("" = last)."""
        ...


def _not_found(ref: ClaimRef) -> str:
    return f"{describe_claim(ref)}: ResourceClaim not found in the apiserver (deleted?)"


class ClaimFetcher:
    """Fetches the claims of one call (see the module docstring for when it LISTs).

    Thread-safe; GETs of several claims run on a small pool of I/O threads (they release the GIL
    while waiting for the apiserver).
    """

    def __init__(
        self,
        source: ClaimGetter,
        *,
        list_from: int = 4,
        max_workers: int = 16,
        page_factor: int = 4,
        min_page: int = 64,
        read_deadline: float | None = None,
    ) -> None:
        """``read_deadline``: seconds one read may take (default: the source's ``read_deadline``,
        if it has one; else a call waits for its reads without a bound)."""
        self._source = source
        if read_deadline is None:
            found = getattr(source, "read_deadline", None)
            read_deadline = float(found) if isinstance(found, int | float) else None
        self._read_deadline = read_deadline
        self._lister = source if isinstance(source, ClaimLister) else None
        self._list_from = list_from
        self._max_workers = max_workers
        self._page_factor = page_factor
        self._min_page = min_page
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        #: set after a 403 on LIST: the RBAC grants only ``get``, so stop trying
        self.list_forbidden = False

    def fetch(self, refs: Sequence[ClaimRef]) -> Fetched:
        """The claim object or an error text for every ref (refs have distinct UIDs)."""
        started = time.monotonic()
        fetched: Fetched = {}
        to_get: list[ClaimRef] = []
        for namespace, group in _by_namespace(refs).items():
            if self._lister is not None and not self.list_forbidden and len(group) >= self._list_from:
                to_get.extend(self._from_list(self._lister, namespace, group, fetched))
            else:
                to_get.extend(group)
        fetched.update(self._get_all(to_get, started))
        return fetched

    def close(self) -> None:
        """Stop the GET threads (idempotent)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    # -- LIST ------------------------------------------------------------------------------------

    def _from_list(
        self, lister: ClaimLister, namespace: str, group: Sequence[ClaimRef], fetched: Fetched
    ) -> list[ClaimRef]:
        """Fill ``fetched`` from one LIST page; return the refs that still need a GET."""
        limit = max(self._min_page, self._page_factor * len(group))
        try:
            items, continue_token = lister.list_resource_claims(namespace, limit=limit)
        except KubeError as exc:
            self._list_failed(namespace, group, exc)
            return list(group)
        except Exception as exc:
            _log.exception("claim LIST failed unexpectedly", namespace=namespace, claim_uids=_uids(group))
            self._list_failed(namespace, group, exc)
            return list(group)
        by_name: dict[str, JsonObject] = {}
        junk = 0
        for item in items:
            name = _name_of(item)
            if name:
                by_name[name] = item
            else:
                junk += 1
        if junk:
            # An item without a readable name may be one of ours: its absence proves nothing, and
            # the GET of each claim not found gives that claim its own answer (or error).
            _log.warning(
                "claim LIST returned items without a name; fetching the claims not found one GET each",
                namespace=namespace,
                claim_uids=_uids(group),
                junk_items=junk,
            )
        missing: list[ClaimRef] = []
        for ref in group:
            claim = by_name.get(ref.name)
            if claim is not None:
                fetched[ref.uid] = claim
            elif continue_token or junk:
                missing.append(ref)  # maybe on a later page: its own GET is cheaper than paging
            else:
                fetched[ref.uid] = _not_found(ref)
        _log.debug(
            "claims listed",
            namespace=namespace,
            claim_uids=_uids(group),
            listed=len(items),
            complete=not continue_token,
            fetched_separately=len(missing),
        )
        return missing

    def _list_failed(self, namespace: str, group: Sequence[ClaimRef], exc: BaseException) -> None:
        if isinstance(exc, KubeError) and exc.status == 403:
            self.list_forbidden = True
            _log.warning(
                "claim LIST forbidden; fetching claims one GET each from now on (grant 'list' on "
                "resourceclaims to the driver's ClusterRole for faster multi-claim prepares)",
                namespace=namespace,
                claim_uids=_uids(group),
                error=str(exc),
            )
            return
        _log.warning(
            "claim LIST failed; falling back to one GET per claim",
            namespace=namespace,
            claim_uids=_uids(group),
            error=str(exc),
        )

    # -- GET -------------------------------------------------------------------------------------

    def _get_one(self, ref: ClaimRef) -> JsonObject | str:
        try:
            return self._source.get_resource_claim(ref.namespace, ref.name)
        except KubeError as exc:
            if exc.status == 404:
                return _not_found(ref)
            return f"{describe_claim(ref)}: cannot get ResourceClaim: {exc}"
        except Exception as exc:
            _log.exception("claim GET failed unexpectedly", claim_uid=ref.uid)
            return f"{describe_claim(ref)}: cannot get ResourceClaim: {exc!r}"

    def _get_all(self, refs: Sequence[ClaimRef], started: float) -> Fetched:
        """GET every claim, in parallel when there are several, until the call's wait bound."""
        if len(refs) <= 1:
            return {ref.uid: self._get_one(ref) for ref in refs}
        pool = self._executor()
        futures: list[Future[JsonObject | str]] = [pool.submit(self._get_one, ref) for ref in refs]
        timeout = None
        if self._read_deadline is not None:
            timeout = max(0.0, started + 2 * self._read_deadline + 1.0 - time.monotonic())
        wait(futures, timeout=timeout)
        fetched: Fetched = {}
        for ref, future in zip(refs, futures, strict=True):
            if future.done() and not future.cancelled():
                fetched[ref.uid] = future.result()
            else:
                future.cancel()
                fetched[ref.uid] = (
                    f"{describe_claim(ref)}: cannot get ResourceClaim: no answer from the apiserver "
                    f"within {time.monotonic() - started:.0f} s (reads queued behind slow ones)"
                )
        return fetched

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="claims-io")
            return self._pool


def _by_namespace(refs: Iterable[ClaimRef]) -> dict[str, list[ClaimRef]]:
    groups: dict[str, list[ClaimRef]] = {}
    for ref in refs:
        groups.setdefault(ref.namespace, []).append(ref)
    return groups


def _is_map(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, without the ABC check for the dicts JSON decodes into: the
    ABC check costs more than the rest of finding a LIST item's name."""
    return type(value) is dict or isinstance(value, Mapping)


def _name_of(item: object) -> str:
    """The item's ``metadata.name``, or "" for anything that is not a named object."""
    if not _is_map(item):
        return ""
    meta = item.get("metadata")
    name = meta.get("name") if _is_map(meta) else None
    return name if isinstance(name, str) else ""


def _uids(refs: Sequence[ClaimRef]) -> list[str]:
    return [ref.uid for ref in refs]


# -- the call --------------------------------------------------------------------------------------


def check_claim(ref: ClaimRef, obj: JsonObject) -> str:
    """Why the object read for ``ref`` cannot be prepared by any driver, or "" when it can.

    The rules the Go helper applies before it calls a driver: the apiserver's claim is the one the
    kubelet means (same UID: a claim deleted and re-created under its name is another claim) and
    it is allocated.
    """
    meta = obj.get("metadata")
    uid = meta.get("uid") if _is_map(meta) else None
    if uid != ref.uid:
        return f"{describe_claim(ref)}: got replaced: the apiserver's claim has UID {uid!r}"
    status = obj.get("status")
    allocation = status.get("allocation") if _is_map(status) else None
    if not _is_map(allocation):
        return f"{describe_claim(ref)}: not allocated (status.allocation is missing)"
    return ""


def read_claims(
    fetcher: ClaimFetcher, refs: Sequence[ClaimRef], fail: Callable[[ClaimRef, str], None]
) -> list[Claim]:
    """Steps 2-3 of the module docstring for checked ``refs`` (distinct UIDs, valid names): the
    claims fit for the driver; ``fail`` gets the rest."""
    fetched = fetcher.fetch(refs)
    claims: list[Claim] = []
    for ref in refs:
        got = fetched[ref.uid]
        problem = got if isinstance(got, str) else check_claim(ref, got)
        if problem:
            fail(ref, problem)
        elif not isinstance(got, str):
            claims.append(Claim(ref, got))
    return claims


def _held(hold: Hold) -> AbstractContextManager[None]:
    return hold() if hold is not None else contextlib.nullcontext()


#: told how many claims of a call were refused before the driver (unreadable, replaced,
#: unallocated) and how long the reads took: the metrics count them as failed prepares
Refused = Callable[[int, float], None]


def prepare_checked(
    plugin: DriverPlugin,
    fetcher: ClaimFetcher,
    hold: Hold,
    refs: Sequence[ClaimRef],
    on_refused: Refused | None = None,
) -> dict[str, PrepareResult]:
    """Read and check the claims of checked ``refs``, then call the driver under the lock.

    ``refs`` passed the reference check already (distinct UIDs, valid names: the kubelet path's
    :func:`~driver.kubelet.translate.check_claims`); one result per UID. An exception of the driver
    propagates (the caller fails the whole call).
    """
    results: dict[str, PrepareResult] = {}
    started = time.perf_counter()
    claims = read_claims(
        fetcher, refs, lambda ref, msg: results.__setitem__(ref.uid, PrepareResult(error=msg))
    )
    if results and on_refused is not None:
        on_refused(len(results), time.perf_counter() - started)
    if claims:
        read_ahead = read_ahead_of(plugin)
        if read_ahead is not None:
            read_ahead(claims)  # before the lock: its holder never waits for this work
        with _held(hold):
            results.update(plugin.prepare_claims(claims))
    return results


def prepare(
    plugin: DriverPlugin,
    fetcher: ClaimFetcher,
    hold: Hold,
    refs: Sequence[ClaimRef],
    on_refused: Refused | None = None,
) -> dict[str, PrepareResult]:
    """The kubelet path's reference check, then :func:`prepare_checked`: for a caller off that path.

    A ref the check rejects (a bad name, a UID named more than once, too many claims) gets its
    error result, as the kubelet would, and counts as refused.
    """
    started = time.perf_counter()
    check = check_claims(refs)
    refused = {uid: PrepareResult(error=error) for uid, error in check.rejected.items()}
    if refused and on_refused is not None:
        on_refused(len(refused), time.perf_counter() - started)
    return {**refused, **prepare_checked(plugin, fetcher, hold, check.valid, on_refused)}


def unprepare(plugin: DriverPlugin, hold: Hold, refs: Sequence[ClaimRef]) -> dict[str, str]:
    """Call the driver under the lock (nothing to read: the driver's journal knows the claim)."""
    with _held(hold):
        return dict(plugin.unprepare_claims(refs))
