"""Access to the Kubernetes apiserver: one shared client over one transport (see client.py).

The names are loaded on first use: :mod:`driver.kube.types` (the protocols the kubelet layer
reads claims through) is imported on the plugin registration path, which must not pay for the
HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver.lazy import names_from

if TYPE_CHECKING:
    from driver.kube.client import KubeClient
    from driver.kube.types import ClaimGetter, JsonObject

__all__ = ["ClaimGetter", "JsonObject", "KubeClient"]

_HOME = {
    "ClaimGetter": "driver.kube.types",
    "JsonObject": "driver.kube.types",
    "KubeClient": "driver.kube.client",
}


__getattr__ = names_from(__name__, _HOME)
