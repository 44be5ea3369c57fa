"""Self-contained HTML reports: sortable tables, a legend and a summary chart, no external assets.

Every report nnhal writes (``validate --report``, ``bench --html``, ``profile --html``,
``accuracy --html``) is one :func:`page`: a title, a summary line, one inline SVG chart, a legend
and tables. The page holds its own CSS and a few lines of JavaScript; it loads nothing from the
network, so it opens from a CI artifact or a mail attachment as it is.

Sorting: a click on a column header sorts that table by the column (again: the other way).
Numbers sort as numbers (each cell carries its value in ``data-v``), text as text. The URL fragment
``#sort=<table id>:<column>[:desc]`` (column by index or by name) sorts on load, so a link can
point at "the slowest first", and a headless browser can check the sorting.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

# NOTE: one palette for every report, so a colour means the same thing everywhere
GOOD, BAD, WARN, NEUTRAL, INFO = "#3a7d44", "#c62828", "#e08e0b", "#9e9e9e", "#3f6fb5"
PALETTE = ("#3f6fb5", "#e08e0b", "#3a7d44", "#8e44ad", "#c62828", "#16a085", "#7f8c8d", "#d35400")


@dataclass(frozen=True)
class Column:
    """A table column: its header, whether it sorts as a number, what it means (shown in the legend)."""

    name: str
    numeric: bool = False
    help: str = ""


@dataclass(frozen=True)
class Cell:
    """A cell whose text differs from its sort value, or that carries a CSS class (pass, wrong, ...)."""

    text: str
    value: float | str | None = None
    css: str = ""


@dataclass(frozen=True)
class Table:
    id: str                      # [a-z0-9-]+: the name used by ``#sort=<id>:<column>``
    title: str
    columns: list[Column]
    rows: list[list[object]]     # str, int, float, None or Cell per column


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    color: str = INFO
    text: str = ""               # shown after the bar (default: the value)


@dataclass(frozen=True)
class Chart:
    """A horizontal bar chart; ``marks`` draws dashed reference lines (value, label)."""

    title: str
    bars: list[Bar]
    marks: list[tuple[float, str]] = field(default_factory=list)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def _cell(value: object, column: Column) -> str:
    css, sort = "", None
    if isinstance(value, Cell):
        text, sort, css = value.text, value.value, value.css
    else:
        text = _fmt(value)
        if column.numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
            sort = value
    attrs = f' class="{html.escape(css)}"' if css else ""
    if sort is not None and not (isinstance(sort, float) and math.isnan(sort)):
        attrs += f' data-v="{html.escape(str(sort))}"'
    return f"<td{attrs}>{html.escape(text)}</td>"


def render_table(table: Table) -> str:
    head = "".join(f'<th data-numeric="{int(c.numeric)}" title="{html.escape(c.help)}">{html.escape(c.name)}</th>'
                   for c in table.columns)
    body = "\n".join("<tr>" + "".join(_cell(v, c) for v, c in zip(row, table.columns)) + "</tr>" for row in table.rows)
    return (f'<h2>{html.escape(table.title)}</h2><table class="sortable" id="{html.escape(table.id)}">'
            f"<thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>")


def render_chart(chart: Chart, width: int = 560) -> str:
    """An inline SVG bar chart (labels left, bars scaled to the largest value or mark)."""
    bar_h, gap, left = 18, 5, 190
    top = 44 if chart.marks else 26          # room for the marks' labels under the title
    scale_max = max([b.value for b in chart.bars if math.isfinite(b.value)] + [m for m, _ in chart.marks] + [1e-12])
    height = top + len(chart.bars) * (bar_h + gap) + 10
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{height}" '
             f'role="img" aria-label="{html.escape(chart.title)}" font-family="sans-serif" font-size="12">',
             f'<text x="0" y="14" font-weight="bold">{html.escape(chart.title)}</text>']
    for k, b in enumerate(chart.bars):
        y = top + k * (bar_h + gap)
        w = width * max(b.value, 0.0) / scale_max if math.isfinite(b.value) else 0.0
        parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{html.escape(b.label[:28])}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{b.color}"/>')
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 13}">{html.escape(b.text or _fmt(b.value))}</text>')
    last_label = -1e9
    for value, label in sorted(chart.marks):
        x = left + width * value / scale_max
        parts.append(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - 6}" stroke="#555" '
                     f'stroke-dasharray="4 3"/>')
        if x - last_label >= 8 * len(label) + 6:     # NOTE: crowded marks keep the first label only
            parts.append(f'<text x="{x:.1f}" y="{top - 10}" text-anchor="middle">{html.escape(label)}</text>')
            last_label = x
    parts.append("</svg>")
    return "".join(parts)


def render_legend(swatches: list[tuple[str, str]], tables: list[Table]) -> str:
    """Colour swatches (colour, meaning), then what each column of each table means."""
    items = "".join(f'<li><span class="swatch" style="background:{c}"></span>{html.escape(text)}</li>'
                    for c, text in swatches)
    terms = []
    seen = set()
    for t in tables:
        for c in t.columns:
            if c.help and c.name not in seen:
                seen.add(c.name)
                terms.append(f"<dt>{html.escape(c.name)}</dt><dd>{html.escape(c.help)}</dd>")
    return (f'<section class="legend"><h2>Legend</h2><ul>{items}</ul><dl>{"".join(terms)}</dl>'
            "<p>Click a column header to sort by it; click again to reverse.</p></section>")


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.4em}
table{border-collapse:collapse;font-size:13px;margin-bottom:1em}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
td[data-v]{text-align:right;font-variant-numeric:tabular-nums}
th{background:#eef1f5;cursor:pointer;user-select:none;white-space:nowrap}
th:hover{background:#dde3ec}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
tr:nth-child(even) td{background:#fafafa}
.pass,.good{color:#3a7d44}.wrong,.bad{color:#c62828;font-weight:bold}.error,.warn{color:#b36b00}
.unsupported,.neutral{color:#777}
.legend ul{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:1.2em}
.swatch{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:middle}
.legend dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;font-size:13px}
.legend dt{font-weight:bold}.legend dd{margin:0}
pre{background:#f6f6f6;padding:1em;font-size:12px;overflow:auto}
"""

# NOTE: plain DOM code, no library: sorts tbody rows in place (stable, numbers by data-v)
SCRIPT = """
function nnhalSort(table, col, desc) {
  var th = table.tHead.rows[0].cells, numeric = th[col].dataset.numeric === "1";
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  function key(row) {
    var c = row.cells[col]; if (!c) return numeric ? -Infinity : "";
    var v = c.hasAttribute("data-v") ? c.getAttribute("data-v") : c.textContent;
    if (numeric) { var n = parseFloat(v); return isNaN(n) ? -Infinity : n; }
    return v.toLowerCase();
  }
  var keyed = rows.map(function (r, i) { return [key(r), i, r]; });
  keyed.sort(function (a, b) {
    var d = a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
    return (desc ? -d : d) || a[1] - b[1];
  });
  keyed.forEach(function (k) { body.appendChild(k[2]); });
  for (var i = 0; i < th.length; i++) th[i].removeAttribute("aria-sort");
  th[col].setAttribute("aria-sort", desc ? "descending" : "ascending");
}
function nnhalColumn(table, name) {
  var th = table.tHead.rows[0].cells;
  if (/^[0-9]+$/.test(name)) return parseInt(name, 10);
  for (var i = 0; i < th.length; i++) if (th[i].textContent === name) return i;
  return -1;
}
document.querySelectorAll("table.sortable").forEach(function (table) {
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
    th.addEventListener("click", function () {
      nnhalSort(table, col, th.getAttribute("aria-sort") === "ascending");
    });
  });
});
(function () {
  var m = /^#sort=([^:]+):([^:]+)(:desc)?$/.exec(decodeURIComponent(location.hash));
  if (!m) return;
  var table = document.getElementById(m[1]); if (!table) return;
  var col = nnhalColumn(table, m[2]);
  if (col >= 0) nnhalSort(table, col, !!m[3]);
})();
"""


def page(title: str, summary: str, chart: Chart | None, tables: list[Table],
         swatches: list[tuple[str, str]], extra: str = "") -> str:
    """A whole report: title, summary paragraph (plain text), chart, legend, tables, extra HTML."""
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p class='summary'>{html.escape(summary)}</p>"
            + (render_chart(chart) if chart is not None else "")
            + render_legend(swatches, tables)
            + "".join(render_table(t) for t in tables)
            + extra + f"<script>{SCRIPT}</script></body></html>\n")
