"""Opaque device configuration of numadra: the schema, strict decoding, and precedence.

Users put configuration in a claim (or an admin in a DeviceClass); the scheduler copies all of it,
for every driver, into ``status.allocation.devices.config``. Schema (``apiVersion:
numadra.dev/v1alpha1``), one small object per device type::

    {"apiVersion": "numadra.dev/v1alpha1", "kind": "CpuConfig", "mode": "shared", "env": {"OMP_X": "1"}}

* ``GpuConfig``, ``NicConfig``: ``env`` only; ``CpuConfig``: ``env`` and ``mode``
  (``exclusive`` default, or ``shared``: the request's CPUs form the pod's shared pool);
  ``DeviceConfig``: ``env``, applied to devices of every type.
* ``env``: at most 32 variables, names ``[A-Z][A-Z0-9_]*`` (≤ 64 characters) outside the reserved
  ``NUMADRA_`` prefix, string values ≤ 1024 characters without NUL.

Decoding is strict: unknown fields, wrong types and non-objects are errors that quote the field,
because a typo silently ignored is a misconfigured workload that looks fine.

Precedence (as the kubelet and the scheduler read ``devices.config``): class configs first, then
claim configs, each in list order; a config applies to a result when its ``requests`` is empty,
equals the result's request, or names the parent ``<req>`` of a ``<req>/<sub>`` result. A config
only applies to the device types its kind names. Later configs override the fields they set
(``mode``; ``env`` key by key).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from driver.inventory.model import DeviceKind
from driver.pinning.types import ENV_PREFIX, CpuMode

__all__ = [
    "API_VERSION",
    "ConfigEntry",
    "EffectiveConfig",
    "OpaqueConfig",
    "applies_to_request",
    "decode_parameters",
    "effective_config",
]

API_VERSION = "numadra.dev/v1alpha1"
_KINDS: dict[str, tuple[DeviceKind | None, frozenset[str]]] = {
    "GpuConfig": (DeviceKind.GPU, frozenset({"env"})),
    "NicConfig": (DeviceKind.NIC, frozenset({"env"})),
    "CpuConfig": (DeviceKind.CPU, frozenset({"env", "mode"})),
    "DeviceConfig": (None, frozenset({"env"})),
}
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_RESERVED_PREFIX = ENV_PREFIX  # the pinning markers: a user value would forge them
_MAX_ENV = 32
_MAX_VALUE = 1024
_MODES = frozenset(m.value for m in CpuMode)
_HEADER_FIELDS = frozenset({"apiVersion", "kind"})


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """One decoded configuration object."""

    kind: str
    device_kind: DeviceKind | None  # None: applies to every device type
    env: tuple[tuple[str, str], ...] = ()
    mode: CpuMode | None = None


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """A decoded config with the requests it targets (empty = all) and where it came from."""

    requests: tuple[str, ...]
    config: OpaqueConfig
    source: str  # "FromClass" | "FromClaim"


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """What applies to one device after precedence."""

    env: Mapping[str, str] = field(default_factory=dict)
    mode: CpuMode = CpuMode.EXCLUSIVE


def decode_parameters(params: Any) -> OpaqueConfig:
    """Decode ``opaque.parameters`` strictly; raises ValueError with a precise message."""
    if not isinstance(params, Mapping):
        raise ValueError(f"parameters must be a JSON object, got {_json_type(params)}")
    api_version = params.get("apiVersion")
    if api_version != API_VERSION:
        raise ValueError(f"apiVersion must be {API_VERSION!r}, got {api_version!r}")
    kind = params.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(f"kind must be one of {', '.join(sorted(_KINDS))}, got {kind!r}")
    device_kind, allowed = _KINDS[kind]
    unknown = sorted(params.keys() - allowed - _HEADER_FIELDS)
    if unknown:
        allowed_text = ", ".join(sorted(allowed))
        raise ValueError(f"{kind}: unknown field(s) {', '.join(unknown)} (allowed: {allowed_text})")
    env = _decode_env(kind, params["env"]) if "env" in params else ()
    mode = None
    if "mode" in params:
        raw = params["mode"]
        if not isinstance(raw, str) or raw not in _MODES:
            raise ValueError(f"{kind}.mode must be 'exclusive' or 'shared', got {raw!r}")
        mode = CpuMode(raw)
    return OpaqueConfig(kind=kind, device_kind=device_kind, env=env, mode=mode)


def _decode_env(kind: str, raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{kind}.env must be an object of strings, got {_json_type(raw)}")
    if len(raw) > _MAX_ENV:
        raise ValueError(f"{kind}.env has {len(raw)} variables, at most {_MAX_ENV}")
    out: list[tuple[str, str]] = []
    for name, value in raw.items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{kind}.env: invalid variable name {name!r}: must match [A-Z][A-Z0-9_]*")
        if name.startswith(_RESERVED_PREFIX):
            raise ValueError(f"{kind}.env: variable {name!r} uses the reserved prefix {_RESERVED_PREFIX}")
        if not isinstance(value, str):
            raise ValueError(f"{kind}.env.{name} must be a string, got {_json_type(value)}")
        if len(value) > _MAX_VALUE or "\x00" in value:
            raise ValueError(f"{kind}.env.{name}: value longer than {_MAX_VALUE} characters or with NUL")
        out.append((name, value))
    return tuple(out)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def applies_to_request(config_requests: Sequence[str], result_request: str) -> bool:
    """True when a config with ``config_requests`` targets a result of ``result_request``."""
    if not config_requests:
        return True
    return result_request in config_requests or result_request.partition("/")[0] in config_requests


def _claim_after_class(entry: ConfigEntry) -> bool:
    """The sort key of precedence: class configs (False) before the claim's (True)."""
    return entry.source != "FromClass"


#: what a result gets when no config applies to it (most results): one shared, read-only value
_DEFAULT = EffectiveConfig(env=MappingProxyType({}))


def effective_config(entries: Sequence[ConfigEntry], request: str, kind: DeviceKind) -> EffectiveConfig:
    """Fold the matching configs for one result, class configs first, later ones winning."""
    if not entries:
        return _DEFAULT
    env: dict[str, str] = {}
    mode = CpuMode.EXCLUSIVE
    for entry in sorted(entries, key=_claim_after_class) if len(entries) > 1 else entries:
        cfg = entry.config
        if (cfg.device_kind is not None and cfg.device_kind != kind) or not applies_to_request(
            entry.requests, request
        ):
            continue
        env.update(cfg.env)
        if cfg.mode is not None:
            mode = cfg.mode
    if not env and mode is CpuMode.EXCLUSIVE:
        return _DEFAULT
    return EffectiveConfig(env=env, mode=mode)
