"""`gpuprov validate --sweep` against a real Slurm: munged, slurmctld and three `slurmd -N nX`
(tests/slurm_cluster.py) with preemption by partition tier (`preempt=True`: a `sweep`
partition at the lowest tier whose jobs are cancelled when preempted, and `real` above it over
the same nodes), the login node reached with `connection: local`.

Real preemption: a job of `real` takes a node the sweep validates. Each node's validation waits
for a file of the test's (`go-NODE`) before it starts validate/, so the test decides when a
node's validation ends, and when the real work comes.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.procs import wait_until
from tests.slurm_cluster import SlurmCluster, missing_reason

pytestmark = pytest.mark.root  # runs slurmd as root: the slow layer

# Each node's validation, held until the test lets it go: writes started-NODE, waits for
# go-NODE, then runs the real validate/ (`validate_python` is what runs `-m validate ...`)
HELD_PYTHON = """#!/bin/sh
touch {dir}/started-$SLURMD_NODENAME
while [ ! -e {dir}/go-$SLURMD_NODENAME ]; do sleep 0.1; done
exec %(python)s "$@"
"""
# The sweep partition's Epilog, slow while the test's `slow-epilog` file exists: a job stays
# COMPLETING until its Epilog has ended on every node ("CG COMPLETING Job is in the process of
# completing", squeue(1)), as on a cluster whose Epilog runs a health check, so squeue shows the
# preempted job COMPLETING, not yet PREEMPTED, when salloc has already returned.
EPILOG = """#!/bin/sh
if [ "$SLURM_JOB_PARTITION" = sweep ] && [ -e {dir}/slow-epilog ]; then sleep 5; fi
exit 0
"""


@pytest.fixture(scope="module")
def slurm():
    why = missing_reason()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(3, preempt=True, conf_extra="Epilog={dir}/epilog\n",
                           scripts={"held-python": HELD_PYTHON % {"python": sys.executable},
                                    "kernel.log": "", "epilog": EPILOG})
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(slurm):
    """The module's cluster with no node's validation started or let go yet, its Epilog
    quick; afterwards every job cancelled and every node idle again (a test that failed leaves
    no drained node to the next)."""
    for node in slurm.nodes:
        for mark in ("started", "go"):
            (slurm.dir / f"{mark}-{node}").unlink(missing_ok=True)
    (slurm.dir / "slow-epilog").unlink(missing_ok=True)
    yield slurm
    (slurm.dir / "slow-epilog").unlink(missing_ok=True)
    for partition in ("real", "sweep"):
        slurm.run("scancel", f"--partition={partition}", check=False)
    slurm.resume_all()


def inventory(cluster: SlurmCluster, tmp_path: Path, **slurm) -> Path:
    path = tmp_path / "inventory.yaml"
    spec = {"partition": "debug", "conf": str(cluster.conf), "gpus_per_node": 2,
            "sweep_partition": "sweep", "sweep_batch": 2, **slurm}
    # validate's options for a run that passes without a GPU: the Xid scan of an empty log
    path.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local", "slurm": spec,
        "vars": {"validate_python": str(cluster.dir / "held-python"),
                 "validate_args": f"--checks xid --kernel-log {cluster.dir / 'kernel.log'}"}}}},
        sort_keys=False))
    return path


def sweep(cluster: SlurmCluster, tmp_path: Path, *options: str, path: str = "",
          **slurm) -> subprocess.Popen:
    """`invoke validate --host hpc1 --sweep` as its own process, logs in tmp_path/logs;
    `path`: a folder put first on its PATH."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if path:
        env["PATH"] = f"{path}:{env['PATH']}"
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "validate", "--host",
         "hpc1", "--inventory", str(inventory(cluster, tmp_path, **slurm)), "--sweep",
         *options],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out


def go(cluster: SlurmCluster, *nodes: str) -> None:
    for node in nodes:
        (cluster.dir / f"go-{node}").touch()


def started(cluster: SlurmCluster, node: str) -> bool:
    return (cluster.dir / f"started-{node}").exists()


def steps_on(cluster: SlurmCluster, node: str) -> list[str]:
    """The job steps running on `node` (the batch's one validation step spans its nodes)."""
    out = cluster.run("squeue", "--steps", "-h", "-o", "%i %N").stdout.decode()
    steps = []
    for line in out.splitlines():
        step, *nodes = line.split()
        names = cluster.run("scontrol", "show", "hostnames", *nodes).stdout.decode().split() \
            if nodes else []
        if node in names:
            steps.append(step)
    return steps


def results_stored(logs: Path, node: str) -> bool:
    """Whether `node`'s validation ended and its results were stored (the route stores each
    node's as soon as they are whole, while the step's other tasks still run)."""
    return any((logs / node).glob("*/results.json"))


def real_job(cluster: SlurmCluster, node: str) -> str:
    """Real work on `node`: a job of the higher-tier partition, running until cancelled."""
    out = cluster.run("sbatch", "--parsable", "-p", "real", "-w", node, "-N1", "-n1",
                      "-o", "/dev/null", "--wrap", "sleep 600").stdout.decode().strip()
    assert wait_until(lambda: job_state(cluster, out) == "RUNNING", 60), job_state(cluster, out)
    return out


def job_state(cluster: SlurmCluster, job: str) -> str:
    out = cluster.run("squeue", "-j", job, "-t", "all", "-h", "-o", "%T", check=False).stdout
    return out.decode().strip()


def record_of(logs: Path, run_id: str) -> dict:
    return json.loads((logs / "hpc1" / run_id / "slurm.json").read_text())


def test_a_sweep_preempted_by_real_work_and_a_second_one_within_max_age(cluster, tmp_path):
    """The sweep validates n1 and n2 as one job of `sweep` (batch of 2), then n3. n1's
    validation ends; then a real job takes n2: Slurm preempts the sweep's job. n1 keeps its
    verdict, n2 is "not validated (preempted)": not failed, not drained (--drain-failed is
    given), no verdict in its history; n3 is validated in the next batch. A second sweep
    within --max-age skips n1 and n3 (each with its age) and validates n2 only."""
    logs = tmp_path / "logs"
    go(cluster, "n3")
    (cluster.dir / "slow-epilog").touch()  # the preempted job COMPLETING when salloc returns
    proc = sweep(cluster, tmp_path, "--drain-failed", "--json", str(tmp_path / "first.json"),
                 "--junit", str(tmp_path / "first.xml"))
    job = ""
    try:
        assert wait_until(lambda: started(cluster, "n1") and started(cluster, "n2"), 90), \
            cluster.log_tail()
        assert steps_on(cluster, "n1") and steps_on(cluster, "n2")
        go(cluster, "n1")  # n1's validation runs and ends, its results stored
        assert wait_until(lambda: results_stored(logs, "n1"), 90)
        job = real_job(cluster, "n2")  # Slurm preempts the sweep's job to start it
        out = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    hosts = json.loads((tmp_path / "first.json").read_text())["hosts"]
    assert hosts["n1"]["validation"].startswith("passed"), out
    assert hosts["n3"]["validation"].startswith("passed"), out
    assert hosts["n2"]["validation"] == "not validated (preempted)", out
    assert re.search(r"^n2 +warning +not validated \(preempted\)$", out, re.M), out
    assert "3 node(s) validated through Slurm: 2 passed, 1 preempted" in out, out
    # CI reads the preempted node as skipped, neither passed nor failed
    n2_suite = ET.parse(tmp_path / "first.xml").getroot().find("testsuite[@name='n2']")
    assert n2_suite is not None, (tmp_path / "first.xml").read_text()
    assert (n2_suite.get("skipped"), n2_suite.get("failures")) == ("1", "0")
    run_id = next((logs / "hpc1").iterdir()).name
    record = record_of(logs, run_id)
    assert record["nodes"]["n2"]["preempted"] is True and record["nodes"]["n1"]["ok"] is True
    batches = record["sweep"]["batches"]
    assert [b["nodes"] for b in batches] == [["n1", "n2"], ["n3"]]
    assert "PREEMPTED" in batches[0]["job_states"].values(), batches
    assert "PREEMPTED" not in batches[1]["job_states"].values(), batches
    state = cluster.run("squeue", "-j", batches[0]["job_id"], "-t", "all", "-h", "-o", "%P %T")
    assert state.stdout.decode().split() == ["sweep", "PREEMPTED"]
    # n2's history: a validation started, no verdict, not counted as a failure
    attempt = json.loads(next((logs / "n2").glob("*/validation.json")).read_text())
    assert attempt["counts"] is False and attempt["outcome"] == "not validated (preempted)"
    assert not list((logs / "n2").glob("*/results.json"))
    info = cluster.node_info()
    assert "DRAIN" not in (info["n2"].get("state_flags") or []), info["n2"]

    # the report: n1 and n3 with their age, n2 without a verdict has none
    report = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO), "report",
                             "--logs", str(logs), "--out", str(tmp_path / "report")],
                            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr
    text = (tmp_path / "report" / "report.txt").read_text()
    assert "stopped before a verdict of the host's (preempted by real work in a sweep, " \
           "interrupted): no verdict, no failure (n2)" in text, text
    for node in ("n1", "n3"):
        assert re.search(rf"^{node} +1 +1 +0 +1 pass +- +[0-9]+s ago$", text, re.M), text
    flags = json.loads((tmp_path / "report" / "flags.json").read_text())
    ages = {h["host"]: h["last_validated"] for h in flags["history"]}
    assert ages["n1"]["run"] == run_id and ages["n1"]["verdict"] == "pass", ages
    assert "n2" not in ages

    # real work ends; the second sweep, within --max-age, takes n2 alone
    cluster.run("scancel", job)
    cluster.wait_idle(cluster.nodes)
    go(cluster, "n2")
    out = finish(sweep(cluster, tmp_path, "--max-age", "1h", "--json",
                       str(tmp_path / "second.json")))
    hosts = json.loads((tmp_path / "second.json").read_text())["hosts"]
    assert hosts["n2"]["validation"].startswith("passed"), out
    for node in ("n1", "n3"):
        assert re.match(r"skipped: validated [0-9]+s ago \(pass, run [0-9a-fTZ.-]+\), within "
                        r"--max-age 1h$", hosts[node]["validation"]), out
    second = sorted(p.name for p in (logs / "hpc1").iterdir())[-1]
    assert list(record_of(logs, second)["nodes"]) == ["n2"], out
    assert not (logs / "n1" / second).exists()


def test_a_batch_whose_job_state_cannot_be_read_drains_nobody_on_a_guess(cluster, tmp_path):
    """Real work preempts the sweep's job on n2 as above, but squeue cannot be read after the
    batch (a stand-in `squeue` that exits 1 comes first on gpuprov's PATH: making the real
    one fail while slurmctld still grants allocations cannot be arranged). n1 keeps its
    verdict; n2, cut short, is "not validated (job state unknown ...)": not failed, not
    drained, although --drain-failed is given."""
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "squeue").write_text("#!/bin/sh\necho 'squeue: error: cannot reach slurmctld' >&2\nexit 1\n")
    (broken / "squeue").chmod(0o755)
    go(cluster, "n3")
    proc = sweep(cluster, tmp_path, "--drain-failed", "--json", str(tmp_path / "r.json"),
                 path=str(broken))
    job = ""
    try:
        assert wait_until(lambda: started(cluster, "n1") and started(cluster, "n2"), 90), \
            cluster.log_tail()
        go(cluster, "n1")
        assert wait_until(lambda: results_stored(tmp_path / "logs", "n1"), 90)
        job = real_job(cluster, "n2")
        out = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        if job:
            cluster.run("scancel", job, check=False)
    assert proc.returncode == 0, out
    hosts = json.loads((tmp_path / "r.json").read_text())["hosts"]
    assert hosts["n1"]["validation"].startswith("passed"), out
    assert hosts["n2"]["validation"] == \
        "not validated (job state unknown: squeue could not be read after its batch)", out
    assert "drained" not in hosts["n2"]["validation"]
    assert cluster.node_info()["n2"].get("reason") in (None, ""), cluster.node_info()["n2"]
    cluster.wait_idle(cluster.nodes)


def test_a_node_real_work_took_before_its_batch_gives_way_and_is_not_failed(cluster, tmp_path):
    """Batches of one: while n1's batch runs, a real job takes n2, idle when the sweep began.
    Its batch finds it busy: "not validated (busy: ...)", not failed, no job of the sweep's
    on it; n3's batch runs."""
    logs = tmp_path / "logs"
    go(cluster, "n3")
    proc = sweep(cluster, tmp_path, "--drain-failed", "--json", str(tmp_path / "r.json"),
                 sweep_batch=1)
    job = ""
    try:
        assert wait_until(lambda: started(cluster, "n1"), 90), cluster.log_tail()
        job = real_job(cluster, "n2")
        go(cluster, "n1")
        out = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        if job:
            cluster.run("scancel", job, check=False)
    assert proc.returncode == 0, out
    hosts = json.loads((tmp_path / "r.json").read_text())["hosts"]
    assert hosts["n2"]["validation"] == \
        "not validated (busy: real work took it before its batch started)", out
    assert hosts["n1"]["validation"].startswith("passed") and \
        hosts["n3"]["validation"].startswith("passed"), out
    assert not started(cluster, "n2")  # the sweep ran nothing on it
    run_id = next((logs / "hpc1").iterdir()).name
    batches = record_of(logs, run_id)["sweep"]["batches"]
    assert [b["started"] for b in batches] == [["n1"], [], ["n3"]], batches
    cluster.wait_idle(cluster.nodes)


@pytest.mark.parametrize("slurm_extra, options, message", [
    ({"sweep_partition": None}, (), "validate --sweep needs slurm.sweep_partition"),
    ({"sweep_partition": "nope"}, (), "slurm.sweep_partition 'nope' is not a partition of the "
                                      "cluster (it has: debug, gpu, real, sweep)"),
    ({"sweep_partition": "real"}, (), "slurm.sweep_partition 'real' has the highest PriorityTier (10)"),
    ({}, ("--max-age", "7 days"), "--max-age must be a number and a unit"),
    ({}, ("--resume-passed",), "--sweep takes idle nodes only"),
])
def test_a_sweep_that_cannot_be_is_one_line_and_exit_2(slurm, tmp_path, slurm_extra, options,
                                                         message):
    spec = {k: v for k, v in slurm_extra.items() if v is not None}
    path = inventory(slurm, tmp_path, **spec)
    if slurm_extra.get("sweep_partition", "") is None:  # the key left out
        data = yaml.safe_load(path.read_text())
        del data["hosts"]["hpc1"]["slurm"]["sweep_partition"]
        path.write_text(yaml.safe_dump(data))
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "validate", "--host", "hpc1",
         "--inventory", str(path), "--sweep", *options],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
        text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "logs").exists() or not [
        p for p in (tmp_path / "logs").iterdir() if p.name != "hpc1"]
