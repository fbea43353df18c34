"""Access to the Kubernetes apiserver (official client, imported lazily, one shared client)."""

from __future__ import annotations

from driver.kube.client import KubeClient, shared_client
from driver.kube.types import ClaimGetter, JsonObject

__all__ = ["ClaimGetter", "JsonObject", "KubeClient", "shared_client"]
