"""The one exception hierarchy of numadra.

Kept in its own module so that every layer can raise and catch these without import loops::

    DriverError                      anything numadra raises on purpose
    ├── ConfigError                  bad flags or environment (CLI exit code 2)
    ├── InventoryError               the host tree cannot be read as expected (path in the message)
    ├── SliceError                   inventory cannot be expressed within the ResourceSlice API limits
    ├── JournalError                 the crash-safe journal is corrupt or of an unknown version
    ├── PinningError                 CPU/memory pinning cannot be done (allocator or backend)
    │   ├── CpuExhaustedError        not enough free CPUs on the requested NUMA node
    │   ├── PinRefusedError(reason)  a container's pinning marker is refused; reason: a short label
    │   └── ConsumersUnknownError    a claim's consumers could not be read from the apiserver
    ├── KubeError                    the apiserver could not be reached or refused a call;
    │                                carries the answer's ApiStatus when it was one
    ├── ClaimError(claim_uid)        one claim cannot be prepared/unprepared; carries the UID
    │   └── ConfigDecodeError        the claim's opaque configuration is invalid
    ├── UntrustedFileError(path)     a file read is refused: a link, not a regular file, too large,
    │   │                            not text (also an OSError, so every "cannot read" path takes it)
    │   └── UntrustedHostPathError   a host path is refused for a container: it resolves through a
    │                                link or directory someone other than root could change
    └── UntrustedValueError(what)    a value from outside (env var, annotation, file field) is
                                     malformed or out of bounds (also a ValueError)

Errors marked :class:`RecoverableError` (via :func:`recoverable`) are logged and retried by the
caller instead of stopping the driver, as the Go helper does with ``ErrRecoverable``.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

__all__ = [
    "ApiStatus",
    "ClaimError",
    "ConfigDecodeError",
    "ConfigError",
    "ConsumersUnknownError",
    "CpuExhaustedError",
    "DriverError",
    "InventoryError",
    "JournalError",
    "KubeError",
    "PinRefusedError",
    "PinningError",
    "RecoverableError",
    "SliceError",
    "UntrustedFileError",
    "UntrustedHostPathError",
    "UntrustedValueError",
    "is_recoverable",
    "recoverable",
]


class DriverError(Exception):
    """Base class of every error numadra raises on purpose."""


class ConfigError(DriverError):
    """Invalid command-line flags, environment or configuration file."""


class InventoryError(DriverError):
    """The host tree (sysfs/procfs) could not be read as expected."""


class SliceError(DriverError):
    """The inventory cannot be expressed as valid ResourceSlices."""


class JournalError(DriverError):
    """The journal is corrupt, has a bad checksum or an unknown schema version."""


class PinningError(DriverError):
    """CPU or memory pinning failed (allocation or enforcement)."""


class CpuExhaustedError(PinningError):
    """Not enough free CPUs on the requested NUMA node(s)."""


class PinRefusedError(PinningError):
    """A container's pinning marker is refused: the runtime must not create the container.

    ``reason`` is one label of a small fixed set (``driver.pinning.failures``), for the metric and
    the pod's event; the message says which claim, pod and container, and why.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ConsumersUnknownError(PinningError):
    """The pods a claim is reserved for could not be learned (apiserver unreachable, too slow,
    refused the read, or the claim's name is not known); never proof that a pod is not one."""


@dataclass(frozen=True, slots=True)
class ApiStatus:
    """The apiserver's own word on a failed call: the answer's body, when it was a JSON object of
    ``kind: Status``, ``apiVersion: v1`` (``driver.kube.status.parse_status``).

    Kept apart from the HTTP status because only this says *which* object the answer is about: a
    proxy's or a gateway's 404 page has the same HTTP status and names nothing. ``name``,
    ``group`` and ``kind`` are the Status' ``details`` ("" where absent; ``kind`` is the
    resource, e.g. ``resourceclaims``).
    """

    reason: str  # "NotFound", "Conflict", "AlreadyExists"...; "" where absent
    code: int  # the Status' own code (0 where absent)
    message: str = ""
    name: str = ""
    group: str = ""
    kind: str = ""


class KubeError(DriverError):
    """A call to the Kubernetes apiserver failed.

    ``status`` is the HTTP status (None when no answer came: refused, timeout, broken stream), so
    callers can tell "not found" (404) from "conflict" (409) without parsing text. ``transient``
    says whether retrying the same call later may succeed (unreachable, 409, 429, 5xx);
    ``retry_after`` the seconds the answer's ``Retry-After`` asked to wait (429, 503), if any.
    ``api_status`` is the answer's Status object, None when the body was anything else (an HTML
    page, a proxy's text): only a Status may decide that an object is gone
    (``driver.kube.status.is_not_found``), never the message text.
    """

    def __init__(
        self,
        message: str,
        *,
        verb: str = "",
        resource: str = "",
        name: str = "",
        status: int | None = None,
        transient: bool = False,
        retry_after: float | None = None,
        api_status: ApiStatus | None = None,
    ) -> None:
        super().__init__(message)
        self.verb = verb
        self.resource = resource
        self.name = name
        self.status = status
        self.transient = transient
        self.retry_after = retry_after
        self.api_status = api_status


class ClaimError(DriverError):
    """One ResourceClaim cannot be handled; the message says why and the UID says which."""

    def __init__(self, claim_uid: str, message: str) -> None:
        super().__init__(f"claim {claim_uid}: {message}")
        self.claim_uid = claim_uid
        self.reason = message


class ConfigDecodeError(ClaimError):
    """The opaque device configuration of a claim is not valid for this driver."""


class UntrustedFileError(DriverError, OSError):
    """A file numadra reads was refused (:mod:`driver.untrusted.files`): ``path`` and ``reason`` say
    which and why. An ``OSError`` too (``filename`` is the path), so a caller that treats "cannot
    read" as "absent" or as its own error keeps doing so without a second except clause."""

    def __init__(self, path: str, reason: str, err: int = errno.EINVAL) -> None:
        super().__init__(err, reason, path)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class UntrustedHostPathError(UntrustedFileError):
    """A host path was refused as a mount source or device node of a container
    (:mod:`driver.untrusted.hostpaths`): ``path`` is the path asked for, ``reason`` names the
    component and what is wrong with it."""


class UntrustedValueError(DriverError, ValueError):
    """A value from outside the process (an env var, an annotation, a field of a file) is malformed
    or out of bounds (:mod:`driver.untrusted.values`); ``what`` names where it came from. A
    ``ValueError`` too, so parsers' callers that already refuse a ValueError refuse this one."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.what = what
        self.reason = reason


class RecoverableError(DriverError):
    """Wraps an error after which the driver keeps running (logged, retried later)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.__cause__ = cause


def recoverable(err: BaseException) -> RecoverableError:
    """Mark ``err`` as recoverable (publishing failures, transient API errors)."""
    return err if isinstance(err, RecoverableError) else RecoverableError(err)


def is_recoverable(err: BaseException) -> bool:
    """True when ``err`` or any error in its cause chain is marked recoverable."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, RecoverableError):
            return True
        seen.add(id(cur))
        cur = cur.__cause__
    return False
