"""The e2e tier's own rendering of the kustomize base equals ``kustomize build`` (where kustomize exists)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from scripts.render_deploy import find_tool
from tests.e2e.conftest import DEPLOY_BASE, SKIPPED_KINDS, kustomize_base_objects


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def test_python_rendering_equals_kustomize_build() -> None:
    """Every object the tier applies is exactly what kustomize renders (DaemonSet aside: never applied)."""
    kustomize = find_tool("kustomize", None)
    if kustomize is None:
        pytest.skip("kustomize not found: scripts/build-deploy-tools.sh builds it (needs Go)")
    rendered = subprocess.run(
        [kustomize, "build", str(DEPLOY_BASE)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    theirs = {_key(o): o for o in yaml.safe_load_all(rendered) if o and o["kind"] not in SKIPPED_KINDS}
    ours = {_key(o): o for o in kustomize_base_objects() if o["kind"] not in SKIPPED_KINDS}
    assert sorted(ours) == sorted(theirs)
    for key, obj in ours.items():
        assert obj == theirs[key], key
