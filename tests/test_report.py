"""remote.report: merging seed-format logs and results.json, fleet outliers, regressions,
health, bad logs, output files and exit status. Real files, real matplotlib."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.image
import pytest

from remote.report import build_report, parse_bench_log, run_report

# The table of schedulers registers its rows' record names (slurm.json) with the run folder, as
# `gpuprov report` does (remote/commands/report.py): run_report alone does not load it.
from remote.scheduler import SCHEDULERS  # noqa: F401
from tests.test_report_common import fleet_copy, printed, recording_terminal, results_json, seed_log, write_run

A100 = "NVIDIA A100-SXM4-40GB"
BASE = {"alexnet": 1.20, "resnet18": 2.10, "resnet50": 5.00, "vgg16": 3.40}


def scaled(factor: float, models=BASE) -> dict[str, float]:
    return {m: round(v * factor, 4) for m, v in models.items()}


def report_of(logs: Path, tmp_path: Path, **kw):
    """run_report into tmp_path/out; returns (exit status, printed text, out dir)."""
    terminal = recording_terminal()
    out = tmp_path / "out"
    rc = run_report(logs, out, terminal=terminal, **kw)
    return rc, printed(terminal), out


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f, delimiter=";"))


# --- fleet outliers --------------------------------------------------------------------


def test_host_30_percent_slower_is_flagged_and_peers_within_2_percent_are_not(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs, "gpu-a", "20261122T100000Z", seed_log(BASE), results_json(A100))
    write_run(logs, "gpu-b", "20261122T100100Z", seed_log(scaled(1.02)), results_json(A100))
    write_run(logs, "gpu-c", "20261122T100200Z", seed_log(scaled(0.99)), results_json(A100))
    write_run(logs, "gpu-d", "20261122T100300Z", seed_log(scaled(1.30)), results_json(A100))

    rc, text, out = report_of(logs, tmp_path)

    assert rc == 0  # flags alone do not fail the command
    flags = json.loads((out / "flags.json").read_text())
    assert [o["host"] for o in flags["outliers"]] == ["gpu-d"]
    assert flags["outliers"][0]["gpu"] == A100
    assert flags["outliers"][0]["typical_pct"] == pytest.approx(30.0, abs=1.0)
    flag_lines = text.split("FLAGS", 1)[1].split("\n\n", 1)[0]
    assert "SLOW HOST gpu-d (NVIDIA A100-SXM4-40GB): 30.0% slower" in flag_lines
    for peer in ("gpu-a", "gpu-b", "gpu-c"):
        assert peer not in flag_lines


def test_flags_json_counts_each_hosts_peers_and_names_an_outliers(tmp_path):
    """flags.json's `fleet` has every host against its peers: counted, not named (named, 200
    hosts of one GPU group wrote 200 x 199 names; 1,000 wrote 25 MB). The outlier names them."""
    logs = tmp_path / "logs"
    for n in range(200):
        write_run(logs, f"gpu-{n:03d}", "20261122T100000Z",
                  seed_log(scaled(1.30 if n == 7 else 1.0)), results_json(A100))
    rc, _, out = report_of(logs, tmp_path)
    assert rc == 0
    flags = json.loads((out / "flags.json").read_text())
    assert flags["schema"] == 2
    assert len(flags["fleet"]) == 200
    assert all(h["peers_count"] == 199 and "peers" not in h for h in flags["fleet"])
    [outlier] = flags["outliers"]
    assert outlier["host"] == "gpu-007" and len(outlier["peers"]) == 199
    assert "gpu-007" not in outlier["peers"]
    assert (out / "flags.json").stat().st_size < 600_000


def test_fixture_fleet_flags_the_new_slow_instance_only(tmp_path):
    report = build_report(fleet_copy(tmp_path))
    assert [h.host for h in report.outliers] == ["a100-3"]
    slow = report.outliers[0]
    assert slow.gpu == A100 and sorted(slow.peers) == ["a100-1", "a100-2"]
    assert slow.typical_pct == pytest.approx(29.0, abs=0.5)
    # the only H100 has no peers, so it is neither compared nor flagged
    h100 = next(h for h in report.fleet if h.host == "h100-1")
    assert h100.peers == [] and h100.typical_pct is None and not h100.slow
    assert "h100-1 is the only host in its GPU group (NVIDIA H100 80GB HBM3): no fleet " \
        "comparison" in report.notes


def test_hosts_are_compared_only_within_their_gpu_model(tmp_path):
    logs = tmp_path / "logs"
    # an H100 is far faster than the A100s: that is not an outlier, it is another group
    write_run(logs, "a1", "r1", seed_log(BASE), results_json(A100))
    write_run(logs, "a2", "r1", seed_log(scaled(1.01)), results_json(A100))
    write_run(logs, "h1", "r1", seed_log(scaled(0.45)), results_json("NVIDIA H100 80GB HBM3"))
    write_run(logs, "h2", "r1", seed_log(scaled(0.46)), results_json("NVIDIA H100 80GB HBM3"))
    # hosts without results.json (unknown GPU) form one group of their own
    write_run(logs, "old1", "r1", seed_log(scaled(2.0)))
    write_run(logs, "old2", "r1", seed_log(scaled(2.8)))
    report = build_report(logs)
    assert [h.host for h in report.outliers] == ["old2"]
    assert report.outliers[0].gpu == "unknown GPU"
    assert sorted(report.groups) == sorted([A100, "NVIDIA H100 80GB HBM3", "unknown GPU"])


def test_outlier_threshold_is_the_option(tmp_path):
    logs = fleet_copy(tmp_path)
    assert [h.host for h in build_report(logs, outlier_pct=15).outliers] == ["a100-3"]
    assert build_report(logs, outlier_pct=35).outliers == []


# --- regressions -----------------------------------------------------------------------


def test_model_40_percent_slower_than_previous_run_is_a_regression_unchanged_is_not(tmp_path):
    rc, text, out = report_of(fleet_copy(tmp_path), tmp_path)
    flags = json.loads((out / "flags.json").read_text())
    regs = [(r["host"], r["model"], round(r["pct"], 1), r["baseline"]) for r in flags["regressions"]]
    assert regs == [("a100-1", "resnet50", 40.0, "a100-1/20261120T100000Z")]
    assert "REGRESSION a100-1 resnet50: 5.00 -> 7.00 ms (+40.0%)" in text
    # unchanged models of the same run, and a host whose runs are identical, are not listed
    flag_block = text.split("FLAGS", 1)[1].split("SKIPPED", 1)[0]
    assert "alexnet" not in flag_block and "a100-2" not in flag_block
    comparisons = {c["host"]: c for c in flags["comparisons"]}
    assert {c["model"]: round(c["pct"], 1) for c in comparisons["a100-2"]["changes"]} == {
        "alexnet": 0.0, "resnet18": 0.0, "resnet50": 0.0, "vgg16": 0.0}


def test_regression_threshold_and_latest_vs_previous_run(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs, "g", "20261101T000000Z", seed_log(scaled(1.0)))
    write_run(logs, "g", "20261110T000000Z", seed_log(scaled(1.0)))
    # the latest run: resnet18 12% slower, resnet50 8% slower
    write_run(logs, "g", "20261120T000000Z",
              seed_log({**BASE, "resnet18": 2.10 * 1.12, "resnet50": 5.00 * 1.08}))
    report = build_report(logs)
    assert [(c.run_id, c.base_run_id) for c in report.comparisons] == [
        ("20261120T000000Z", "20261110T000000Z")]
    assert [r.model for _, r in report.regressions] == ["resnet18"]
    assert [r.model for _, r in build_report(logs, regression_pct=5).regressions] == [
        "resnet18", "resnet50"]
    assert build_report(logs, regression_pct=15).regressions == []


def test_many_regressions_on_one_host_make_one_flag_line(tmp_path):
    logs = tmp_path / "logs"
    models = {f"model{i:02d}": 1.0 + i for i in range(8)}
    write_run(logs, "g", "r1", seed_log(models))
    write_run(logs, "g", "r2", seed_log({m: v * 1.5 for m, v in models.items()}))
    rc, text, out = report_of(logs, tmp_path)
    flag_block = text.split("FLAGS (1)", 1)[1].split("\n\n", 1)[0]
    assert "REGRESSION g: 8 of 8 models slower by more than 10%: model00 +50.0%" in flag_block
    assert len(json.loads((out / "flags.json").read_text())["regressions"]) == 8


def test_baseline_run_id_host_or_host_run(tmp_path):
    logs = fleet_copy(tmp_path)
    # a run id: each host that has it compares its latest run with it
    by_run = build_report(logs, baseline="20261120T100000Z")
    assert [(c.host, r.model) for c, r in by_run.regressions] == [("a100-1", "resnet50")]
    # a host: every other host's latest run against that host's latest run
    by_host = build_report(logs, baseline="a100-2")
    slower = {(c.host, r.model) for c, r in by_host.regressions}
    assert {("a100-3", m) for m in BASE} <= slower
    assert ("a100-1", "resnet50") in slower and ("a100-1", "alexnet") not in slower
    assert all(c.base_key == "a100-2/20261122T100500Z" for c in by_host.comparisons)
    # host/run: that one run for everybody, the same host's latest included
    pinned = build_report(logs, baseline="a100-1/20261120T100000Z")
    assert {c.host for c in pinned.comparisons} >= {"a100-1", "a100-2", "a100-3", "h100-1"}


def test_unknown_baseline_is_bad_input_exit_2(tmp_path, capsys):
    logs = fleet_copy(tmp_path)
    rc = run_report(logs, tmp_path / "out", baseline="nosuchhost", terminal=recording_terminal())
    assert rc == 2
    err = capsys.readouterr().err
    assert "nosuchhost" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_missing_logs_folder_is_bad_input_exit_2(tmp_path, capsys):
    rc = run_report(tmp_path / "nope", tmp_path / "out", terminal=recording_terminal())
    assert rc == 2
    assert "nope" in capsys.readouterr().err


# --- bad logs --------------------------------------------------------------------------


def test_malformed_lines_and_empty_file_are_skipped_with_a_message(tmp_path):
    logs = fleet_copy(tmp_path)
    rc, text, out = report_of(logs, tmp_path)
    assert rc == 0
    problems = text.split("SKIPPED / BAD LOGS", 1)[1]
    newer = "rtx-old/20211215T090000Z/bench_torch.log"
    assert f"{newer}:11: malformed line '#resnet34;fast'" in problems
    assert f"{newer}:12: malformed line '#;3.1'" in problems
    assert f"{newer}:19: malformed line '#vgg16;-3.02'" in problems
    assert "rtx-old/20211201T090000Z/bench_torch.log: empty file: skipped" in problems
    assert "broken/20261122T103000Z/results.json:1: not valid JSON" in problems
    # the good lines of the same file are kept; the program's other output is ignored
    rows = {r[0]: r for r in read_csv(out / "merged.csv")}
    header = read_csv(out / "merged.csv")[0]
    col = header.index("rtx-old/20211215T090000Z")
    assert rows["resnet18"][col] == "2.471893"
    assert rows["vgg16"][col] == "3.021554"
    assert "resnet34" not in rows
    # an empty log gives no column; the broken run gives none either
    assert "rtx-old/20211201T090000Z" not in header
    assert not any(h.startswith("broken/") for h in header)


def test_a_log_of_twenty_thousand_bad_lines_shows_five_and_a_count(tmp_path):
    """One host's bench_torch.log of 20,000 bad lines printed 20,000 problem lines on the
    terminal, in report.txt and in report.html, burying the other hosts' problems. Each file
    now shows its first five and how many more; flags.json keeps every one."""
    logs = tmp_path / "logs"
    write_run(logs, "good", "r1", seed_log(BASE), results_json(A100))
    write_run(logs, "flood", "r1", seed_log(BASE) + "#resnet18;fast\n" * 20_000, results_json(A100))
    (write_run(logs, "other", "r1", results_json(A100)) / "bench_torch.log").write_text("")
    rc, text, out = report_of(logs, tmp_path)
    problems = text.split("SKIPPED / BAD LOGS (20001)", 1)[1].split("\n\n", 1)[0]
    flood = "flood/r1/bench_torch.log"
    assert problems.count(f"{flood}:") == 6, problems[:2000]
    assert f"{flood}: 19995 more problems in this file (every one in flags.json)" in problems
    assert "other/r1/bench_torch.log: empty file: skipped" in problems
    page = (out / "report.html").read_text()
    assert page.count(f"{flood}:") == 6
    assert (out / "report.txt").read_text().count(f"{flood}:") == 6
    assert len(json.loads((out / "flags.json").read_text())["problems"]) == 20_001


def test_unreadable_and_odd_files_never_crash(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs, "good", "r1", seed_log(BASE))
    (write_run(logs, "dir-log", "r1") / "bench_torch.log").mkdir()  # a folder, not a file
    write_run(logs, "list-json", "r1", results="[1, 2, 3]")
    write_run(logs, "odd-types", "r1", seed_log(BASE), results=json.dumps(
        {"schema": 1, "ok": "yes", "host": 5, "checks": ["x", {"name": "bench", "figures": []},
                                                          {"name": "matmul", "figures": {"spec": 3}}]}))
    write_run(logs, "binary", "r1").joinpath("bench_torch.log").write_bytes(b"\x00\xff\xfe#\x80;")
    write_run(logs, "nothing", "r1")
    # a Slurm cluster's own folder holds slurm.json: its nodes' runs are their own hosts'
    write_run(logs, "cluster1", "r1").joinpath("slurm.json").write_text("{}")
    # names are data, never markup for the terminal
    write_run(logs, "[red]odd[x]", "r1", seed_log(BASE),
              results_json("NVIDIA GeForce RTX 3080 [LHR]"))
    (logs / "stray-file.txt").write_text("not a host folder")
    rc, text, out = report_of(logs, tmp_path)
    assert rc == 0
    assert "dir-log/r1/bench_torch.log: unreadable" in text
    assert "list-json/r1/results.json: not a JSON object" in text
    assert "binary/r1/bench_torch.log: no benchmark values" in text
    assert "nothing/r1: neither results.json nor bench_torch.log" in text
    assert "cluster1" not in text
    header = read_csv(out / "merged.csv")[0]
    assert header == ["model", "[red]odd[x]/r1", "good/r1", "odd-types/r1"]
    assert "[red]odd[x]" in text and "RTX 3080 [LHR]" in text


def test_parse_bench_log_rules():
    text = ("#!/bin/bash\n#resnet18;1.5\n#head;PyTorch\n#resnet18;2.0\n# a comment\n"
            "#resnet18;2.5\n#head;\n#alex net;1\n#vgg16;1;2\n#vgg16;inf\n")
    columns, problems = parse_bench_log(text, "x.log")
    assert columns == {None: {"resnet18": 1.5}, "PyTorch": {"resnet18": 2.5}}
    lines = {p.line: p.message for p in problems}
    assert "appears again" in lines[6] and "keeping the later value" in lines[6]
    assert set(lines) == {6, 7, 8, 9, 10}


# --- merge table -----------------------------------------------------------------------


def test_merged_csv_row_per_model_column_per_host_run_dash_for_missing(tmp_path):
    rc, text, out = report_of(fleet_copy(tmp_path), tmp_path)
    rows = read_csv(out / "merged.csv")
    assert (out / "merged.csv").read_text().splitlines()[0].count(";") == len(rows[0]) - 1
    header, body = rows[0], {r[0]: r[1:] for r in rows[1:]}
    assert header == [
        "model",
        "a100-1/20261120T100000Z", "a100-1/20261122T100000Z",
        "a100-2/20261120T100500Z", "a100-2/20261122T100500Z",
        "a100-3/20261122T101000Z", "h100-1/20261122T102000Z",
        "rtx-old/20211215T090000Z",
        # one log with two #head; sections: a column per head label
        "rtx-trt/20220110T090000Z/PyTorch", "rtx-trt/20220110T090000Z/TensorRT",
    ]
    assert list(body) == ["alexnet", "resnet18", "resnet50", "vgg16"]
    assert body["vgg16"][header.index("rtx-trt/20220110T090000Z/TensorRT") - 1] == "-"
    assert body["resnet50"][header.index("rtx-trt/20220110T090000Z/TensorRT") - 1] == "1.810066"
    # bench_torch.log wins over the same run's results.json (7.0004 there): no double count
    assert body["resnet50"][header.index("a100-1/20261122T100000Z") - 1] == "7"
    # a run with results.json only contributes its bench medians
    assert body["resnet18"][header.index("h100-1/20261122T102000Z") - 1] == "1.32"


def test_printed_table_is_aligned_and_split_to_fit_the_terminal(tmp_path):
    logs = fleet_copy(tmp_path)
    terminal = recording_terminal(width=100)
    run_report(logs, tmp_path / "out", terminal=terminal)
    text = printed(terminal)
    table = text.split("Batch-1 latency, ms", 1)[1].split("red column: slow host", 1)[0]
    assert "part 1 of" in table
    body = [line for line in table.splitlines() if line.startswith("│ ")]
    assert body and all(len(line) <= 100 for line in table.splitlines())
    # every row of one part has the same layout: column separators line up
    part1 = body[:4]
    assert len({tuple(i for i, ch in enumerate(line) if ch == "│") for line in part1}) == 1
    assert any(line.startswith("│ resnet50 ") and "7.00" in line for line in part1)
    assert "TensorRT" in table and "20211215T090000Z" in table


# --- health ----------------------------------------------------------------------------


def test_health_summary_lists_failed_and_skipped_checks_and_spec_ratios(tmp_path):
    rc, text, out = report_of(fleet_copy(tmp_path), tmp_path)
    health = text.split("Health", 1)[1]
    assert "a100-3: FAILED bandwidth (optional): h2d 6.1 GB/s is 19% of spec" in health
    assert "h100-1: SKIPPED cudnn (required: not validated): cuDNN headers not found" in health
    a100_3 = next(line for line in health.splitlines() if line.startswith("a100-3 "))
    assert "FAIL" in a100_3 and "93/76/74%" in a100_3 and "83/19/78%" in a100_3
    flags = json.loads((out / "flags.json").read_text())
    h = {x["host"]: x for x in flags["health"]}
    assert h["a100-1"]["ok"] is True and h["a100-3"]["ok"] is False
    assert [c["name"] for c in h["a100-3"]["failed"]] == ["bandwidth"]
    assert [c["name"] for c in h["h100-1"]["skipped"]] == ["cudnn"]
    bw = {f["name"]: f for f in h["a100-3"]["bandwidth"]}
    assert bw["h2d_gbs"]["value"] == 6.1 and bw["h2d_gbs"]["spec"] == 32.0
    assert bw["h2d_gbs"]["ratio"] == pytest.approx(6.1 / 32.0)  # computed when not given


# --- exit status, outputs ----------------------------------------------------------------


def test_fail_on_outlier_exit_status(tmp_path):
    logs = fleet_copy(tmp_path)
    assert run_report(logs, tmp_path / "o1", terminal=recording_terminal()) == 0
    assert run_report(logs, tmp_path / "o2", fail_on_outlier=True,
                      terminal=recording_terminal()) == 1

    # only a slow host, no history: still flagged
    slow = tmp_path / "slow"
    write_run(slow, "a", "r1", seed_log(BASE), results_json(A100))
    write_run(slow, "b", "r1", seed_log(scaled(1.3)), results_json(A100))
    assert run_report(slow, tmp_path / "o3", fail_on_outlier=True,
                      terminal=recording_terminal()) == 1

    # peers within 2% and unchanged history: nothing flagged
    calm = tmp_path / "calm"
    write_run(calm, "a", "r1", seed_log(BASE), results_json(A100))
    write_run(calm, "a", "r2", seed_log(scaled(1.01)), results_json(A100))
    write_run(calm, "b", "r1", seed_log(scaled(1.02)), results_json(A100))
    terminal = recording_terminal()
    assert run_report(calm, tmp_path / "o4", fail_on_outlier=True, terminal=terminal) == 0
    assert "FLAGS: none" in printed(terminal)


def test_output_files_default_folder_and_pictures(tmp_path, monkeypatch):
    logs = fleet_copy(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    terminal = recording_terminal()
    assert run_report(logs, terminal=terminal) == 0
    (out,) = (work / "reports").iterdir()
    assert out.name[:8].isdigit() and out.name.endswith("Z")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["drift.csv", "flags.json", "health.csv", "latency.png", "merged.csv",
                     "regressions.png", "report.html", "report.txt"]
    assert f"Wrote reports/{out.name}/" in printed(terminal)
    for png in ("latency.png", "regressions.png"):
        img = matplotlib.image.imread(out / png)
        assert img.shape[0] > 200 and img.shape[1] > 500
        ink = (img[..., :3].min(axis=2) < 0.9).mean()
        assert ink > 0.02, f"{png} looks blank"
        red = ((img[..., 0] > 0.75) & (img[..., 1] < 0.3) & (img[..., 2] < 0.3)).sum()
        assert red > 100, f"{png}: the flagged host / regression is not drawn in red"
    flags = json.loads((out / "flags.json").read_text())
    assert flags["flagged"] is True and flags["thresholds"] == {
        "outlier_pct": 15.0, "regression_pct": 10.0}
    assert {"path": str(logs / "rtx-old/20211215T090000Z/bench_torch.log"), "line": 11,
            "message": "malformed line '#resnet34;fast': 'fast' is not a number: skipped"
            } in flags["problems"]
    assert "SLOW HOST a100-3" in (out / "report.txt").read_text()


def test_empty_logs_folder_writes_an_empty_report(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    rc, text, out = report_of(logs, tmp_path, fail_on_outlier=True)
    assert rc == 0
    assert "no runs found" in text
    assert read_csv(out / "merged.csv") == [["model"]]
    assert (out / "report.html").exists() and (out / "latency.png").exists()
