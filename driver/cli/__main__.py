"""``python -m driver.cli``."""

from __future__ import annotations

from driver.cli import main

raise SystemExit(main())
