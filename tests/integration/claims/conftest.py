"""Fixtures of the claims integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.claims._world import World


@pytest.fixture
def world(tmp_path: Path) -> World:
    """An empty node: no claims, fresh CDI and plugin directories."""
    return World(tmp_path)
