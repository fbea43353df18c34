"""Crash-safe journal of prepared claims."""
