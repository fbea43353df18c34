"""The ``DRAPlugin`` gRPC services (v1 and v1beta1) on top of :class:`driver.plugin.DriverPlugin`.

One :class:`DraServicer` class serves every version, given that version's generated modules
(:class:`~driver.kubelet.translate.DraApi`); all of them share one :class:`ClaimCalls` core, and
the servicer only converts messages. Error model, as the kubelet reads it:

* a bad claim reference (see :mod:`driver.kubelet.translate`), a claim that cannot be read or
  fails the claim checks (:mod:`driver.kubelet.claims`) or a claim the driver failed is a
  per-claim ``error`` entry; the other claims of the request are still prepared;
* an exception raised by the driver is an infrastructure failure of the whole call and becomes the
  gRPC status ``INTERNAL`` with the message ``"<method>: driver failed: <Type>: <text>"``; the
  kubelet then ignores the response and retries the whole call later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import grpc

from driver.kubelet import claims as claim_layer
from driver.kubelet import translate
from driver.kubelet.claims import ClaimFetcher
from driver.kubelet.serialize import SerializeLock
from driver.kubelet.translate import DraApi
from driver.log import get_logger
from driver.plugin import ClaimRef, DriverPlugin, PrepareResult

__all__ = ["ClaimCalls", "DraServicer", "DriverCallError"]

_log = get_logger("kubelet.dra")
_Result = TypeVar("_Result")


class DriverCallError(Exception):
    """The driver raised: the whole call fails with gRPC INTERNAL."""


class ClaimCalls:
    """Version-neutral prepare/unprepare: check references, read claims, serialize, call the driver.

    The references are checked here, once (:func:`driver.kubelet.translate.check_claims`); the
    reads and the lock are :mod:`driver.kubelet.claims`'s (:func:`~driver.kubelet.claims.prepare_checked`,
    which does not check them again); the lock is held around the driver call only, never around
    the apiserver reads.
    """

    def __init__(
        self,
        plugin: DriverPlugin,
        fetcher: ClaimFetcher,
        lock: SerializeLock | None,
        on_refused: claim_layer.Refused | None = None,
    ) -> None:
        """``lock`` None: no cross-process lock (tests of a single process). ``on_refused``: see
        :data:`driver.kubelet.claims.Refused`."""
        self._plugin = plugin
        self._fetcher = fetcher
        self._hold: claim_layer.Hold = lock.hold if lock is not None else None
        self._on_refused = on_refused

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Per-UID results for every claim; raises :class:`DriverCallError` if the driver raised."""
        check = _checked(claims, "prepare")
        results: Mapping[str, PrepareResult] = {}
        if check.valid:
            results = self._call_driver(
                lambda refs: claim_layer.prepare_checked(
                    self._plugin, self._fetcher, self._hold, refs, self._on_refused
                ),
                check.valid,
                "prepare_claims",
            )
        complete = translate.complete_results(check.valid, results, check.rejected)
        debug = _debug_on()
        for claim in check.valid:
            result = complete[claim.uid]
            if result.error:
                _log.warning(
                    "claim prepare failed", claim_uid=claim.uid, claim=_name(claim), error=result.error
                )
            elif debug:  # the driver logs the success line (devices, pinning); repeat it on debug
                _log.debug(
                    "claim prepared",
                    claim_uid=claim.uid,
                    claim=_name(claim),
                    devices=[d.device_name for d in result.devices],
                )
        return complete

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Per-UID error text ("" = done) for every claim; raises :class:`DriverCallError`."""
        check = _checked(claims, "unprepare")
        errors: Mapping[str, str] = {}
        if check.valid:
            errors = self._call_driver(
                lambda refs: claim_layer.unprepare(self._plugin, self._hold, refs),
                check.valid,
                "unprepare_claims",
            )
        complete = translate.complete_errors(check.valid, errors, check.rejected)
        debug = _debug_on()
        for claim in check.valid:
            error = complete[claim.uid]
            if error:
                _log.warning("claim unprepare failed", claim_uid=claim.uid, claim=_name(claim), error=error)
            elif debug:
                _log.debug("claim unprepared", claim_uid=claim.uid, claim=_name(claim))
        return complete

    def _call_driver(
        self, call: Callable[[Sequence[ClaimRef]], _Result], claims: Sequence[ClaimRef], name: str
    ) -> _Result:
        """One driver call (reads and lock inside ``call``); whatever it raises fails the RPC."""
        try:
            return call(claims)
        except Exception as exc:
            _log.exception(f"driver {name} failed", claim_uids=[c.uid for c in claims])
            raise DriverCallError(f"{type(exc).__name__}: {exc}") from exc


def _checked(claims: Sequence[ClaimRef], call: str) -> translate.ClaimCheck:
    """The protocol-level check of a request, with a log line per rejected claim."""
    check = translate.check_claims(claims)
    for uid, reason in check.rejected.items():
        _log.warning("claim rejected", claim_uid=translate.shorten(uid, 128), call=call, error=reason)
    return check


def _debug_on() -> bool:
    """Whether debug lines are logged; asked once per call, as every call on the module's lazy
    logger binds a new one: a per-claim question would bind once per claim. Asked of the logger
    ``bind`` returns, not of the proxy: an attribute the proxy lacks is found by Python's failed
    lookup and the proxy's ``__getattr__``, which costs several times the question itself."""
    return _log.bind().is_enabled_for(logging.DEBUG)


def _name(claim: ClaimRef) -> str:
    return f"{claim.namespace}/{claim.name}"


def _abort(context: grpc.ServicerContext, method: str, exc: DriverCallError) -> NoReturn:
    context.abort(grpc.StatusCode.INTERNAL, f"{method}: driver failed: {exc}")


class DraServicer:
    """``DRAPlugin`` of one version (``api``): ``k8s.io.kubelet.pkg.apis.dra.<version>.DRAPlugin``,
    advertised as ``<version>.DRAPlugin``. The versions differ only in ``Device.share_id``, which
    v1beta1 lacks and drops (see :func:`~driver.kubelet.translate.prepare_response`)."""

    def __init__(self, calls: ClaimCalls, api: DraApi) -> None:
        self._calls = calls
        self.api = api

    def add_to(self, server: grpc.Server) -> None:
        """Serve this servicer's methods on ``server`` (the call slots are the server's interceptor)."""
        self.api.services.add_DRAPluginServicer_to_server(self, server)

    def NodePrepareResources(  # noqa: N802 (gRPC method name)
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        """Prepare the claims; see the module docstring for the error model."""
        try:
            results = self._calls.prepare(translate.claims_from_proto(request.claims))
        except DriverCallError as exc:
            _abort(context, "NodePrepareResources", exc)
        return translate.prepare_response(self.api, results)

    def NodeUnprepareResources(  # noqa: N802 (gRPC method name)
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        """Unprepare the claims; unknown claims succeed (the driver's contract)."""
        try:
            errors = self._calls.unprepare(translate.claims_from_proto(request.claims))
        except DriverCallError as exc:
            _abort(context, "NodeUnprepareResources", exc)
        return translate.unprepare_response(self.api, errors)
