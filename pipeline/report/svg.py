"""Small inline-SVG bar charts for the HTML report: no library, no CDN, opens offline.

Every data mark is a ``<rect class="mark">`` with a ``<title>`` (the browser's tooltip),
so a person hovers for exact values and a test can count what was drawn. A chart with no
data draws a sentence instead of empty axes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

WIDTH: Final = 760
HEIGHT: Final = 280
LEFT: Final = 64
RIGHT: Final = 16
TOP: Final = 16
BOTTOM: Final = 56

PALETTE: Final = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
REASON_COLOURS: Final = {
    "member-joined": "#4e79a7",
    "member-rejoined": "#76b7b2",
    "member-left": "#59a14f",
    "session-expired": "#e15759",
    "poll-interval-expired": "#f28e2b",
    "connection-lost": "#b07aa1",
    "sync-timeout": "#9c755f",
    "static-member-replaced": "#edc948",
}


def colour_for(key: str, order: Sequence[str]) -> str:
    """A stable colour: the reason's own, else by position among the keys shown."""
    if key in REASON_COLOURS:
        return REASON_COLOURS[key]
    return PALETTE[order.index(key) % len(PALETTE)] if key in order else PALETTE[0]


def nice_step(span: float, target: int) -> float:
    """A 1-2-5 step dividing ``span`` into about ``target`` parts."""
    if span <= 0:
        return 1.0
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return float(m * mag)
    return float(10 * mag)


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar (or one stacked column): its label and its segments ``(key, value)``."""

    label: str
    segments: tuple[tuple[str, float], ...]
    tooltip: str = ""

    @property
    def total(self) -> float:
        return sum(v for _, v in self.segments)


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _empty(title: str, message: str) -> str:
    return (f'<svg class="chart empty" role="img" aria-label="{escape(title)}" '
            f'viewBox="0 0 {WIDTH} 80" width="{WIDTH}" height="80">'
            f'<text x="{WIDTH // 2}" y="44" text-anchor="middle" class="note">'
            f"{escape(message)}</text></svg>")


def column_chart(title: str, bars: Sequence[Bar], y_label: str, *,
                 empty_message: str = "nothing to show in this window",
                 legend: Sequence[str] = (), label_every: int = 0, counts: bool = True) -> str:
    """Vertical (optionally stacked) columns, one per ``Bar``, with a y axis and legend.

    ``counts``: the values are whole numbers, so the axis never ticks at fractions."""
    if not bars or max((b.total for b in bars), default=0) <= 0:
        return _empty(title, empty_message)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    top = max(b.total for b in bars)
    step = max(nice_step(top, 5), 1.0) if counts else nice_step(top, 5)
    y_max = math.ceil(top / step) * step
    slot = plot_w / len(bars)
    gap = min(slot * 0.2, 6.0)
    every = label_every or max(1, math.ceil(len(bars) / 12))
    parts = [f'<svg class="chart" role="img" aria-label="{escape(title)}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">']
    parts.append(_y_axis(y_max, step, plot_h, y_label))
    for i, bar in enumerate(bars):
        x = LEFT + i * slot + gap / 2
        y = float(TOP + plot_h)
        for key, value in bar.segments:
            if value <= 0:
                continue
            h = value / y_max * plot_h
            y -= h
            tip = bar.tooltip or bar.label
            parts.append(
                f'<rect class="mark" data-key="{escape(key)}" data-value="{_fmt(value)}" '
                f'x="{x:.1f}" y="{y:.1f}" width="{max(slot - gap, 1):.1f}" height="{h:.1f}" '
                f'fill="{colour_for(key, legend)}"><title>{escape(tip)}: {escape(key)} '
                f"{_fmt(value)}</title></rect>")
        if i % every == 0:
            cx = LEFT + i * slot + slot / 2
            parts.append(f'<text class="tick" x="{cx:.1f}" y="{TOP + plot_h + 14}" '
                         f'text-anchor="middle">{escape(bar.label)}</text>')
    parts.append(_legend(legend))
    parts.append("</svg>")
    return "".join(parts)


def bar_rows_chart(title: str, rows: Sequence[tuple[str, float, str]], x_label: str, *,
                   empty_message: str = "nothing to show in this window") -> str:
    """Horizontal bars, one per ``(label, value, tooltip)``, longest scale on the x axis."""
    if not rows or max(v for _, v, _ in rows) <= 0:
        return _empty(title, empty_message)
    row_h = 18
    left = 150
    plot_w = WIDTH - left - 240  # room for the value text after the longest bar
    height = TOP + row_h * len(rows) + 40
    top = max(v for _, v, _ in rows)
    step = nice_step(top, 5)
    x_max = math.ceil(top / step) * step
    parts = [f'<svg class="chart" role="img" aria-label="{escape(title)}" '
             f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}">']
    for i, (label, value, tip) in enumerate(rows):
        y = TOP + i * row_h
        w = value / x_max * plot_w
        parts.append(f'<text class="tick" x="{left - 6}" y="{y + row_h - 5}" '
                     f'text-anchor="end">{escape(label)}</text>')
        if value > 0:
            parts.append(
                f'<rect class="mark" data-key="{escape(label)}" data-value="{_fmt(value)}" '
                f'x="{left}" y="{y + 2}" width="{max(w, 1):.1f}" height="{row_h - 4}" '
                f'fill="#e15759"><title>{escape(label)}: {escape(tip)}</title></rect>')
        parts.append(f'<text class="value" x="{left + max(w, 1) + 4:.1f}" y="{y + row_h - 5}">'
                     f"{escape(tip)}</text>")
    axis_y = TOP + row_h * len(rows) + 4
    parts.append(f'<line class="axis" x1="{left}" y1="{axis_y}" x2="{left + plot_w}" '
                 f'y2="{axis_y}"/>')
    tick = 0.0
    while tick <= x_max + 1e-9:
        x = left + tick / x_max * plot_w
        parts.append(f'<text class="tick" x="{x:.1f}" y="{axis_y + 14}" '
                     f'text-anchor="middle">{_fmt(tick)}</text>')
        tick += step
    parts.append(f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{axis_y + 32}" '
                 f'text-anchor="middle">{escape(x_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _y_axis(y_max: float, step: float, plot_h: float, label: str) -> str:
    parts = [f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}"/>',
             f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" '
             f'y2="{TOP + plot_h}"/>']
    tick = 0.0
    while tick <= y_max + 1e-9:
        y = TOP + plot_h - tick / y_max * plot_h
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" '
                     f'y2="{y:.1f}"/>')
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{_fmt(tick)}</text>')
        tick += step
    mid = TOP + plot_h / 2
    parts.append(f'<text class="axis-label" x="14" y="{mid:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {mid:.1f})">{escape(label)}</text>')
    return "".join(parts)


def _legend(keys: Sequence[str]) -> str:
    if not keys:
        return ""
    parts = []
    x = float(LEFT)
    y = HEIGHT - 16
    for key in keys:
        parts.append(f'<rect class="swatch" x="{x:.1f}" y="{y - 9}" width="10" height="10" '
                     f'fill="{colour_for(key, keys)}"/>')
        parts.append(f'<text class="legend" x="{x + 14:.1f}" y="{y}">{escape(key)}</text>')
        x += 24 + 7 * len(key)
    return "".join(parts)


def stack(counts: Mapping[str, float], order: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """Segments in legend order, so every column stacks its reasons the same way."""
    return tuple((k, float(counts[k])) for k in order if counts.get(k))
