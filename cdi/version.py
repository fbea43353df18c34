"""Choosing the lowest ``cdiVersion`` a spec needs.

Runtimes that vendor an older CDI library reject specs that declare a version they do not know, and
podman accepts only up to 0.5.0, so a spec declares the lowest version whose features it uses
(the Go library's ``MinimumRequiredVersion``). The features this model can express and where they
appeared: everything basic in 0.3.0, ``mounts[].type`` in 0.4.0, ``deviceNodes[].hostPath`` and
device names not starting with a letter in 0.5.0, ``additionalGids`` in 0.7.0. (0.6.0 brought only
annotations and dotted class names, which this model does not write.)
"""

from __future__ import annotations

from cdi.spec import ContainerEdits, Spec

__all__ = ["KNOWN_VERSIONS", "V030", "V040", "V050", "V070", "min_cdi_version"]

V030 = "0.3.0"
V040 = "0.4.0"
V050 = "0.5.0"
V070 = "0.7.0"
#: versions this library may write, oldest first
KNOWN_VERSIONS = (V030, V040, V050, V070)
_RANK = {version: rank for rank, version in enumerate(KNOWN_VERSIONS)}


def _edits_version(edits: ContainerEdits) -> str:
    if edits.additional_gids:
        return V070
    for node in edits.device_nodes:
        if node.host_path is not None and node.host_path != node.path:
            return V050
    for mount in edits.mounts:
        if mount.type:
            return V040
    return V030


def min_cdi_version(spec: Spec) -> str:
    """The lowest CDI version whose features ``spec`` uses."""
    needed = _edits_version(spec.edits)
    for device in spec.devices:
        if device.name and not device.name[0].isalpha() and _RANK[needed] < _RANK[V050]:
            needed = V050
        edits = device.edits
        if edits.device_nodes or edits.mounts or edits.additional_gids:  # the only parts that raise it
            found = _edits_version(edits)
            if _RANK[found] > _RANK[needed]:
                needed = found
    return needed
