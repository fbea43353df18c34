"""A small Container Device Interface library: spec model, validation, naming, atomic writes.

No driver logic lives here: ``driver/claims`` decides what goes into a spec, this package makes sure
it is a spec every CDI loader accepts, with the lowest ``cdiVersion`` possible, written atomically.
"""

from __future__ import annotations

from cdi.io import (
    DirsUnder,
    SymlinkError,
    atomic_write_bytes,
    ensure_dir,
    fsync_dir,
    remove_file,
    spec_bytes,
    spec_json_bytes,
    spec_text,
    write_spec,
)
from cdi.naming import (
    CdiNameError,
    parse_qualified_name,
    qualified_name,
    split_kind,
    transient_spec_file_name,
    validate_class,
    validate_device_name,
    validate_kind,
    validate_vendor,
)
from cdi.spec import (
    HOOK_NAMES,
    KNOWN_VERSIONS,
    CdiSpecError,
    CheckedHostPath,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    Mount,
    Spec,
    min_cdi_version,
    spec_from_json,
    validate_spec,
)

__all__ = [
    "HOOK_NAMES",
    "KNOWN_VERSIONS",
    "CdiNameError",
    "CdiSpecError",
    "CheckedHostPath",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "DirsUnder",
    "Hook",
    "Mount",
    "Spec",
    "SymlinkError",
    "atomic_write_bytes",
    "ensure_dir",
    "fsync_dir",
    "min_cdi_version",
    "parse_qualified_name",
    "qualified_name",
    "remove_file",
    "spec_bytes",
    "spec_from_json",
    "spec_json_bytes",
    "spec_text",
    "split_kind",
    "transient_spec_file_name",
    "validate_class",
    "validate_device_name",
    "validate_kind",
    "validate_spec",
    "validate_vendor",
    "write_spec",
]
