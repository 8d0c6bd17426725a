"""Sequence diagrams of a run: Mermaid text, and a self-contained HTML page.

The HTML page draws the diagram itself as inline SVG (no script, no CDN: it renders offline and
in CI artefacts) and embeds the Mermaid text for pasting elsewhere. Schedule deviations from
FIFO are orange bands; the failing check's event is red, with the check's message under it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .engine import RunReport
from .rows import Row, lifelines, rows, seconds

ROW_H = 30
HEAD_H = 54
COL_W = 190
LEFT = 86


def _rows(report: RunReport) -> list[Row]:
    return rows(report.trace.timeline, report.deviations, report.violations)


# --------------------------------------------------------------------------- Mermaid


def _mid(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name) or "x"


def _text(label: str) -> str:
    # Mermaid ends a message at ';' and '#' starts an entity: keep labels plain.
    return label.replace(";", ",").replace("#", "no. ")


def mermaid(report: RunReport) -> str:
    """The run as a Mermaid ``sequenceDiagram``."""
    rs = _rows(report)
    cols = lifelines(rs)
    lines = ["sequenceDiagram", f"    title {_text(_title(report))}"]
    for c in cols:
        lines.append(f"    participant {_mid(c)} as {c}")
    first, last = (_mid(cols[0]), _mid(cols[-1])) if cols else ("x", "x")
    for r in rs:
        when = seconds(r.t_us)
        if r.style == "deviation":
            lines += ["    rect rgb(255, 224, 178)", f"    Note over {first},{last}: {_text(r.label)}", "    end"]
        elif r.style == "failure":
            lines += ["    rect rgb(255, 205, 210)", f"    Note over {first},{last}: {_text(r.label)}", "    end"]
        elif r.dst is None:
            lines.append(f"    Note over {_mid(r.src)}: {when} {_text(r.label)}")
        else:
            arrow = {"call": "->>", "reply": "-->>", "event": "-)"}.get(r.style, "->>")
            mark = "FAILED at: " if r.failed else ""
            lines.append(f"    {_mid(r.src)}{arrow}{_mid(r.dst)}: {when} {mark}{_text(r.label)}")
    return "\n".join(lines) + "\n"


def _title(report: RunReport) -> str:
    t = report.trace
    verdict = "ok" if report.ok else "FAILED"
    return f"{t.scenario} - strategy {t.strategy}, seed {t.seed} - {verdict}"


# --------------------------------------------------------------------------- HTML + SVG


_STYLE = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px 0; }
.meta { color: #555; margin-bottom: 12px; font-size: 13px; }
.verdict-ok { color: #1b7f3b; font-weight: bold; }
.verdict-fail { color: #c62828; font-weight: bold; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 8px; border-radius: 3px; font-size: 12px; }
svg text { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12px; }
details { margin-top: 16px; } pre { background: #f6f8fa; padding: 12px; overflow: auto; font-size: 12px; }
"""


def html_page(report: RunReport, *, impl: str = "") -> str:
    """A self-contained HTML page: heading, legend, the SVG diagram, the Mermaid text."""
    rs = _rows(report)
    svg = _svg(rs)
    t = report.trace
    verdict = ('<span class="verdict-ok">all checks hold</span>' if report.ok else
               '<span class="verdict-fail">FAILED: ' + html.escape("; ".join(
                   f"{n}: {v.message}" for n, v in report.violations) or t.outcome) + "</span>")
    meta = (f"implementation <b>{html.escape(impl or '?')}</b> &middot; strategy <b>{html.escape(t.strategy)}</b> "
            f"&middot; seed <b>{t.seed}</b> &middot; {len(report.deviations)} deviation(s) from FIFO "
            f"&middot; virtual time {seconds(t.virtual_time_us)}")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(t.scenario)}</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>{html.escape(t.scenario)}</h1>\n<div class=\"meta\">{meta}<br>{verdict}</div>\n"
        '<div class="legend"><span style="background:#ffe0b2">schedule deviation from FIFO</span>'
        '<span style="background:#ffcdd2">failing check</span>'
        '<span style="border:1px solid #999">solid: call</span><span style="border:1px dashed #999">dashed: reply</span>'
        '<span style="color:#6a1b9a;border:1px solid #ce93d8">purple: bus notification</span></div>\n'
        f"{svg}\n<details><summary>Mermaid source</summary><pre>{html.escape(mermaid(report))}</pre></details>\n"
        "</body></html>\n"
    )


def _svg(rs: Sequence[Row]) -> str:
    cols = lifelines(rs)
    x = {c: LEFT + COL_W // 2 + i * COL_W for i, c in enumerate(cols)}
    width = max(LEFT + COL_W * max(len(cols), 1) + 20, 1240)
    height = HEAD_H + ROW_H * (len(rs) + 1) + 20
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        '<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker>'
        '<marker id="arrp" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#6a1b9a"/></marker></defs>',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
    ]
    bottom = height - 10
    for c, cx in x.items():
        out.append(f'<line x1="{cx}" y1="{HEAD_H - 10}" x2="{cx}" y2="{bottom}" stroke="#bbb" stroke-dasharray="4,4"/>')
        out.append(f'<rect x="{cx - COL_W // 2 + 10}" y="8" width="{COL_W - 20}" height="{HEAD_H - 22}" rx="5" '
                   f'fill="{_head_fill(c)}" stroke="#555"/>')
        out.append(f'<text x="{cx}" y="{8 + (HEAD_H - 22) // 2 + 4}" text-anchor="middle" font-weight="bold">{html.escape(c)}</text>')
    for n, r in enumerate(rs):
        y = HEAD_H + ROW_H * n + ROW_H // 2 + 6
        if r.style in ("deviation", "failure") or r.failed:
            fill = "#ffe0b2" if r.style == "deviation" else "#ffcdd2"
            out.append(f'<rect x="4" y="{y - ROW_H // 2 - 2}" width="{width - 8}" height="{ROW_H}" fill="{fill}"/>')
        out.append(f'<text x="8" y="{y + 4}" fill="#777">{seconds(r.t_us)}</text>')
        if r.style in ("deviation", "failure"):
            color = "#e65100" if r.style == "deviation" else "#b71c1c"
            out.append(f'<text x="{LEFT}" y="{y + 4}" fill="{color}" font-weight="bold">{html.escape(_fit(r.label, width - LEFT - 10))}</text>')
            continue
        if r.dst is None:
            cx = x.get(r.src, LEFT)
            label = _fit(r.label, COL_W * 2)
            w = min(max(8 * len(label), 60), COL_W * 2)
            out.append(f'<rect x="{cx - w // 2}" y="{y - 10}" width="{w}" height="20" rx="3" fill="#fff9c4" stroke="#c9b600"/>')
            out.append(f'<text x="{cx}" y="{y + 4}" text-anchor="middle">{html.escape(label)}</text>')
            continue
        x1, x2 = x[r.src], x[r.dst]
        color = "#6a1b9a" if r.style == "event" else ("#b71c1c" if r.failed else "#333")
        dash = ' stroke-dasharray="6,4"' if r.style == "reply" else ""
        marker = "arrp" if r.style == "event" else "arr"
        end = x2 - 6 if x2 > x1 else x2 + 6
        out.append(f'<line x1="{x1}" y1="{y + 6}" x2="{end}" y2="{y + 6}" stroke="{color}" stroke-width="1.6"{dash} marker-end="url(#{marker})"/>')
        span = abs(x2 - x1)
        label = _fit(r.label, max(span, int(COL_W * 1.7)))
        out.append(f'<text x="{(x1 + x2) // 2}" y="{y}" text-anchor="middle" fill="{color}">{html.escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _head_fill(name: str) -> str:
    if name.startswith("driver "):
        return "#e3f2fd"
    if name == "listeners":
        return "#f3e5f5"
    if name in ("model", "tools"):
        return "#e8f5e9"
    return "#fff3e0"


def _fit(label: str, pixels: int) -> str:
    limit = max(int(pixels / 7.3), 12)
    return label if len(label) <= limit else label[: limit - 1] + "…"


def write(report: RunReport, path: str | Path, *, impl: str = "") -> str:
    """Write the diagram: HTML for ``.html``/``.htm``, Mermaid text otherwise. Returns the kind."""
    p = Path(path)
    if p.suffix.lower() in (".html", ".htm"):
        p.write_text(html_page(report, impl=impl), encoding="utf-8")
        return "html"
    p.write_text(mermaid(report), encoding="utf-8")
    return "mermaid"


def describe(rows_: Sequence[Row]) -> list[dict[str, Any]]:
    """Rows as plain dicts (for tests and tooling)."""
    return [r.__dict__.copy() for r in rows_]
