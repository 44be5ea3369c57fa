"""HTML reports in a real headless browser (Debian's chromium): the page renders (a screenshot that is
not blank), and its tables sort, by a click on a header and by the ``#sort=`` URL fragment."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from nnhal.cli.main import main
from nnhal.ui.htmlpage import Bar, Cell, Chart, Column, Table, page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                    "(apt-get install chromium; .ci/run installs it)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color in (2, 6), header
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A real conformance report: the Relu and Abs cases of the onnx wheel on the CPU."""
    path = tmp_path_factory.mktemp("html") / "validate.html"
    assert main(["validate", "--ops", "Relu,Abs,LeakyRelu", "--report", str(path), "--quiet"]) == 0
    return path


def op_order(dom: str) -> list[str]:
    body = re.search(r'<table class="sortable" id="ops">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
    return re.findall(r"<tr><td>([^<]*)</td>", body)


def test_report_is_self_contained_with_chart_legend_and_sortable_tables(report):
    text = report.read_text()
    assert "<svg" in text and 'class="legend"' in text and text.count('class="sortable"') == 2
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', text), "the page must load nothing"


def test_bench_profile_and_accuracy_pages_share_the_layout(tmp_path):
    """bench --html from a real (tiny) measurement, and the profile and accuracy pages."""
    pytest.importorskip("onnxruntime", reason="bench compares with onnxruntime")
    import nnhal
    from nnhal.accuracy import compare_precisions
    from nnhal.benchmark.run import _time, make_nnhal, make_ort, render_html, render_table
    from nnhal.cli.reports import accuracy_html, profile_html
    from nnhal.zoo import input_for
    from tests.cli.models import conv_softmax

    model = conv_softmax()
    feeds = input_for(model)
    run_n, prerun_ms, _, flops, session = make_nnhal(model, feeds, 1)
    row = {"model": "conv_softmax", "batch": 1, "nnhal": _time(run_n, 1, 3), "prerun_ms": prerun_ms}
    session.close()
    run_o, create_ms, _ = make_ort(model, feeds, 1)
    row.update(ort=_time(run_o, 1, 3), ort_create_ms=create_ms, max_rel_err=0.0)
    row.update(ratio=row["nnhal"]["median"] / row["ort"]["median"], gflops=flops / row["nnhal"]["median"] / 1e6)
    rows = [row, {"model": "bert", "batch": 8, "skip": "MemoryError: too big"}]
    bench = render_html(rows, render_table(rows, ["header"], None))
    with nnhal.Session(model, devices=["vnpu", "cpu"], precision="uint8") as s:
        profile = profile_html(s.profile(feeds, runs=2), "tiny")
    accuracy = accuracy_html(compare_precisions(model, [feeds, input_for(model, seed=1)], ["fp16"]))
    for text, table in ((bench, "bench"), (profile, "shares"), (accuracy, "precisions")):
        assert f'<table class="sortable" id="{table}">' in text
        assert "<svg" in text and 'class="legend"' in text and "<script>" in text
        assert not re.search(r'(src|href)\s*=', text)
    assert f'data-v="{row["ratio"]}"' in bench and "skipped: MemoryError: too big" in bench


@needs_chromium
def test_screenshot_is_rendered_and_not_blank(report, tmp_path):
    png = tmp_path / "report.png"
    out = chromium(tmp_path, f"--screenshot={png}", "--window-size=1200,900", report.as_uri())
    assert png.is_file(), out.stderr[-2000:]
    width, height, rows = read_png(png)
    assert (width, height) == (1200, 900)
    colors = {row[i:i + 3] for row in rows[::4] for i in range(0, len(row), 4 * (len(row) // width))}
    assert len(colors) > 10, "the screenshot is blank"
    green = bytes.fromhex("3a7d44")            # the chart's 'pass' bar (nnhal.ui.htmlpage.GOOD)
    assert green in colors, "the summary chart did not render"


@needs_chromium
def test_url_fragment_sorts_the_table_in_the_browser(report, tmp_path):
    unsorted = op_order(report.read_text())
    assert sorted(unsorted) == unsorted and len(unsorted) >= 3
    out = chromium(tmp_path, "--run-all-compositor-stages-before-draw", "--dump-dom",
                   report.as_uri() + "#sort=ops:op:desc")
    assert op_order(out.stdout) == sorted(unsorted, reverse=True), out.stderr[-2000:]
    assert 'aria-sort="descending"' in out.stdout


@needs_chromium
def test_clicking_a_header_sorts_numbers_as_numbers(tmp_path):
    table = Table("t", "numbers", [Column("name"), Column("ms", True, "milliseconds")],
                  [["a", 9.5], ["b", 10.25], ["c", 100.0], ["d", Cell("n/a", None)], ["e", 2]])
    html = page("sort test", "five rows", Chart("ms", [Bar("a", 9.5)]), [table], [("#3f6fb5", "ms")])
    # two real clicks on the 'ms' header: ascending, then descending
    click = "<script>var th=document.querySelector('#t th:nth-child(2)');th.click();th.click();</script>"
    path = tmp_path / "click.html"
    path.write_text(html.replace("</body>", click + "</body>"))
    out = chromium(tmp_path, "--run-all-compositor-stages-before-draw", "--dump-dom", path.as_uri())
    body = re.search(r'id="t">.*?<tbody>(.*?)</tbody>', out.stdout, re.S).group(1)
    assert re.findall(r"<tr><td>(\w)</td>", body) == ["c", "b", "a", "e", "d"], out.stderr[-2000:]
