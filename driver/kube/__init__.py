"""Access to the Kubernetes apiserver: one shared client over one transport (see client.py)."""

from __future__ import annotations

from driver.kube.client import KubeClient, shared_client
from driver.kube.types import ClaimGetter, JsonObject

__all__ = ["ClaimGetter", "JsonObject", "KubeClient", "shared_client"]
