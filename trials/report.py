"""The comparison as a table for the terminal, as CSV, and drawn: per-variant bars
with their intervals and a scatter of cost against success, as inline SVG built
server-side with every text escaped (format_html), each mark a link to its runs. The
page and the static report one can mail draw the same figures."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import slugify

from runs.agents.names import agent_name
from trials import comparison

COLUMNS = (
    ("variant", "variant"),
    ("proposed by", "proposer"),
    ("runs", "ended"),
    ("success", "successes"),
    ("rate", "success_rate"),
    ("95% interval", "success_interval"),
    ("pass^k", "pass_hat_k"),
    ("pass@k", "pass_at_k"),
    ("unsafe", "unsafe_attempts"),
    ("UNAUTHORIZED", "unauthorized_effects"),
    ("accepted unverified", "unverified_accepted"),
    ("corrections", "corrections"),
    ("over budget", "over_budget"),
    ("working s (median/p95)", "working_seconds"),
    ("waiting s (median/p95)", "waiting_seconds"),
    ("tokens", "tokens"),
    ("cost $", "cost_usd"),
    ("$ per accepted", "cost_per_accepted_usd"),
)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, float | int) for v in value):
        return f"[{value[0]:.2f}, {value[1]:.2f}]"
    if isinstance(value, dict) and set(value) == {"median", "p95"}:
        return f"{cell(value['median'])}/{cell(value['p95'])}"
    return str(value)


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    return [[cell(summary.get(key)) for _, key in COLUMNS] for summary in result["variants"]]


def text_table(result: dict[str, Any]) -> str:
    """The terminal's table; unauthorized effects, if any, are listed first."""
    lines = []
    for effect in result["unauthorized"]:
        lines.append(
            f"UNAUTHORIZED EFFECT in {effect['variant']}: run {effect['run_id']}, {effect['tool']} ({effect['call_id']}): {effect['why']}"
        )
    header = [title for title, _ in COLUMNS]
    rows = table_rows(result)
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    for diff in result["differences"]:
        interval = diff["interval"]
        lines.append(
            f"{diff['variant']} - {diff['against']}: success {cell(diff['success_difference'])}"
            + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")
            + f", unsafe {diff['unsafe_attempts_difference']:+d}, unauthorized {diff['unauthorized_effects_difference']:+d}"
        )
    return "\n".join(lines)


def csv_text(result: dict[str, Any]) -> str:
    """One row per run: the trial's figures as they are computed, for a spreadsheet."""
    out = io.StringIO()
    writer = csv.writer(out)
    fields = [
        "variant", "repetition", "run_id", "outcome", "success", "accepted", "unverified_accepted", "unsafe_attempts",
        "unauthorized_effects", "corrections", "proposals", "over_budget", "working_seconds", "waiting_seconds", "tokens", "cost_usd",
        "agent", "agent_version", "models",
    ]  # fmt: skip
    writer.writerow(fields)
    for summary in result["variants"]:
        for run in summary["runs_detail"]:
            row = {
                **run,
                "variant": summary["variant"],
                "unauthorized_effects": len(run["unauthorized"]),
                "agent": agent_name(run["agent"]) if run["agent"] else comparison.LOOP,
                "models": " ".join(run["models"]),
            }
            writer.writerow([_csv_value(row[name]) for name in fields])
    return out.getvalue()


def _csv_value(value: Any) -> str:
    text = str(value)
    # A spreadsheet runs a cell that starts like a formula: such text is quoted as text.
    return "'" + text if text[:1] in ("=", "+", "-", "@") and not _number(text) else text


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


RunsLink = Callable[[dict[str, Any]], str]

WIDTH, ROW, LEFT = 640, 34, 170


def bars_svg(result: dict[str, Any], link: RunsLink) -> SafeString:
    """Success rate per variant with its 95% interval; each bar links to its runs."""
    variants = result["variants"]
    height = 40 + ROW * len(variants)
    span = WIDTH - LEFT - 60
    marks = []
    for index, summary in enumerate(variants):
        y = 24 + index * ROW
        rate = summary["success_rate"] or 0.0
        interval = summary["success_interval"]
        label = f"{summary['variant']}: {summary['successes']} of {summary['ended']} succeeded"
        whisker = (
            format_html(
                '<line x1="{}" x2="{}" y1="{}" y2="{}" class="trial-interval"/>',
                LEFT + round(interval[0] * span),
                LEFT + round(interval[1] * span),
                y + 10,
                y + 10,
            )
            if interval
            else ""
        )
        marks.append(
            format_html(
                '<a href="{}"><title>{}</title>'
                '<text x="{}" y="{}" class="trial-label" text-anchor="end">{}</text>'
                '<rect x="{}" y="{}" width="{}" height="20" class="trial-bar{}"/>{}'
                '<text x="{}" y="{}" class="trial-value">{}</text></a>',
                link(summary),
                label,
                LEFT - 8,
                y + 15,
                _clip(summary["variant"], 22),
                LEFT,
                y,
                max(1, round(rate * span)),
                " trial-bar-unsafe" if summary["unauthorized_effects"] else "",
                whisker,
                WIDTH - 52,
                y + 15,
                f"{rate:.0%}" if summary["ended"] else "-",
            )
        )
    axis = format_html_join(
        "",
        '<line x1="{}" x2="{}" y1="14" y2="{}" class="trial-grid"/><text x="{}" y="{}" class="trial-tick" text-anchor="middle">{}</text>',
        (
            (LEFT + round(t * span), LEFT + round(t * span), height - 14, LEFT + round(t * span), height - 2, f"{t:.0%}")
            for t in (0, 0.5, 1)
        ),
    )
    return format_html(
        '<svg viewBox="0 0 {} {}" role="group" aria-labelledby="trial-bars-title" class="trial-plot">'
        '<title id="trial-bars-title">Success rate per variant, with 95% intervals</title>{}{}</svg>',
        WIDTH,
        height,
        axis,
        mark_safe("".join(marks)),  # noqa: S308 - each mark built by format_html above
    )


def scatter_svg(result: dict[str, Any], link: RunsLink) -> SafeString:
    """Cost (all runs, failed ones too) against success rate; each point links to its runs."""
    variants = [v for v in result["variants"] if v["ended"]]
    height, left, bottom = 300, 60, 40
    span_x, span_y = WIDTH - left - 30, height - bottom - 20
    most = max([v["cost_usd"] for v in variants] + [0.0]) or 1.0
    points = []
    for index, summary in enumerate(variants):
        x = left + round(summary["cost_usd"] / most * span_x)
        y = 20 + round((1 - (summary["success_rate"] or 0.0)) * span_y)
        label = f"{summary['variant']}: success {summary['success_rate']:.0%}, cost ${summary['cost_usd']:.4f}"
        points.append(
            format_html(
                '<a href="{}"><title>{}</title><circle cx="{}" cy="{}" r="7" class="trial-point{}"/>'
                '<text x="{}" y="{}" class="trial-label">{}</text></a>',
                link(summary),
                label,
                x,
                y,
                " trial-bar-unsafe" if summary["unauthorized_effects"] else "",
                x + 10,
                y - 8 - (index % 2) * 12,
                _clip(summary["variant"], 22),
            )
        )
    return format_html(
        '<svg viewBox="0 0 {w} {h}" role="group" aria-labelledby="trial-scatter-title" class="trial-plot">'
        '<title id="trial-scatter-title">Cost against success rate, per variant</title>'
        '<line x1="{l}" x2="{l}" y1="20" y2="{b}" class="trial-grid"/><line x1="{l}" x2="{r}" y1="{b}" y2="{b}" class="trial-grid"/>'
        '<text x="{l}" y="{t}" class="trial-tick">$0</text><text x="{r}" y="{t}" class="trial-tick" text-anchor="end">${most}</text>'
        '<text x="{ly}" y="24" class="trial-tick" text-anchor="end">100%</text><text x="{ly}" y="{b}" class="trial-tick" text-anchor="end">0%</text>'
        "{points}</svg>",
        w=WIDTH,
        h=height,
        l=left,
        r=left + span_x,
        b=20 + span_y,
        t=20 + span_y + 18,
        ly=left - 6,
        most=f"{most:.4f}",
        points=mark_safe("".join(points)),  # noqa: S308 - each point built by format_html above
    )


def _clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def context(result: dict[str, Any], link: RunsLink, run_base: str) -> dict[str, Any]:
    """What templates/trials/_comparison.html draws."""
    for summary in result["variants"]:
        summary["change_text"] = json.dumps(summary.get("change", {}), sort_keys=True)[:600]
    return {
        "result": result,
        "rows": [{"summary": s, "cells": row} for s, row in zip(result["variants"], table_rows(result), strict=True)],
        "headers": [title for title, _ in COLUMNS],
        "bars": bars_svg(result, link),
        "scatter": scatter_svg(result, link),
        "run_base": run_base,
    }


def anchor(summary: dict[str, Any]) -> str:
    """A mark's link: the variant's list of runs, on the same page."""
    return "#variant-" + str(slugify(str(summary["variant"])))


def html_report(result: dict[str, Any], run_base: str) -> str:
    """The static report one can mail: the table, the plots, every unauthorized effect
    first, each run linked at ``run_base`` (the site's /runs/)."""
    rendered: str = render_to_string("trials/report.html", context(result, anchor, run_base))
    return rendered
