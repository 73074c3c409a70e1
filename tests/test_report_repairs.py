"""Each node's repairs in `gpuprov report` (issue 46, item 4): the remediation records that
`gpuprov remediate` leaves in `<logs>/<node>/<run>/remediation.json` (written here with the
record's own writer, remote/ground/repairs.py `Repair.to_json`) beside that run's re-validation
(a results.json as the validation writes it), read by the real report: the Repairs section of
the printed report and report.html, flags.json's `repairs`, the Prometheus lines, and the
repairs that did not hold within N runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from calendar import timegm
from pathlib import Path

import pytest

from remote.commands import report as report_cmd
from remote.ground.repairs import LEFT_OUT, REPAIRED, VALIDATE_STEP, WAITING, Repair, Step, Trigger
from tests.test_report_common import REPO, results_json, write_run

GPU = "NVIDIA H100 80GB HBM3"
REBOOT, RESET = "reboot the node", "reset the GPU"
FINDING = "gpu: Xid 79: GPU has fallen off the bus"


def run_id(hour: int) -> str:
    return f"20261126T{hour:02d}0000Z"


def at(hour: int) -> float:
    return float(timegm((2026, 11, 26, hour, 0, 0, 0, 0, 0)))


def verdict(logs: Path, node: str, hour: int, sign: str) -> str:
    """A run of `node` at `hour` whose results.json passed (P) or failed (F)."""
    results = json.loads(results_json(GPU))
    if sign == "F":
        results["ok"] = False
        results["checks"][0].update(status="fail", reason="Xid 79")
    write_run(logs, node, run_id(hour), results=json.dumps(results))
    return run_id(hour)


def history(logs: Path, node: str, signs: str, start: int = 10) -> list[str]:
    return [verdict(logs, node, start + n, sign) for n, sign in enumerate(signs) if sign != " "]


def repair(logs: Path, node: str, hour: int, trigger_hour: int, action: str, outcome: str,
           took_s: float, reason: str = "") -> str:
    """The record of a remediation run of `node` at `hour`, taken `took_s`; when it validated
    again (repaired, left out) its re-validation in the same folder, passed or failed."""
    start = at(hour)
    steps = [] if outcome == WAITING else [
        Step(action, start, took_s / 2, "done", "back after 212 s"),
        Step(VALIDATE_STEP, start + took_s / 2, took_s / 2, "done" if outcome == REPAIRED else "failed")]
    record = Repair(node, run_id(hour), Trigger(run_id(trigger_hour), FINDING, action), start,
                    None if outcome == WAITING else start + took_s, steps, outcome, reason)
    folder = logs / node / run_id(hour)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "remediation.json").write_text(record.to_json())
    if outcome in (REPAIRED, LEFT_OUT):
        verdict(logs, node, hour, "P" if outcome == REPAIRED else "F")
    return run_id(hour)


def fleet(logs: Path) -> dict[str, list[str]]:
    """n1 repaired and held; n2 repaired, failed again 2 runs later, then left out; n3
    repaired, failed again 4 runs later (beyond the default window); n4 never remediated; n5
    held back by the breaker (a folder with its record alone)."""
    runs = {}
    runs["n1"] = history(logs, "n1", "F PPP") + [repair(logs, "n1", 11, 10, REBOOT, REPAIRED, 600)]
    runs["n2"] = history(logs, "n2", "F PF") + [
        repair(logs, "n2", 11, 10, RESET, REPAIRED, 900),
        repair(logs, "n2", 14, 13, REBOOT, LEFT_OUT, 1500,
               "still failing after the reboot (gpu: Xid 79): left out for an RMA")]
    runs["n3"] = history(logs, "n3", "F PPPF") + [repair(logs, "n3", 11, 10, REBOOT, REPAIRED, 1200)]
    runs["n4"] = history(logs, "n4", "PPP")
    runs["n5"] = history(logs, "n5", "F") + [repair(logs, "n5", 11, 10, REBOOT, WAITING, 0)]
    return runs


def report(logs: Path, out: Path, **options: str) -> tuple[int, dict, str, str, str]:
    """`gpuprov report` as its command runs it: (exit status, flags.json, report.txt,
    report.html, the Prometheus file)."""
    prom = out.parent / f"{out.name}.prom"
    rc = report_cmd.run(logs=str(logs), out=str(out), prometheus=str(prom), **options)
    return (rc, json.loads((out / "flags.json").read_text()), (out / "report.txt").read_text(),
            (out / "report.html").read_text(), prom.read_text())


def test_each_nodes_repairs_time_to_repair_and_what_did_not_hold_are_reported(tmp_path):
    logs = tmp_path / "logs"
    runs = fleet(logs)
    rc, flags, text, page, prom = report(logs, tmp_path / "out")
    assert rc == 0
    assert flags["problems"] == []  # n5's folder with its record alone is no bad log
    assert any(n.startswith("1 remediation run(s) without a validation") and "(n5)" in n
               for n in flags["notes"]), flags["notes"]

    # the printed report: the fleet's line, a row per remediated node, what did not hold
    section = text[text.index("Repairs (gpuprov remediate"):text.index("Health (")]
    assert "4 nodes remediated, 3 repaired, 5 repairs; median time to repair 15m; repair " \
        "did not hold on 1 node" in section, section
    rows = {line.split()[0]: line.split() for line in section.splitlines()[4:8]}
    assert set(rows) == {"n1", "n2", "n3", "n5"}, section  # n4: never remediated, not shown
    assert " ".join(rows["n1"]) == f"n1 1 1 0 0 0 10m / 10m 0 {runs['n1'][-1]} repaired reboot the node 1"
    assert " ".join(rows["n2"]) == (f"n2 2 1 1 0 0 15m / 15m 1 {run_id(14)} left out "
                                    "reboot the node 1, reset the GPU 1")
    assert " ".join(rows["n5"]) == f"n5 1 0 0 1 0 - / - 0 {run_id(11)} waiting reboot the node 1"
    assert (f"REPAIR DID NOT HOLD n2: repaired in {run_id(11)} (reset the GPU), failed again in "
            f"{run_id(13)} (2 runs later) (window: its next 3 runs)") in section
    assert f"n2: LEFT OUT in {run_id(14)} (reboot the node): still failing after the reboot" in section
    assert "n3:" not in section and "n4" not in section  # n3 failed 4 runs later: held

    # flags.json
    rep = flags["repairs"]
    assert (rep["nodes_remediated"], rep["nodes_repaired"], rep["repairs"],
            rep["median_time_to_repair_s"], rep["coming_back"]) == (4, 3, 5, 900.0, ["n2"])
    nodes = {n["host"]: n for n in rep["nodes"]}
    assert nodes["n2"]["outcomes"] == {"repaired": 1, "left out": 1, "waiting": 0, "stopped": 0}
    assert nodes["n2"]["by_action"] == {REBOOT: 1, RESET: 1}
    assert nodes["n2"]["did_not_hold"] == [{"run": run_id(11), "action": RESET,
                                            "failed_run": run_id(13), "runs_after": 2}]
    assert nodes["n3"]["time_to_repair_s"] == {"median": 1200.0, "latest": 1200.0}
    assert nodes["n2"]["records"][1]["steps"] == [REBOOT, VALIDATE_STEP]
    assert nodes["n2"]["records"][1]["started"] == "2026-11-26T14:00:00Z"
    assert flags["history_rules"]["repair_held"] == {"of_next_runs": 3}
    # the remediation run's own re-validation is a run of the node's history
    timeline = {h["host"]: h["timeline"] for h in flags["history"]}
    assert [m["verdict"] for m in timeline["n1"]] == ["fail", "pass", "pass", "pass", "pass"]

    # the Prometheus file: n4 has no repair line
    assert 'gpuprov_host_repairs{action="reset the GPU",host="n2",outcome="repaired"} 1.0' in prom
    assert 'gpuprov_host_repairs{action="reboot the node",host="n2",outcome="left out"} 1.0' in prom
    assert 'gpuprov_host_repair_duration_median_seconds{host="n3"} 1200.0' in prom
    assert 'gpuprov_host_repairs_not_held{host="n2"} 1.0' in prom
    assert 'gpuprov_host_repairs_not_held{host="n1"} 0.0' in prom
    assert "# HELP gpuprov_host_repairs " in prom
    assert not any('host="n4"' in line for line in prom.splitlines() if "repair" in line)

    # report.html
    assert '<h2 id="repairs">Repairs</h2>' in page
    assert f"REPAIR DID NOT HOLD n2: repaired in {run_id(11)}" in page
    assert "<td class=\"nowrap\">n4</td><td class=\"num\">" not in page.split('id="repairs"')[1] \
        .split("</table>")[0]


def test_a_larger_repair_window_finds_a_repair_that_failed_later(tmp_path):
    logs = tmp_path / "logs"
    fleet(logs)
    rc, flags, text, _page, prom = report(logs, tmp_path / "out", repair_window="4")
    assert rc == 0
    assert flags["repairs"]["coming_back"] == ["n2", "n3"]
    assert f"REPAIR DID NOT HOLD n3: repaired in {run_id(11)} (reboot the node), failed again in " \
        f"{run_id(15)} (4 runs later) (window: its next 4 runs)" in text
    assert "did not hold: a failed run within its next 4 runs" in text
    assert 'gpuprov_host_repairs_not_held{host="n3"} 1.0' in prom


@pytest.mark.parametrize("value", ["0", "-1", "three", "3/4", "1001", ""])
def test_a_bad_repair_window_is_one_line_and_exit_2(tmp_path, capsys, value):
    (tmp_path / "logs").mkdir()
    rc = report_cmd.run(logs=str(tmp_path / "logs"), out=str(tmp_path / "out"), repair_window=value)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--repair-window must be N" in err, err
    assert not (tmp_path / "out").exists()


def test_a_bad_remediation_record_is_that_nodes_problem(tmp_path):
    """One record is not JSON, one names an outcome no version writes, one is a FIFO, one
    names another node: each is a problem named by its file, skipped; the report goes on, exit
    0 as for any bad log, and the good records of the same fleet are counted."""
    logs = tmp_path / "logs"
    fleet(logs)
    history(logs, "n6", "F", start=10)
    bad = {}
    for hour, what in ((11, "not json"), (12, "outcome"), (13, "fifo"), (14, "other node")):
        folder = logs / "n6" / run_id(hour)
        folder.mkdir(parents=True)
        path = folder / "remediation.json"
        good = Repair("n6", run_id(hour), Trigger(run_id(10), FINDING, REBOOT), at(hour),
                      at(hour) + 60, [], REPAIRED).to_json()
        if what == "not json":
            path.write_text(good[:40])
        elif what == "outcome":
            path.write_text(good.replace('"repaired"', '"fixed"'))
        elif what == "fifo":
            os.mkfifo(path)
        else:
            path.write_text(good.replace('"node": "n6"', '"node": "n1"'))
        bad[what] = str(path)
    rc, flags, text, _page, _prom = report(logs, tmp_path / "out")
    assert rc == 0
    problems = {p["path"]: p["message"] for p in flags["problems"]}
    assert problems[bad["not json"]].startswith("bad remediation record: not readable JSON")
    assert "'fixed' is none of repaired, left out, waiting, stopped" in problems[bad["outcome"]]
    assert problems[bad["fifo"]] == "bad remediation record: not a regular file: skipped"
    assert problems[bad["other node"]] == f"remediation record of n1/{run_id(14)}, not of its folder: skipped"
    assert f"{bad['fifo']}: bad remediation record: not a regular file: skipped" in text
    assert "n6" not in {n["host"] for n in flags["repairs"]["nodes"]}
    assert flags["repairs"]["repairs"] == 5  # the fleet's good records, counted as before
    assert "Traceback" not in text


def test_the_bench_tree_is_a_valid_logs_tree(tmp_path):
    """bench/report_repairs.py's generated tree (a small one here) reads with no problem, and
    every node's records are counted."""
    proc = subprocess.run([sys.executable, "-m", "bench.report_repairs", "--nodes", "6",
                           "--runs", "8", "--keep", str(tmp_path / "tree")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flags = json.loads((tmp_path / "tree" / "report" / "flags.json").read_text())
    assert flags["problems"] == [] and len(flags["history"]) == 6
    assert flags["repairs"]["nodes_remediated"] == 6 and flags["repairs"]["repairs"] >= 6
    assert flags["repairs"]["coming_back"], flags["repairs"]


def test_a_records_texts_show_as_text(tmp_path):
    """A record's reason and action are the control side's, yet read as untrusted: markup and
    control characters in them drive neither report.html nor the terminal."""
    logs = tmp_path / "logs"
    history(logs, "n1", "F")
    repair(logs, "n1", 11, 10, "reboot <b>now</b>", LEFT_OUT, 60,
           "left out\x1b[2J<script>alert(1)</script>\u202e")
    rc, flags, text, page, prom = report(logs, tmp_path / "out")
    assert rc == 0 and flags["problems"] == []
    assert "n1: LEFT OUT in 20261126T110000Z (reboot <b>now</b>): left out?[2J<script>alert(1)" \
        "</script>?" in text
    assert "<script>alert" not in page and "<b>now" not in page
    assert "left out\\x1b[2J&lt;script&gt;alert(1)&lt;/script&gt;\\u202e" in page
    assert 'gpuprov_host_repairs{action="reboot <b>now</b>",host="n1",outcome="left out"} 1.0' in prom


@pytest.mark.root
@pytest.mark.slow
def test_the_figures_of_a_real_remediation_on_a_sandbox_host(work):
    """Real runs end to end: a sandbox host (tests/sandbox_fixture.py) made sick for real
    (/dev/shm unwritable fails host_mounts: "reboot the node", as tests/test_remediate_sandbox.py
    does), the real `gpuprov remediate` reboots it and validates it again, a real validation
    passes, the host is made sick again and fails: the report counts the repair, its time (the
    record's) and that it did not hold."""
    if os.geteuid() != 0:
        pytest.skip("sandbox hosts need root")
    from remote.ground.repairs import read_repair
    from tests.conftest import invoke
    from tests.sandbox_fixture import own_hosts

    profile = json.dumps({"node_profile": {"host": {"mounts": ["/dev/shm"]}},
                          "validate_args": "--device cpu --checks host_mounts"})
    with own_hosts(1) as hosts:
        name = hosts.names[0]

        def sicken() -> None:
            rc, out, err = hosts.run(name, "sudo -n chmod 0555 /dev/shm")
            assert rc == 0, out + err

        def validate() -> int:
            return invoke("validate", "--host", name, "--inventory", str(hosts.inventory),
                          "--var", profile, cwd=work, timeout=600).rc

        sicken()
        assert validate() == 3
        res = invoke("remediate", "--host", name, "--inventory", str(hosts.inventory), "--var",
                     profile, "--reboot-timeout", "120", cwd=work, timeout=900)
        assert res.rc == 0, res.out + res.err
        assert validate() == 0
        sicken()
        assert validate() == 3
    runs = sorted(p.name for p in (work / "logs" / name).iterdir())
    [record_path] = (work / "logs" / name).glob("*/remediation.json")
    record = read_repair(record_path)
    assert record.outcome == REPAIRED and runs.index(record.run_id) == 1 and len(runs) == 4

    res = invoke("report", "--logs", str(work / "logs"), "--out", str(work / "report"),
                 "--prometheus", str(work / "r.prom"), cwd=work, timeout=600)
    assert res.rc == 0, res.out + res.err
    flags = json.loads((work / "report" / "flags.json").read_text())
    [node] = flags["repairs"]["nodes"]
    assert node["by_action"] == {REBOOT: 1} and node["outcomes"][REPAIRED] == 1
    assert node["time_to_repair_s"]["latest"] == round(record.duration_s or 0, 3) > 0
    assert node["did_not_hold"] == [{"run": record.run_id, "action": REBOOT,
                                     "failed_run": runs[3], "runs_after": 2}]
    text = (work / "report" / "report.txt").read_text()
    assert f"REPAIR DID NOT HOLD {name}: repaired in {record.run_id} (reboot the node), failed " \
        f"again in {runs[3]} (2 runs later) (window: its next 3 runs)" in text
    assert f'gpuprov_host_repairs_not_held{{host="{name}"}} 1.0' in (work / "r.prom").read_text()
