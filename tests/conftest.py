"""Shared pytest configuration: skip tiers whose prerequisites are missing, with a clear reason."""

from __future__ import annotations
