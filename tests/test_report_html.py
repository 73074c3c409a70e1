"""report.html opened in real headless Chromium (Debian's `chromium` package): it renders,
shows the flags, the merged table and the pictures, and needs no network."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from remote.report import run_report
from tests.test_report_common import fleet_copy, recording_terminal

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install -y chromium")

LIMIT_S = 90

# Runs Chromium as a child of a small subreaper: whatever Chromium forks is ended (its process
# group, then every remaining child by pid) and reaped before this returns, also on timeout.
_RUNNER = r"""
import ctypes, os, signal, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
limit, cmd = float(sys.argv[1]), sys.argv[2:]
proc = subprocess.Popen(cmd, start_new_session=True)
try:
    rc = proc.wait(timeout=limit)
except subprocess.TimeoutExpired:
    rc = 124
def children():
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == me and fields[0] != "Z":
                out.append(int(entry))
    return out
try:
    os.killpg(proc.pid, signal.SIGKILL)
except (ProcessLookupError, PermissionError):
    pass
deadline = time.monotonic() + 10
while True:
    for pid in children():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
sys.exit(rc)
"""


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", *args]
    return subprocess.run([sys.executable, "-c", _RUNNER, str(LIMIT_S), *cmd],
                          capture_output=True, text=True, timeout=LIMIT_S + 30)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    out = tmp / "report"
    assert run_report(fleet_copy(tmp), out, terminal=recording_terminal()) == 0
    html = out / "report.html"
    shot = tmp / "screenshot.png"
    r1 = chromium(tmp, f"--screenshot={shot}", "--window-size=1400,2000", html.as_uri())
    r2 = chromium(tmp, "--dump-dom", html.as_uri())
    return {"html": html, "shot": shot, "shot_run": r1, "dom": r2.stdout, "dom_run": r2}


def test_screenshot_is_produced_and_not_blank(rendered):
    shot = rendered["shot"]
    assert shot.exists(), rendered["shot_run"].stderr[-2000:]
    img = matplotlib.image.imread(shot)[..., :3]
    assert img.shape[:2] == (2000, 1400)
    ink = (img.min(axis=2) < 0.85).mean()
    assert ink > 0.03, f"screenshot nearly blank ({ink:.1%} non-white)"


def test_screenshot_shows_the_plots(rendered):
    img = (matplotlib.image.imread(rendered["shot"])[..., :3] * 255).astype(int)

    def near(rgb, tol=40):
        return (np.abs(img - np.array(rgb)).max(axis=2) < tol).sum()

    # the latency plot's first host is drawn in matplotlib blue (#1f77b4): only the picture
    # has that colour, so these pixels mean the embedded PNG was decoded and shown
    assert near((31, 119, 180)) > 100
    # the regression chart's +40% bar (#d62728) is a large red area
    assert near((214, 39, 40)) > 3000


def test_dom_has_the_flags_table_and_embedded_pictures(rendered):
    assert rendered["dom_run"].returncode == 0, rendered["dom_run"].stderr[-2000:]
    dom = rendered["dom"]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
    assert "SLOW HOST a100-3 (NVIDIA A100-SXM4-40GB): 29.0% slower" in text
    assert "REGRESSION a100-1 resnet50: 5.00 -&gt; 7.00 ms (+40.0%)" in text
    assert "rtx-old/20211215T090000Z/bench_torch.log:11: malformed line" in text
    # the merged table: a column per host/run, a row per model, '-' where missing
    table = dom.split('<table class="merged">', 1)[1].split("</table>", 1)[0]
    headers = re.findall(r"<th[^>]*>(.*?)</th>", table, flags=re.S)
    assert len(headers) == 1 + 9
    assert "a100-3" in headers[5] and "SLOW" in headers[5]
    assert "TensorRT" in headers[9]
    rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S) for row in rows]
    assert [c[0] for c in cells] == ["alexnet", "resnet18", "resnet50", "vgg16"]
    assert cells[2][2] == "7.00 (+40%)"  # a100-1's latest resnet50, marked as regression
    assert cells[3][9] == "-"
    images = re.findall(r'<img[^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', dom)
    assert len(images) == 2


def test_html_is_self_contained(rendered):
    html = rendered["html"].read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, flags=re.I)
    assert "url(" not in html and "@import" not in html and "<script" not in html
