"""Path prefixes for claim files: plain strings that spell what pathlib would."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.claims.paths import dir_prefix


@pytest.mark.parametrize("directory", ["/", "/var/run/cdi", "/var/run/cdi/", "rel/dir", ".", "/a/./b"])
def test_dir_prefix_joins_like_pathlib(directory: str) -> None:
    """prefix + name is exactly str(Path(directory) / name), also for the root, '.' and odd spellings."""
    path = Path(directory)
    for name in ("numadra.dev_claim_u-1.json", "dra-device-metadata"):
        assert dir_prefix(path) + name == str(path / name)
