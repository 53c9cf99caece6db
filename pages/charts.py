"""Charts drawn on the server as SVG (no script, no CDN): stacked columns over time
and stacked horizontal bars. Every mark is a link to the runs behind it and names
its value in its title, which screen readers and hovering pointers read; every text
is escaped here. Narrow on purpose (a 360-unit view box): a phone shows it at its
own size, a laptop scales it up."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from core.outcome import words

WIDTH = 360
# Colours with at least 3:1 against the page's white, told apart by the legend too.
PALETTE = ("#1b7f3b", "#b3261e", "#8a4b00", "#5b3cc4", "#0b6a8a", "#6b6b6b", "#a3127a", "#3d5a00")


@dataclass(frozen=True)
class Segment:
    name: str
    value: float
    href: str


Colours = Mapping[str, str]


def colour(name: str, index: int, colours: Colours) -> str:
    """The series' own colour if the plot gives it one (an outcome, a refusal), else
    the palette's in turn."""
    return colours.get(name) or PALETTE[index % len(PALETTE)]


def columns(
    title: str,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    href: Callable[[str, int], str],
    unit: Callable[[float], str] = lambda v: f"{v:g}",
    colours: Colours | None = None,
) -> SafeString:
    """Stacked columns, one per label (a bar of time), a segment per series."""
    height, top, bottom, left = 170, 8, 22, 34
    count = max(len(labels), 1)
    totals = [sum(values[i] for values in series.values()) for i in range(len(labels))]
    peak = max(totals, default=0) or 1
    slot = (WIDTH - left) / count
    scale = (height - top - bottom) / peak
    marks = [_axis(left, top, height - bottom, peak, unit)]
    for i, label in enumerate(labels):
        x = left + i * slot + slot * 0.12
        y = float(height - bottom)
        for index, (name, values) in enumerate(series.items()):
            value = values[i]
            if value <= 0:
                continue
            h = value * scale
            y -= h
            marks.append(
                _link(
                    href(name, i),
                    f"{words(name)}, {label}: {unit(value)}",
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.76:.1f}" height="{max(h, 1):.1f}" fill="{colour(name, index, colours or {})}"/>',
                )
            )
        if i % max(1, count // 6) == 0:
            marks.append(f'<text x="{x:.1f}" y="{height - 6}" class="tick">{escape(label)}</text>')
    return _svg(title, height, marks)


def bars(
    title: str,
    rows: Sequence[tuple[str, Sequence[Segment]]],
    names: Sequence[str],
    unit: Callable[[float], str] = lambda v: f"{v:g}",
    colours: Colours | None = None,
) -> SafeString:
    """A horizontal bar per row (its label above it), stacked by segment; a segment
    without a colour of its own takes its name's place in ``names``."""
    line = 34
    height = max(len(rows), 1) * line + 6
    peak = max((sum(s.value for s in segments) for _, segments in rows), default=0) or 1
    room = WIDTH - 70
    marks = []
    for r, (label, segments) in enumerate(rows):
        y = r * line + 4
        total = sum(s.value for s in segments)
        marks.append(f'<text x="0" y="{y + 10}" class="label">{escape(label)}</text>')
        x = 0.0
        for segment in segments:
            if segment.value <= 0:
                continue
            w = segment.value / peak * room
            index = names.index(segment.name) if segment.name in names else 0
            fill = colour(segment.name, index, colours or {})
            marks.append(
                _link(
                    segment.href,
                    f"{label}, {segment.name}: {unit(segment.value)}",
                    f'<rect x="{x:.1f}" y="{y + 14}" width="{max(w, 1):.1f}" height="14" fill="{fill}"/>',
                )
            )
            x += w
        marks.append(f'<text x="{x + 4:.1f}" y="{y + 25}" class="value">{escape(unit(total))}</text>')
    return _svg(title, height, marks)


def legend(names: Sequence[str], colours: Colours | None = None) -> SafeString:
    # The swatch is SVG (a fill attribute): the Content-Security-Policy allows no inline style.
    swatch = '<svg class="swatch" viewBox="0 0 10 10" aria-hidden="true"><rect width="10" height="10" rx="2" fill="{}"/></svg>'
    items = "".join(f"<li>{swatch.format(colour(name, i, colours or {}))}{escape(words(name))}</li>" for i, name in enumerate(names))
    return mark_safe(f'<ul class="legend">{items}</ul>')  # noqa: S308 - every text escaped above


def _axis(left: int, top: int, bottom: int, peak: float, unit: Callable[[float], str]) -> str:
    return (
        f'<line x1="{left - 4}" y1="{bottom}" x2="{WIDTH}" y2="{bottom}" class="axis"/>'
        f'<text x="{left - 6}" y="{top + 8}" class="tick" text-anchor="end">{escape(unit(peak))}</text>'
        f'<text x="{left - 6}" y="{bottom}" class="tick" text-anchor="end">0</text>'
    )


def _link(href: str, label: str, shape: str) -> str:
    text = escape(label)
    return f'<a href="{escape(href)}" aria-label="{text}"><title>{text}</title>{shape}</a>'


def _svg(title: str, height: int, marks: Sequence[str]) -> SafeString:
    body = "".join(marks)
    return mark_safe(  # noqa: S308 - every text escaped above
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="group" aria-label="{escape(title)}" preserveAspectRatio="xMinYMin meet">{body}</svg>'
    )
