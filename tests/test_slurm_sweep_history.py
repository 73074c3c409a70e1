"""What `validate --sweep` reads and decides without a cluster: each node's latest validation
and its age from the node's own run folders (the report's history; real files), `--max-age`,
and Slurm's answers about preemption (`scontrol show config`, `scontrol show partition -o`,
`squeue`) as Slurm 22.05.8 printed them for tests/slurm_cluster.py's cluster with
`preempt=True`.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from remote.ground.ages import parse_max_age
from remote.ground.errors import InputError
from remote.ground.runfolder import attempt_record
from remote.report.history import format_age, last_validation
from remote.scheduler.slurm.settings import SlurmSettings
from remote.scheduler.slurm.sweep import check_preemptible, parse_job_states
from tests.test_report_common import recording_terminal, results_json, write_run


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _run(logs: Path, host: str, started: float, verdict: str | None, counts: bool = True) -> str:
    """A run of `host` whose validation the control side started at `started`: passed (P),
    failed (F), or gave no verdict (None: e.g. preempted, `counts` False)."""
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started)) + ".000Z-0a0b"
    results = None
    if verdict is not None:
        data = json.loads(results_json("NVIDIA H100 80GB HBM3"))
        if verdict == "F":
            data["ok"] = False
            data["checks"][0].update(status="fail", reason="Xid 79")
        results = json.dumps(data)
    folder = write_run(logs, host, run_id, results=results)
    outcome = "not validated (preempted)" if verdict is None else "passed"
    (folder / "validation.json").write_text(attempt_record(
        _stamp(started), _stamp(started + 60), outcome,
        "" if verdict is not None else outcome, counts))
    return run_id


def test_the_latest_validation_with_a_verdict_and_when_it_started(tmp_path):
    """A preempted run (no verdict, not counted) after a failed one: the failed one is the
    node's latest validation, its age counted from when the control side started it."""
    now = time.time()
    failed = _run(tmp_path, "n1", now - 3 * 3600, "F")
    _run(tmp_path, "n1", now - 600, None, counts=False)
    last = last_validation(tmp_path, "n1")
    assert last is not None and (last.run_id, last.verdict) == (failed, "fail")
    assert last.at == pytest.approx(now - 3 * 3600, abs=1)
    assert last_validation(tmp_path, "n2") is None  # never validated
    _run(tmp_path, "n3", now - 60, None, counts=False)
    assert last_validation(tmp_path, "n3") is None  # only preempted: no verdict yet


def test_a_run_recorded_before_validation_json_is_dated_by_its_run_id(tmp_path):
    write_run(tmp_path, "n1", "20261122T055742.123Z-14af",
              results=results_json("NVIDIA H100 80GB HBM3"))
    last = last_validation(tmp_path, "n1")
    assert last is not None and last.verdict == "pass"
    assert _stamp(last.at) == "2026-11-22T05:57:42Z"


def test_the_report_shows_each_hosts_age(tmp_path):
    from remote.report import run_report

    now = time.time()
    logs = tmp_path / "logs"
    run_id = _run(logs, "n1", now - (2 * 86400 + 5 * 3600 + 100), "P")
    _run(logs, "n2", now - 90, "F")
    _run(logs, "n3", now - 30, None, counts=False)  # preempted in a sweep: no verdict
    rc = run_report(logs, tmp_path / "out", terminal=recording_terminal())
    assert rc == 0
    text = (tmp_path / "out" / "report.txt").read_text()
    assert "host  runs  passed  failed  streak  state  age" in text, text
    history = text.split("History (")[1].split("\n\n")[0]
    assert re.search(r"^n1 +1 +1 +0 +1 pass +- +2d 5h ago$", history, re.M), history
    assert re.search(r"^n2 +1 +0 +1 +1 fail +- +1m 3[0-9]s ago$", history, re.M), history
    assert "1 run(s) whose validation was started and stopped before a verdict of the host's " \
           "(preempted by real work in a sweep, interrupted): no verdict, no failure (n3)" in text
    assert "failed runs in History (n3)" not in text and not re.search(r"^n3 ", history, re.M)
    flags = json.loads((tmp_path / "out" / "flags.json").read_text())
    last = {h["host"]: h["last_validated"] for h in flags["history"]}
    assert last["n1"]["run"] == run_id and last["n1"]["verdict"] == "pass"
    assert 2 * 86400 + 5 * 3600 + 100 <= last["n1"]["age_s"] < 2 * 86400 + 5 * 3600 + 200


@pytest.mark.parametrize("text, seconds", [("24h", 86400), ("7d", 7 * 86400), ("90m", 5400),
                                           ("0s", 0), ("1.5h", 5400), ("2w", 14 * 86400)])
def test_max_age_reads_a_number_and_a_unit(text, seconds):
    assert parse_max_age(text) == seconds


@pytest.mark.parametrize("text", ["7", "7 days", "-1d", "1d12h", "d", "", "1e3s", "７d"])
def test_a_max_age_without_its_unit_is_refused(text):
    with pytest.raises(InputError, match="--max-age must be a number and a unit"):
        parse_max_age(text)


def test_ages_read_in_two_units():
    assert [format_age(s) for s in (0, 45, 725, 18723, 273605, 3 * 86400)] == \
        ["0s", "45s", "12m 5s", "5h 12m", "3d 4h", "3d"]


# `scontrol show config` (its PreemptType line) and `scontrol show partition -o` of the test
# cluster with preempt=True, Slurm 22.05.8 (cut to the fields read)
CONFIG = """Configuration data as of 2026-11-29T07:27:08
PreemptMode             = CANCEL
PreemptType             = preempt/partition_prio
PreemptExemptTime       = 00:00:00
"""
PARTITIONS = """PartitionName=debug Default=YES Nodes=n[1-3] PriorityTier=1 PreemptMode=CANCEL State=UP
PartitionName=sweep Default=NO Nodes=n[1-3] PriorityTier=1 PreemptMode=CANCEL State=UP
PartitionName=real Default=NO Nodes=n[1-3] PriorityTier=10 PreemptMode=CANCEL State=UP
"""


def _settings(sweep: str) -> SlurmSettings:
    from remote.ground.errors import Where

    return SlurmSettings(partition="debug", where=Where("inventory.yaml", 3), at={},
                         sweep_partition=sweep, host="hpc1")


def test_a_preemptible_sweep_partition_is_accepted():
    kind, tiers = check_preemptible(_settings("sweep"), CONFIG + "@@partitions\n" + PARTITIONS)
    assert kind == "preempt/partition_prio" and tiers == {"debug": 1, "sweep": 1, "real": 10}


@pytest.mark.parametrize("config, partitions, sweep, message", [
    (CONFIG.replace("preempt/partition_prio", "preempt/none"), PARTITIONS, "sweep",
     "the cluster has no preemption (PreemptType=preempt/none)"),
    ("", PARTITIONS, "sweep", "the cluster has no preemption"),
    (CONFIG, PARTITIONS.replace("PreemptMode=CANCEL State=UP\nPartitionName=real",
                                "PreemptMode=OFF State=UP\nPartitionName=real"), "sweep",
     "has PreemptMode=OFF"),
    (CONFIG, PARTITIONS.replace("PriorityTier=1 PreemptMode=CANCEL State=UP\nPartitionName=real",
                                "PriorityTier=1 PreemptMode=SUSPEND,GANG State=UP\n"
                                "PartitionName=real"), "sweep", "has PreemptMode=SUSPEND,GANG"),
    (CONFIG, PARTITIONS, "real", "has the highest PriorityTier (10)"),
    (CONFIG, PARTITIONS, "nope", "is not a partition of the cluster (it has: debug, real, sweep)"),
])
def test_a_sweep_partition_real_work_cannot_preempt_is_refused(config, partitions, sweep,
                                                              message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        check_preemptible(_settings(sweep), config + "@@partitions\n" + partitions)
    assert str(err.value).startswith("inventory.yaml:3: host 'hpc1': slurm.sweep_partition")


def test_job_states_are_read_from_squeue_lines_only():
    # squeue --states=all --noheader --format='%i|%T' (Slurm 22.05.8), and what else a login
    # node may print
    out = "1|PREEMPTED\n3|COMPLETED\nsqueue: error: something\n4|RUNNING|x\n5|preempted\n"
    assert parse_job_states(out) == {"1": "PREEMPTED", "3": "COMPLETED"}


@pytest.mark.parametrize("options, message", [
    ({"max_age": "1h"}, "--max-age goes with --sweep"),
    ({"sweep": True}, "--sweep validates a cluster's idle nodes: select a host with slurm: in "
                      "the inventory"),
])
def test_sweep_options_that_cannot_apply_are_one_line_and_exit_2(tmp_path, capsys, options,
                                                                 message):
    """Checked before any host is contacted: the host is an address nothing answers on."""
    from remote.commands import validate as validate_cmd

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  gpu1: {address: 127.0.0.1, port: 9}\n")
    rc = validate_cmd.run(host="gpu1", inventory=str(inventory), logs_dir=str(tmp_path / "logs"),
                          **options)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "logs").exists()
