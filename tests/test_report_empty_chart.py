"""report.html over runs without benchmark values (issue 45 item 4): a fabric run and
validation runs, no bench figures. The page leads with what it has: each chart with nothing to
draw is one line, not an 800-pixel box saying "No benchmark values found"; the real report is
written by `run_report` and read as a browser gets it, and rendered in Debian's headless Chromium
(tests/test_report_html.py's runner) to see the boxes gone from the page."""
from __future__ import annotations

import re

import matplotlib.image
import pytest

from remote.report import run_report
from tests.test_report_common import recording_terminal, results_json, write_run
from tests.test_report_fabric import fabric_run
from tests.test_report_html import CHROMIUM, chromium


def _report(tmp_path):
    logs = tmp_path / "logs"
    fabric_run(logs, "20261127T050000.000Z-0002")
    for host in ("gpu-a", "gpu-b"):
        write_run(logs, host, "20261127T060000Z", results=results_json("NVIDIA H100 80GB HBM3"))
    out = tmp_path / "report"
    run_report(logs, out, terminal=recording_terminal())
    return out / "report.html"


def test_empty_charts_are_one_line_not_a_box(tmp_path):
    html = _report(tmp_path).read_text()
    pictures = html.split('<h2 id="plots">', 1)[1].split("<h2", 1)[0]
    assert "<img" not in pictures
    lines = re.findall(r'<p class="small nochart">(.*?)</p>', pictures)
    assert lines == ["No latency chart: no benchmark values found.",
                     "No regressions chart: no earlier run to compare with."]
    assert "fabric" in html.lower()  # what it has: the fabric run is there


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install -y chromium")
def test_rendered_page_has_no_empty_chart_box(tmp_path):
    html = _report(tmp_path)
    shot = tmp_path / "shot.png"
    run = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,3000", html.as_uri())
    assert shot.exists(), run.stderr[-2000:]
    dom = chromium(tmp_path, "--dump-dom", html.as_uri()).stdout
    assert "No latency chart: no benchmark values found." in dom
    assert not re.search(r"<img[^>]*chart", dom)
    # the page ends well before the 800 + 300 pixels two empty chart boxes took: the lowest
    # inked row of the screenshot is what the page's content reaches
    img = matplotlib.image.imread(shot)[..., :3]
    inked = (img.min(axis=2) < 0.9).any(axis=1).nonzero()[0]
    assert inked.size and inked.max() < 1400, inked.max()
