"""Line charts as SVG text, for the benches' curves (no plotting library: a few dozen lines do).

Each chart has one x axis (the fill level: claims, devices, CPUs), drawn at even spacing with its
values as labels, because the levels span orders of magnitude; one y axis from zero; and one line
per series. A target, when given, is a dashed line across the chart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

__all__ = ["line_chart"]

_W, _H = 520, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 40, 48
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def _nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (the y axis's top)."""
    if value <= 0:
        return 1.0
    step = 10.0 ** len(str(int(value))) / 100 if value >= 1 else 0.001
    while step * 10 < value:
        step *= 10
    for factor in (1, 2, 5, 10):
        if step * factor >= value:
            return step * factor
    return step * 10


def line_chart(
    title: str,
    xs: Sequence[int],
    series: Mapping[str, Sequence[float]],
    *,
    x_label: str,
    y_label: str,
    target: float | None = None,
) -> str:
    """An SVG document: one line per ``series`` over ``xs``; ``target`` a dashed horizontal line."""
    values = [v for line in series.values() for v in line if v == v]  # NaN left out
    top = _nice_top(max([*values, target or 0.0, 0.0]))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x_at(i: int) -> float:
        return _LEFT + (plot_w * i / max(1, len(xs) - 1))

    def y_at(v: float) -> float:
        return _TOP + plot_h * (1 - v / top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="11">',
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<text x="{_W / 2}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_LEFT + plot_w}" y2="{_TOP + plot_h}" '
        'stroke="black"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}" stroke="black"/>',
    ]
    for k in range(5):
        v = top * k / 4
        y = y_at(v)
        out.append(f'<line x1="{_LEFT - 4}" y1="{y:.1f}" x2="{_LEFT + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
    for i, x in enumerate(xs):
        out.append(f'<text x="{x_at(i):.1f}" y="{_TOP + plot_h + 16}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{_LEFT + plot_w / 2}" y="{_H - 10}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text x="14" y="{_TOP + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + plot_h / 2})">{escape(y_label)}</text>'
    )
    if target is not None:
        y = y_at(target)
        out.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + plot_w}" y2="{y:.1f}" '
            'stroke="#888" stroke-dasharray="6 4"/>'
        )
        out.append(
            f'<text x="{_LEFT + plot_w - 2}" y="{y - 4:.1f}" text-anchor="end">target {target:g}</text>'
        )
    for n, (name, line) in enumerate(series.items()):
        colour = _COLOURS[n % len(_COLOURS)]
        points = " ".join(f"{x_at(i):.1f},{y_at(v):.1f}" for i, v in enumerate(line) if v == v)
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for i, v in enumerate(line):
            if v == v:
                out.append(f'<circle cx="{x_at(i):.1f}" cy="{y_at(v):.1f}" r="3" fill="{colour}"/>')
        out.append(f'<text x="{_LEFT + 8}" y="{_TOP + 12 + 14 * n}" fill="{colour}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
