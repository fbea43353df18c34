"""Crash-safe journal of prepared claims."""

from __future__ import annotations

from driver.state.entry import JournalEntry, StoredFile
from driver.state.journal import (
    JOURNAL_FILE,
    JOURNAL_KIND,
    JOURNAL_VERSION,
    Journal,
    journal_path,
)

__all__ = [
    "JOURNAL_FILE",
    "JOURNAL_KIND",
    "JOURNAL_VERSION",
    "Journal",
    "JournalEntry",
    "StoredFile",
    "journal_path",
]
