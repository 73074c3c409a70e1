"""`gpuprov validate` on a Slurm cluster, against a real one: munged, slurmctld and three
`slurmd -N nX` started by tests/slurm_cluster.py (fake GPUs, 127.0.0.1 only), the login node
reached with `connection: local`. This machine has no GPU, so the real suite honestly fails;
`passing()` asks only for a check that passes here, to see nodes pass, and be resumed.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from remote.ground.exitcodes import EXIT_VALIDATION_FAILED
from tests.conftest import REPO
from tests.procs import wait_until
from tests.slurm_cluster import SlurmCluster, alive, missing_reason

pytestmark = pytest.mark.root  # runs slurmd as root: the slow layer



def passing(cluster: SlurmCluster) -> str:
    """validate's options for a run that passes without a GPU: only the Xid scan, of an
    empty kernel log (`--kernel-log FILE`)."""
    log = cluster.dir / "kernel.log"
    log.touch()
    return f"--checks xid --kernel-log {log}"


@pytest.fixture(scope="module")
def slurm():
    why = missing_reason()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(3)
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(slurm):
    """The module's cluster, every node idle again after the test (drains, a killed slurmd)."""
    yield slurm
    slurm.resume_all()


@pytest.fixture
def run(cluster, tmp_path, capsys):
    """`gpuprov validate --host hpc1` in this process: (rc, stdout, stderr, --json, logs)."""
    from remote.commands import validate as validate_cmd

    def go(slurm_extra=None, vars_=None, **options):
        spec = {"partition": "debug", "conf": str(cluster.conf), "gpus_per_node": 2}
        spec.update(slurm_extra or {})
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {
            "connection": "local", "slurm": spec, "vars": vars_ or {}}}}, sort_keys=False))
        json_path = tmp_path / "result.json"
        logs = tmp_path / "logs"
        rc = validate_cmd.run(host="hpc1", inventory=str(inventory), json_path=str(json_path),
                          logs_dir=str(logs), **options)
        out = capsys.readouterr()
        data = json.loads(json_path.read_text()) if json_path.exists() else None
        return rc, out.out, out.err, data, logs
    return go


def start_validate(cluster: SlurmCluster, tmp_path: Path, vars_: dict,
                   *options: str) -> subprocess.Popen:
    """`invoke validate --host hpc1` as its own process (to be signalled, or watched line by
    line), output and errors together on its stdout."""
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local", "slurm": {"partition": "debug", "conf": str(cluster.conf)},
        "vars": vars_}}}))
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "validate", "--host",
         "hpc1", "--inventory", str(inventory), *options],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def run_id_of(logs: Path) -> str:
    return next((logs / "hpc1").iterdir()).name


def test_validate_runs_one_task_per_node_and_brings_each_nodes_results_home(cluster, run):
    rc, out, err, data, logs = run(vars_={"validate_args": "--checks system"})
    # no GPU here: every node fails, honestly, and the run says so with exit status 3
    assert rc == EXIT_VALIDATION_FAILED, out + err
    for node in cluster.nodes:
        assert data["hosts"][node]["validation"] == "failed: system"
        # its progress, labelled with the node
        assert re.search(rf"^{node} +\| \[system\] FAIL", out, re.M), out
    run_id = run_id_of(logs)
    for node in cluster.nodes:
        results = json.loads((logs / node / run_id / "results.json").read_text())
        statuses = {c["name"]: c["status"] for c in results["checks"]}
        assert statuses["system"] == "fail"
    record = json.loads((logs / "hpc1" / run_id / "slurm.json").read_text())
    assert record["partition"] == "debug" and record["job_id"].isdigit()
    assert sorted(record["nodes"]) == cluster.nodes
    assert "--gpus-per-node=2" in record["salloc"] and "--exclusive" in record["salloc"]
    assert "--no-kill" in record["salloc"] and "--nodes=3" in record["srun"]
    for node in cluster.nodes:  # one step for all: srun's own line names each failed task
        assert record["nodes"][node]["exit_status"] not in (None, 0)
        assert record["nodes"][node]["srun_said"].startswith(f"srun: error: {node}: task ")
    assert record["srun_exit_status"] not in (None, 0)
    # the SSH route's report reads the nodes' folders as they are
    from remote.commands import report as report_cmd
    assert report_cmd.run(logs=str(logs), out=str(logs.parent / "report")) == 0


def test_nodes_that_pass_exit_0_and_are_not_drained(cluster, run):
    rc, out, err, data, logs = run(vars_={"validate_args": passing(cluster)}, drain_failed=True)
    assert rc == 0, out + err
    assert all(data["hosts"][n]["validation"].startswith("passed") for n in cluster.nodes)
    info = cluster.node_info()
    assert all(not info[n].get("state_flags") for n in cluster.nodes)
    assert cluster.reservations() == []


def test_provision_of_a_cluster_validates_its_nodes_through_slurm(cluster, tmp_path, capsys):
    """`gpuprov provision --host hpc1`: the recipe runs on the login node, then the partition's
    nodes are validated as `validate --host hpc1` does (before, the login node itself was
    validated over SSH, and a login node has no GPU)."""
    from remote.commands import provision as provision_cmd

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local", "slurm": {"partition": "debug", "conf": str(cluster.conf)},
        "vars": {"validate_args": passing(cluster)}}}}, sort_keys=False))
    recipe = tmp_path / "login.yaml"
    recipe.write_text(f"name: login node\nsteps:\n  - name: mark\n"
                      f"    file: {{path: {tmp_path}/provisioned, content: \"x\\n\"}}\n")
    json_path, logs = tmp_path / "result.json", tmp_path / "logs"
    rc = provision_cmd.run(host="hpc1", recipe=str(recipe), inventory=str(inventory),
                       json_path=str(json_path), logs_dir=str(logs))
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert (tmp_path / "provisioned").read_text() == "x\n"
    hosts = json.loads(json_path.read_text())["hosts"]
    assert hosts["hpc1"]["changed"] == 1
    assert all(hosts[n]["validation"].startswith("passed") for n in cluster.nodes), hosts
    run_id = run_id_of(logs)
    assert sorted(json.loads((logs / "hpc1" / run_id / "slurm.json").read_text())["nodes"]) \
        == cluster.nodes


def test_drain_failed_drains_with_the_reason_and_leaves_an_admins_drain_alone(cluster, run):
    cluster.drain("n2", "admin: fan 3 replaced")
    rc, out, err, data, logs = run(vars_={"validate_args": "--checks system"},
                                   drain_failed=True)
    assert rc == EXIT_VALIDATION_FAILED
    run_id = run_id_of(logs)
    info = cluster.node_info()
    for node in ("n1", "n3"):
        assert info[node]["state_flags"] == ["DRAIN"], (node, info[node], out, err)
        assert info[node]["reason"].startswith(
            f"gpuprov {run_id}: system: nvidia-smi not found"), info[node]["reason"]
    assert info["n2"]["reason"] == "admin: fan 3 replaced"  # never touched
    assert "n2   warning     skipped: DRAIN+IDLE, drained by someone else " \
           "(admin: fan 3 replaced): left alone" in out
    assert data["hosts"]["n2"]["validation"].startswith("skipped")
    assert not (logs / "n2").exists()
    assert cluster.reservations() == []


def test_a_failed_node_slurm_set_down_meanwhile_is_drained_and_stays_drained(cluster):
    """n1 failed its validation, and its slurmd stopped answering before the drain: slurmctld
    set it DOWN, "Not responding". That is no one's note (ReturnToService=2 here, 1 or 2 on
    most clusters, returns the node by itself once slurmd answers), so the drain goes over
    it, and the node stays drained after its slurmd is back. Before, the node was "left
    alone" and took jobs again."""
    from remote.scheduler.slurm import gate

    pid = cluster.slurmd_pid("n1")
    os.kill(pid, signal.SIGSTOP)
    try:
        assert wait_until(lambda: cluster.node_info()["n1"]["reason"] == "Not responding",
                          90), cluster.node_info()["n1"]
        reason = "gpuprov 20261127T000000.000Z-0000: system: nvidia-smi not found"
        done = subprocess.run(["sh", "-c", gate.drain_command("n1", reason)], env=cluster.env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
    assert wait_until(lambda: "NOT_RESPONDING" not in cluster.node_info()["n1"]["state_flags"],
                      90), cluster.node_info()["n1"]
    info = cluster.node_info()["n1"]
    assert "DRAIN" in info["state_flags"] and info["reason"] == reason, info


def test_a_node_that_missed_a_ping_is_waited_for_and_validated(tmp_path):
    """A node that is IDLE+NOT_RESPONDING (it missed slurmctld's last ping: a busy machine,
    or the moment after `scontrol update state=resume`) is asked about again for as long as
    the cluster's SlurmdTimeout (60 s here), instead of being reported down at once. Here n1's
    slurmd is killed until Slurm flags it, the run starts, and slurmd comes back 20 s after
    the run says it waits: past the fixed 15 s the run waited before, within SlurmdTimeout, so
    n1 is validated. n1 stays NOT_RESPONDING, not DOWN, for the test's length."""
    why = missing_reason()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(2, name="gpuprovlate", slurmd_timeout=60)
    proc = None
    try:
        os.kill(cluster.slurmd_pid("n1"), signal.SIGKILL)

        def late() -> bool:
            info = cluster.node_info()["n1"]
            return info["state"] == "idle" and info["state_flags"] == ["NOT_RESPONDING"]
        assert wait_until(late, 60), cluster.node_info()["n1"]
        proc = start_validate(cluster, tmp_path, {"validate_args": passing(cluster)},
                              "--json", str(tmp_path / "r.json"))
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "to answer Slurm (NOT_RESPONDING)" in line:
                break
        assert "hpc1 " in seen[-1] and \
            "waiting up to 60 s (SlurmdTimeout) for n1 to answer Slurm" in seen[-1], "".join(seen)
        time.sleep(20)
        cluster.start_node("n1")
        out, _ = proc.communicate(timeout=180)
        out = "".join(seen) + out
        assert proc.returncode == 0, out
        data = json.loads((tmp_path / "r.json").read_text())
        assert all(data["hosts"][n]["validation"].startswith("passed") for n in cluster.nodes), out
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        cluster.stop()


def test_resume_passed_takes_back_gpuprov_drained_nodes_that_now_pass(cluster, run):
    cluster.drain("n1", "gpuprov 20261101T000000.000Z-0000: stress: GPU 0 too hot")
    cluster.drain("n3", "admin: do not touch")
    rc, out, err, data, logs = run(vars_={"validate_args": passing(cluster)}, resume_passed=True)
    assert rc == 0, out + err
    info = cluster.node_info()
    assert info["n1"]["state"] == "idle" and not info["n1"].get("state_flags")
    assert data["hosts"]["n1"]["validation"].endswith("(resumed)")
    assert info["n3"]["reason"] == "admin: do not touch"
    record = json.loads((logs / "hpc1" / run_id_of(logs) / "slurm.json").read_text())
    assert record["nodes"]["n1"]["taken_back"] is True
    assert record["reservation"].startswith("gpuprov-")
    assert cluster.reservations() == []  # the reservation went with the run


def test_resume_passed_drains_again_a_node_that_still_fails(cluster, run):
    cluster.drain("n2", "gpuprov 20261101T000000.000Z-0000: system: no driver")
    rc, out, err, data, logs = run(vars_={"validate_args": "--checks system"},
                                   resume_passed=True)
    assert rc == EXIT_VALIDATION_FAILED
    info = cluster.node_info()
    assert info["n2"]["state_flags"] == ["DRAIN"]
    assert info["n2"]["reason"].startswith(f"gpuprov {run_id_of(logs)}: system: ")
    # without --drain-failed the nodes that were open stay open
    assert not info["n1"].get("state_flags") and not info["n3"].get("state_flags")


def test_a_job_slurm_refuses_drains_nothing_and_restores_what_it_took_back(cluster, run):
    """Slurm refused the job (a feature no node has): no node was judged, so none is drained
    for it, and the node taken back is drained again with the reason it had."""
    old = "gpuprov 20261101T000000.000Z-0000: system: no driver"
    cluster.drain("n1", old)
    rc, out, err, data, logs = run(slurm_extra={"extra_args": ["--constraint=nosuchfeature"]},
                                   vars_={"validate_args": passing(cluster)},
                                   drain_failed=True, resume_passed=True)
    assert rc == EXIT_VALIDATION_FAILED
    assert data["hosts"]["hpc1"]["validation"].startswith(
        "not validated: Slurm started no task (salloc exit 1")
    info = cluster.node_info()
    assert "DRAIN" in info["n1"]["state_flags"] and info["n1"]["reason"] == old
    assert not info["n2"].get("state_flags") and not info["n3"].get("state_flags")
    assert cluster.reservations() == []


def test_a_login_node_reached_over_ssh_works_the_same(cluster, farm, work, capsys):
    """The login node over SSH as a plain user (no root, no shared folder with gpuprov): the
    package crosses SSH on stdin, then srun's stdin to every node."""
    from remote.commands import validate as validate_cmd

    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({
        "known_hosts": [str(farm.known_hosts)],
        "hosts": {"login": dict(farm.host_entry(farm.addresses[0]), slurm={
            "partition": "gpu", "nodes": "n[1-2]", "conf": str(cluster.conf)},
            vars={"validate_args": passing(cluster)})}}))
    rc = validate_cmd.run(host="login", inventory=str(inventory), json_path=str(work / "r.json"),
                      logs_dir=str(work / "logs"))
    out = capsys.readouterr().out
    assert rc == 0, out
    data = json.loads((work / "r.json").read_text())["hosts"]
    assert sorted(data) == ["login", "n1", "n2"]  # nodes: n[1-2] of the partition
    run_id = next((work / "logs" / "login").iterdir()).name
    record = json.loads((work / "logs" / "login" / run_id / "slurm.json").read_text())
    assert record["user"] == farm.user
    assert all((work / "logs" / n / run_id / "results.json").exists() for n in ("n1", "n2"))


def node_tasks(cluster: SlurmCluster, node: str) -> list[int]:
    """PIDs of this cluster's job tasks on `node` (by SLURMD_NODENAME in their environment)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (f"SLURM_CONF={cluster.conf}".encode() in environ
                and f"SLURMD_NODENAME={node}".encode() in environ):
            found.append(int(entry))
    return found


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_node_that_dies_mid_job_is_not_validated(cluster, tmp_path):
    proc = start_validate(cluster, tmp_path, {"validate_args": passing(cluster)},
                          "--json", str(tmp_path / "r.json"))
    try:
        # n2's task has started: kill its slurmd, its slurmstepd and the task, as a power cut
        assert wait_until(lambda: node_tasks(cluster, "n2"), 60), "n2's task never started"
        tasks = node_tasks(cluster, "n2")
        steps = {parent(t) for t in tasks} - set(tasks)
        for pid in [cluster.slurmd_pid("n2"), *steps, *tasks]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not alive(cluster.slurmd_pid("n2"))
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["hosts"]["n2"]["validation"].startswith("not validated: the node failed"), out
    assert proc.returncode == EXIT_VALIDATION_FAILED
    # one step per node: n2's death costs the others nothing
    for node in ("n1", "n3"):
        assert data["hosts"][node]["validation"].startswith("passed"), out


def test_an_interrupted_run_leaves_a_taken_back_node_drained_as_it_was(cluster, tmp_path):
    """SIGTERM (as Ctrl-C) while the nodes validate: exit 130, nothing judged, the node taken
    back drained again with its old reason, the reservation gone."""
    old = "gpuprov 20261101T000000.000Z-0000: system: no driver"
    cluster.drain("n1", old)
    slow = tmp_path / "slowpy"
    slow.write_text("#!/bin/sh\nsleep 60\nexec python3 \"$@\"\n")
    slow.chmod(0o755)
    proc = start_validate(cluster, tmp_path, {"validate_python": str(slow),
                                              "validate_args": passing(cluster)},
                          "--resume-passed", "--drain-failed")
    try:
        assert wait_until(lambda: node_tasks(cluster, "n1"), 60), "n1's task never started"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    info = cluster.node_info()
    assert "DRAIN" in info["n1"]["state_flags"] and info["n1"]["reason"] == old, out
    # not judged: not drained (COMPLETING while the cancelled job ends is fine)
    assert all("DRAIN" not in (info[n].get("state_flags") or []) for n in ("n2", "n3")), out
    assert cluster.reservations() == []
    assert wait_until(lambda: not node_tasks(cluster, "n1"), 30)  # the job went with it


@pytest.mark.parametrize("spec, message", [
    ({"partition": "nope"}, "slurm.partition 'nope' is not a partition of the cluster "
                            "(it has: debug, gpu)"),
    ({"nodes": "n[2-9]"}, "slurm.nodes names nodes the cluster does not have: n4, n5"),
    ({"nodes": "n[3-1]"}, "slurm.nodes 'n[3-1]' is not a hostlist Slurm reads "
                          "(Invalid hostlist: n[3-1])"),
])
def test_an_unknown_partition_or_node_is_one_line_and_exit_2(cluster, run, spec, message):
    rc, out, err, data, logs = run(slurm_extra=spec)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err
    assert "inventory.yaml:" in lines[0]
    # nothing ran on the nodes: no node folders
    assert not [p for p in logs.iterdir() if p.name != "hpc1"] if logs.exists() else True


HEALTH_SCRIPT = """#!/bin/sh
# Slurm runs a HealthCheckProgram with SLURMD_NODENAME alone: no PATH (validate finds scontrol
# by itself), no SLURM_CONF (this cluster's slurm.conf is in no standard place: given here)
SLURM_CONF={dir}/etc/slurm.conf; export SLURM_CONF
cd %(repo)s && exec %(python)s -m validate --health --slurm-drain --kernel-log {dir}/kernel.log \\
  >> {dir}/log/health-$SLURMD_NODENAME.log 2>&1
"""


def test_the_health_check_drains_its_node_through_slurmd(tmp_path):
    """`validate --health --slurm-drain` as Slurm's HealthCheckProgram (issue 25, point 4):
    with no GPU here every node cannot be checked, and each drains itself."""
    why = missing_reason()
    if why:
        pytest.skip(why)
    script = HEALTH_SCRIPT % {"repo": REPO, "python": sys.executable}
    cluster = SlurmCluster(3, conf_extra="HealthCheckProgram={dir}/health.sh\n"
                                         "HealthCheckInterval=2\nHealthCheckNodeState=ANY",
                           scripts={"health.sh": script, "kernel.log": ""}, wait_idle=False)
    try:
        def all_drained() -> bool:
            info = cluster.node_info()
            return all(info[n].get("state_flags") == ["DRAIN"] for n in cluster.nodes)
        assert wait_until(all_drained, 60), cluster.log_tail()
        for record in cluster.node_info().values():
            assert record["reason"].startswith("gpuprov health: could not check"), record
    finally:
        cluster.stop()


def health_check(cluster: SlurmCluster, node: str, *args: str) -> subprocess.CompletedProcess:
    """`validate --health --slurm-drain` on `node` as slurmd starts a HealthCheckProgram: with
    SLURMD_NODENAME and no PATH (SLURM_CONF given: this cluster's slurm.conf is in no standard
    place). No GPU here: without `--expect-gpus 0` the node cannot be checked."""
    log = cluster.dir / "kernel.log"
    log.touch()
    return subprocess.run([sys.executable, "-m", "validate", "--health", "--slurm-drain",
                           "--kernel-log", str(log), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={"SLURMD_NODENAME": node, "SLURM_CONF": str(cluster.conf)})


def test_the_health_check_leaves_other_drains_alone_and_resumes_only_its_own(cluster):
    """Issue 30, point 3 (LBNL NHC's rule): an admin's drain and a full run's drain stay as
    they are whichever way the check goes; the check resumes a node it drained itself."""
    admin = "admin: maintenance"
    full_run = "gpuprov 20261101T000000.000Z-0000: stress: GPU 0 too slow"
    cluster.drain("n1", admin)
    cluster.drain("n2", full_run)
    for node in cluster.nodes:  # could not check: only the open node n3 is drained
        assert health_check(cluster, node).returncode == 3
    info = cluster.node_info()
    assert (info["n1"]["reason"], info["n2"]["reason"]) == (admin, full_run)
    assert "DRAIN" in info["n3"]["state_flags"]
    assert info["n3"]["reason"].startswith("gpuprov health: could not check: no NVIDIA driver")
    for node in cluster.nodes:  # healthy (a node without GPUs, as --expect-gpus 0 says)
        done = health_check(cluster, node, "--expect-gpus", "0")
        assert done.returncode == 0, done.stdout + done.stderr
    info = cluster.node_info()
    assert (info["n1"]["reason"], info["n2"]["reason"]) == (admin, full_run)
    assert "DRAIN" in info["n1"]["state_flags"] and "DRAIN" in info["n2"]["state_flags"]
    # (a slurmd slow to answer on a loaded machine may add NOT_RESPONDING: not ours to judge)
    assert "DRAIN" not in (info["n3"].get("state_flags") or []) and not info["n3"]["reason"]
    kept = health_check(cluster, "n1")  # says why it did nothing
    assert ("validate --health: n1 left alone: DRAIN+IDLE for a reason gpuprov health did not "
            "set (admin: maintenance)\n") == kept.stderr


def test_an_admins_drain_survives_the_health_check_and_resume_passed(cluster, run):
    """Issue 31, item 1, the whole chain: an admin drains n1, the health check runs on it, then
    `gpuprov validate --drain-failed --resume-passed`: n1 stays drained with the admin's reason.
    n2, which gpuprov drained and which now passes, is taken back."""
    admin = "fan 3 failing, do not resume"
    cluster.drain("n1", admin)
    cluster.drain("n2", "gpuprov 20261101T000000.000Z-0000: system: no driver")
    assert health_check(cluster, "n1").returncode == 3  # could not check: no GPU here
    assert cluster.node_info()["n1"]["reason"] == admin
    rc, out, err, data, logs = run(vars_={"validate_args": passing(cluster)},
                                   drain_failed=True, resume_passed=True)
    assert rc == 0, out + err
    info = cluster.node_info()
    assert "DRAIN" in info["n1"]["state_flags"] and info["n1"]["reason"] == admin
    assert data["hosts"]["n1"]["validation"].startswith("skipped")
    assert "DRAIN" not in (info["n2"].get("state_flags") or [])
    assert data["hosts"]["n2"]["validation"].endswith("(resumed)")
    assert cluster.reservations() == []


def test_a_drain_an_admin_sets_during_the_run_is_kept_and_not_resumed_later(cluster, run,
                                                                           tmp_path):
    """Issue 31, item 1, the remote side: an admin drains n1 while its validation runs (here
    from n1's own task, as root, before validate starts). n1 fails, and --drain-failed must
    not write gpuprov's reason over the admin's: the next --resume-passed would take it back."""
    admin = "fan 3 failing, do not resume"
    wrapper = tmp_path / "adminpy"
    wrapper.write_text("#!/bin/sh\nif [ \"$SLURMD_NODENAME\" = n1 ]; then\n"
                       f"  scontrol update nodename=n1 state=drain reason='{admin}'\nfi\n"
                       "exec python3 \"$@\"\n")
    wrapper.chmod(0o755)
    rc, out, err, data, logs = run(vars_={"validate_python": str(wrapper),
                                          "validate_args": "--checks system"}, drain_failed=True)
    assert rc == EXIT_VALIDATION_FAILED, out + err
    info = cluster.node_info()
    assert "DRAIN" in info["n1"]["state_flags"] and info["n1"]["reason"] == admin
    assert f"left alone, drained by someone else meanwhile: {admin}" in out
    for node in ("n2", "n3"):  # gpuprov's own drains go on as before
        assert info[node]["reason"].startswith(f"gpuprov {run_id_of(logs)}: system: ")
    rc, out, err, data, logs = run(vars_={"validate_args": passing(cluster)}, resume_passed=True)
    info = cluster.node_info()
    assert "DRAIN" in info["n1"]["state_flags"] and info["n1"]["reason"] == admin
    assert all("DRAIN" not in (info[n].get("state_flags") or []) for n in ("n2", "n3"))


# A compromised node: `validate_python` is a wrapper that, on n1 only, sends hostile output
# before and after running the real validation. It reads the run's marker from its task's
# command line (/proc/$PPID/cmdline: the task script), as a node's root could.
HOSTILE = """#!/bin/sh
d={dir}
if [ "$SLURMD_NODENAME" != n1 ]; then
  python3 "$@"; rc=$?; touch "$d/done-$SLURMD_NODENAME"; exit $rc
fi
token=$(tr '\\0' '\\n' < /proc/$PPID/cmdline | grep -o '@@gpuprov-[0-9a-f]*' | head -n 1)
{before}
python3 "$@"; rc=$?
{after}
exit $rc
"""


def hostile_run(cluster: SlurmCluster, tmp_path: Path, before: str = "", after: str = ""):
    wrapper = tmp_path / "hostile-python"
    wrapper.write_text(HOSTILE.format(dir=tmp_path, before=before, after=after))
    wrapper.chmod(0o755)
    return {"validate_python": str(wrapper), "validate_args": passing(cluster)}


def test_a_marker_line_with_a_superscript_digit_costs_no_other_node(cluster, run, tmp_path):
    """n1 sends its results marker with `²` for the exit status: str.isdigit() takes it,
    int() refuses it. Before, the run ended in `internal error ValueError` and no node got a
    verdict; now the line is no marker (ASCII digits only) and every node is judged."""
    rc, out, err, data, logs = run(vars_=hostile_run(
        cluster, tmp_path, before='echo "$token results \u00b2 1 2"; echo "$token srun \u00b2 0"'))
    assert "internal error" not in out + err
    assert rc == 0, out + err
    assert all(data["hosts"][n]["validation"].startswith("passed") for n in cluster.nodes), data


FLOOD = "yes 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' | head -c 786432"


def test_one_nodes_flood_costs_only_that_node(cluster, run, tmp_path):
    """n1 prints 1.5 MiB: half before its validation, half once n2 and n3 have sent their
    results. The job's output was one stream kept to its first and last 512 KiB, so n2's and
    n3's results fell out of it; now each node's lines are capped on their own (1 MiB shown,
    then one note) and every node's results come home."""
    rc, out, err, data, logs = run(vars_=hostile_run(
        cluster, tmp_path, before=FLOOD,
        after=f'i=0; while [ $i -lt 300 ] && ! [ -e "$d/done-n2" -a -e "$d/done-n3" ]; do '
              f'sleep 0.2; i=$((i + 1)); done; sleep 3; {FLOOD}'))
    assert rc == 0, (out + err)[-3000:]
    assert all(data["hosts"][n]["validation"].startswith("passed") for n in cluster.nodes), data
    assert "more than 1024 KiB of lines from n1; the rest is not shown" in out
    flood_lines = sum(1 for line in out.splitlines() if "xxxxxxxxxx" in line)
    assert flood_lines * 66 < 1.1 * (1 << 20)  # n1's lines (66 bytes each) cut at 1 MiB


# validate_python on every node: passes, except on the nodes the file CRASH lists, where it
# dies of SIGSEGV before writing anything (issue 41, attack 6, through Slurm)
CRASHING = """#!/bin/sh
if grep -qx "$SLURMD_NODENAME" {crash} 2>/dev/null; then kill -SEGV $$; fi
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out"
printf '%s' '{{"checks": [{{"name": "system", "status": "pass", "required": true}}], "ok": true}}' \\
  > "$out/results.json"
"""


def test_a_node_whose_validation_crashes_fails_in_its_history(cluster, run, tmp_path):
    """n2 passes once, then its validation crashes twice through Slurm: each is "not
    validated", and the route's record of each started validation (validation.json in the
    node's run folder, written before the job) makes both failures in n2's history: the report
    quarantines n2. A job Slurm refused started no node's task: no verdict, no failure."""
    from remote.report import run_report
    from tests.test_report_common import recording_terminal

    crash = tmp_path / "crash"
    python = tmp_path / "python"
    python.write_text(CRASHING.format(crash=crash))
    os.chmod(python, 0o755)
    vars_ = {"validate_python": str(python)}
    rc, out, err, data, logs = run(vars_=vars_)
    assert rc == 0 and data["hosts"]["n2"]["validation"].startswith("passed"), out + err
    crash.write_text("n2\n")
    for _ in range(2):
        rc, out, err, data, logs = run(vars_=vars_)
        assert rc == EXIT_VALIDATION_FAILED, out + err
        assert data["hosts"]["n2"]["validation"].startswith(
            "not validated: validate left no results"), data["hosts"]["n2"]
        assert data["hosts"]["n1"]["validation"].startswith("passed")
    rc, out, err, data, logs = run(slurm_extra={"extra_args": ["--constraint=nosuchfeature"]},
                                   vars_=vars_)
    assert rc == EXIT_VALIDATION_FAILED, out + err
    rc = run_report(logs, tmp_path / "report", terminal=recording_terminal())
    flags = json.loads((tmp_path / "report" / "flags.json").read_text())
    assert [q["host"] for q in flags["quarantine"]] == ["n2"], flags["flags"]
    history = {h["host"]: h for h in flags["history"]}
    assert (history["n2"]["runs"], history["n2"]["failures"]) == (3, 2)
    assert [m["verdict"] for m in history["n2"]["timeline"]] == ["pass", "fail", "fail", "none"]
    assert history["n2"]["timeline"][1]["no_verdict"] == "validate left no results (exit 139)"
    assert (history["n1"]["runs"], history["n1"]["failures"]) == (3, 0)
    for folder in (logs / "n2").iterdir():  # the route's record of each run, the refused one too
        assert (folder / "validation.json").is_file()
