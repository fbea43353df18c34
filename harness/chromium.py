"""Headless Chromium as a real SVG consumer: renders a file to PNG, and reads the PNG back.

Used by the browser check of the topology picture and by ``scripts/topology_picture.py`` (the PNG
in docs/). Chromium is the Debian package ``chromium``; :func:`find_chromium` returns None when it
is missing so that callers can skip with the reason. The PNG reader handles what Chromium writes
(8-bit RGB/RGBA, not interlaced) with the standard library only.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

__all__ = ["dump_dom", "find_chromium", "png_colours", "png_pixels", "png_size", "screenshot"]


def find_chromium() -> str | None:
    """The Chromium binary on PATH (Debian: chromium; elsewhere chromium-browser), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(browser: str, page: Path, png: Path, *, size: tuple[int, int], timeout: float = 120.0) -> str:
    """Render ``page`` at ``size`` (width, height) into ``png``; returns Chromium's stderr.

    ``--no-sandbox`` because CI runs as root, where Chromium refuses its sandbox.
    """
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--allow-file-access-from-files",
        f"--screenshot={png}",
        f"--window-size={size[0]},{size[1]}",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0 or not png.exists():
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stderr


def dump_dom(browser: str, page: Path, timeout: float = 120.0) -> str:
    """The DOM Chromium built from ``page`` (an XML error shows up as a ``parsererror`` element)."""
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def png_colours(data: bytes, step: int = 2) -> set[str]:
    """The colours (``rrggbb``) of every ``step``-th pixel of every ``step``-th row."""
    bpp = 3 if data[25] == 2 else 4
    seen: set[str] = set()
    for row in png_pixels(data)[::step]:
        for i in range(0, len(row) - bpp + 1, step * bpp):
            seen.add(row[i : i + 3].hex())
    return seen


def png_pixels(data: bytes) -> list[bytes]:
    """The rows of an 8-bit RGB or RGBA, non-interlaced PNG, unfiltered (raw pixel bytes per row)."""
    width, height = png_size(data)
    depth, colour, _, _, interlace = data[24:29]
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour}, interlace {interlace})")
    bpp = 3 if colour == 2 else 4
    idat, pos = b"", 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        chunk = data[pos + 4 : pos + 8]
        if chunk == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind: int = raw[start]
        line = bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                line[i] = (line[i] + _paeth(left, up, up_left)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return rows
