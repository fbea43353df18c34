"""Fixtures: fake apiserver + client (shared with the publisher tests) and a health fixture host."""

from __future__ import annotations

from tests.integration.publisher.conftest import DRIVER, NODE, api, client

__all__ = ["DRIVER", "NODE", "api", "client"]
