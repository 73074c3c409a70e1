"""Stack drift in `gpuprov report`: each host's latest stack.json against its GPU group's
majority; flags.json kind `drift`, DRIFT lines in the text and HTML report, slow hosts saying
whether their stack differs; manifests are untrusted. Real files, real report."""
from __future__ import annotations

import json
import os
from pathlib import Path

from tests.test_report import A100, BASE, read_csv, report_of, scaled
from tests.test_report_common import results_json, seed_log, write_run

RUNTIME = "nvidia-cuda-runtime"


def manifest(**change) -> dict:
    """A manifest as a host running the CUDA 13.0 wheels sends it; `change` replaces fields,
    `packages={name: version}` replaces package versions."""
    packages = {"nvidia-cuda-runtime": "13.0.96", "nvidia-cudnn-cu13": "9.28.1.4", "pip": "23.0.1"}
    packages.update(change.pop("packages", {}))
    data = {"schema": 1, "kernel": "6.1.0-41-amd64", "driver": "580.95.05", "cuda": "13.0.96",
            "cudnn": "9.28.1.4", "nccl": "", "torch": "", "python": "3.11.2",
            "environment": "/home/admin/.gpuprov/venv",
            "packages": [{"name": n, "version": v, "record_sha256": f"{hash((n, v)) & (2**256 - 1):064x}"}
                         for n, v in packages.items() if v is not None],
            "apt": [{"name": "nvidia-open", "version": "580.95.05-1"}]}
    data.update(change)
    return data


def write_stack(logs: Path, host: str, run: str, data, factor: float = 1.0) -> Path:
    d = write_run(logs, host, run, seed_log(scaled(factor)), results_json(A100, scaled(factor)))
    (d / "stack.json").write_text(data if isinstance(data, str) else json.dumps(data))
    return d


def test_the_host_whose_package_differs_from_the_majority_is_flagged(tmp_path):
    logs = tmp_path / "logs"
    for host in ("gpu1", "gpu2", "gpu3"):
        write_stack(logs, host, "20261125T090000Z", manifest())
    # gpu2's later run: cuDNN changed by hand, runtime removed.
    write_stack(logs, "gpu2", "20261125T100000Z",
                manifest(packages={"nvidia-cudnn-cu13": "9.13.0.50", RUNTIME: None}))
    rc, text, out = report_of(logs, tmp_path)
    assert rc == 0
    flags = json.loads((out / "flags.json").read_text())
    assert [(f["kind"], f["host"], f["what"], f["name"], f["value"], f["majority"])
            for f in flags["drift"]] == [
        ("drift", "gpu2", "package", RUNTIME, "(not installed)", "13.0.96"),
        ("drift", "gpu2", "package", "nvidia-cudnn-cu13", "9.13.0.50", "9.28.1.4"),
    ]
    assert flags["flagged"] is True
    line = ("DRIFT gpu2 package nvidia-cudnn-cu13: 9.13.0.50 (majority 9.28.1.4, 2 of 3 hosts), "
            "run 20261125T100000Z")
    assert line in text and line in flags["flags"]
    assert line in (out / "report.html").read_text() and line in (out / "report.txt").read_text()


def test_components_and_apt_packages_are_compared_too(tmp_path):
    logs = tmp_path / "logs"
    write_stack(logs, "gpu1", "r1", manifest())
    write_stack(logs, "gpu2", "r1", manifest())
    write_stack(logs, "gpu3", "r1", manifest(driver="570.172.08",
                                             apt=[{"name": "nvidia-open", "version": "570.172.08-1"}]))
    _, text, _ = report_of(logs, tmp_path)
    assert "DRIFT gpu3 driver: 570.172.08 (majority 580.95.05, 2 of 3 hosts)" in text
    assert "DRIFT gpu3 apt nvidia-open: 570.172.08-1 (majority 580.95.05-1, 2 of 3 hosts)" in text
    assert "DRIFT gpu1" not in text and "DRIFT gpu2" not in text


def test_two_hosts_that_differ_have_no_majority_and_both_are_named(tmp_path):
    logs = tmp_path / "logs"
    write_stack(logs, "gpu1", "r1", manifest())
    write_stack(logs, "gpu2", "r1", manifest(packages={RUNTIME: "13.0.48"}))
    _, text, _ = report_of(logs, tmp_path)
    assert f"DRIFT gpu1 package {RUNTIME}: 13.0.96 (no majority: 13.0.48 elsewhere, 2 hosts)" in text
    assert f"DRIFT gpu2 package {RUNTIME}: 13.0.48 (no majority: 13.0.96 elsewhere, 2 hosts)" in text


def test_a_slow_host_says_whether_its_stack_differs(tmp_path):
    logs = tmp_path / "logs"
    write_stack(logs, "gpu1", "r1", manifest())
    write_stack(logs, "gpu2", "r1", manifest())
    write_stack(logs, "gpu3", "r1", manifest(packages={"nvidia-cudnn-cu13": "9.13.0.50"}), 1.4)
    write_stack(logs, "gpu4", "r1", manifest())
    write_run(logs, "gpu5", "r1", seed_log(scaled(1.5)), results_json(A100, scaled(1.5)))
    _, text, _ = report_of(logs, tmp_path)
    lines = [line.strip() for line in text.splitlines()]
    slow = {line.split()[2]: line for line in lines if line.startswith("SLOW HOST")}
    assert slow["gpu3"].endswith("; stack differs in 1 item: package nvidia-cudnn-cu13 9.13.0.50")
    assert slow["gpu5"].endswith("; no stack manifest")
    write_stack(logs, "gpu3", "r2", manifest(), 1.4)  # the same stack, still slow: the GPU
    _, text, _ = report_of(logs, tmp_path)
    assert any(line.strip().startswith("SLOW HOST gpu3") and line.endswith("; stack same as its peers'")
               for line in text.splitlines())


def test_hostile_manifests_are_skipped_with_the_reason(tmp_path):
    logs = tmp_path / "logs"
    write_stack(logs, "gpu1", "r1", manifest())
    write_stack(logs, "gpu2", "r1", manifest())
    bad = {
        "schema": json.dumps(manifest(schema=2)),
        "notjson": "{\"schema\": 1,",
        "control": json.dumps(manifest(kernel="6.1\x1b[2J")),
        "longname": json.dumps(manifest(packages={"x" * 300: "1"})),
        "badhash": json.dumps(manifest(packages={}) | {"packages": [
            {"name": "a", "version": "1", "record_sha256": "zz"}]}),
        "many": json.dumps(manifest() | {"apt": [{"name": f"p{i}", "version": "1"}
                                                 for i in range(6000)]}),
    }
    for host, text in bad.items():
        write_stack(logs, host, "r1", text)
    (write_run(logs, "linked", "r1", seed_log(BASE)) / "stack.json").symlink_to("/etc/passwd")
    big = write_run(logs, "huge", "r1", seed_log(BASE)) / "stack.json"
    with open(big, "wb") as f:
        f.truncate(17 << 20)
    fifo = write_run(logs, "fifo", "r1", seed_log(BASE)) / "stack.json"
    os.mkfifo(fifo)
    rc, text, out = report_of(logs, tmp_path)
    assert rc == 0
    flags = json.loads((out / "flags.json").read_text())
    assert flags["drift"] == [] and set(flags["stacks"]) == {"gpu1", "gpu2"}
    problems = {Path(p["path"]).parent.parent.name: p["message"] for p in flags["problems"]
                if p["path"].endswith("stack.json")}
    assert set(problems) == set(bad) | {"linked", "huge", "fifo"}
    assert problems["schema"] == "stack manifest skipped: not a stack manifest of schema 1"
    assert problems["control"] == "stack manifest skipped: kernel is not a short line of text"
    assert "\x1b" not in text


def test_bidi_overrides_and_control_characters_in_a_manifest_show_escaped(tmp_path):
    """A manifest's version may hold C1 controls, DEL and bidi overrides (the manifest refuses
    only C0): report.html kept them, so "580.95.05" could display where another version was.
    Now the page shows each as its escape and the text as "?"."""
    logs = tmp_path / "logs"
    write_stack(logs, "gpu1", "r1", manifest())
    write_stack(logs, "gpu2", "r1", manifest())
    forged = "\u202e50.59.085\u202c\x85\x7f"  # shows as "580.95.05" right to left
    write_stack(logs, "gpu3", "r1", manifest(driver=forged))
    rc, text, out = report_of(logs, tmp_path)
    assert rc == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "DRIFT gpu3 driver: \\u202e50.59.085\\u202c\\x85\\x7f (majority 580.95.05" in page
    line = "DRIFT gpu3 driver: ?50.59.085??? (majority 580.95.05, 2 of 3 hosts)"
    assert line in text and line in (out / "report.txt").read_text(encoding="utf-8")
    for shown in (page, text):
        assert not set(shown) & set("\u202e\u202c\x85\x7f"), "a control character reached the report"


def _whole_stack_differs(logs: Path, host: str) -> None:
    """A host whose driver, CUDA, cuDNN, every package and every apt package has a version of
    its own: 10,000 items (with manifest()'s 3 packages, the manifest's most of each)."""
    write_stack(logs, host, "r1", manifest(
        driver=f"580+{host}", cuda=f"13.0+{host}", cudnn=f"9.28+{host}",
        packages={f"pkg{i:05d}": f"1.{i}+{host}" for i in range(4997)},
        apt=[{"name": f"deb{i:05d}", "version": f"2.{i}+{host}"} for i in range(5000)]))


def test_thirty_thousand_drift_items_print_a_line_per_host_and_stay_in_the_files(tmp_path):
    """Three hosts whose stacks differ in 10,000 items each: the terminal got a DRIFT line per
    item (30,009 lines, 4.2 MB in the issue) and flags.json 14.6 MB. Now each host gets one
    line (how many, three of them, where the list is), flags.json lists each host's first
    100, and drift.csv every item."""
    logs = tmp_path / "logs"
    for host in ("gpu1", "gpu2", "gpu3"):
        _whole_stack_differs(logs, host)
    rc, text, out = report_of(logs, tmp_path)
    assert rc == 0
    drift_lines = [line.strip() for line in text.splitlines() if line.strip().startswith("DRIFT")]
    assert [line.split(":")[0] for line in drift_lines] == ["DRIFT gpu1", "DRIFT gpu2", "DRIFT gpu3"]
    assert drift_lines[2] == (
        "DRIFT gpu3: 10000 stack items differ from its GPU group's (3 hosts), run r1: driver "
        "580+gpu3 (no majority); cuda 13.0+gpu3 (no majority); cudnn 9.28+gpu3 (no majority); "
        "... every one in drift.csv")
    rows = read_csv(out / "drift.csv")
    assert len(rows) == 1 + 30_000
    assert ["gpu3", "r1", "apt", "deb04999", "2.4999+gpu3", "", "0", "3"] in rows
    flags = json.loads((out / "flags.json").read_text())
    assert [(h["host"], h["items"], h["listed"], h["all_in"]) for h in flags["drift_hosts"]] == [
        (host, 10_000, 100, "drift.csv") for host in ("gpu1", "gpu2", "gpu3")]
    assert len(flags["drift"]) == 300
    sizes = {"terminal": len(text.encode()), "flags.json": (out / "flags.json").stat().st_size,
             "report.html": (out / "report.html").stat().st_size,
             "drift.csv": (out / "drift.csv").stat().st_size}
    print("30,000 drift items:", ", ".join(f"{k} {v:,} bytes" for k, v in sizes.items()))
    assert sizes["terminal"] < 16_000 and sizes["flags.json"] < 256_000
