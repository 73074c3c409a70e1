"""`gpuprov fabric --drain-failed` on a real Slurm cluster (tests/slurm_cluster.py: munged,
slurmctld, three slurmd), with the nodes n1..n3 reached over SSH (the farm's sshd servers on
127.0.0.2-4, real iperf3 between them on loopback) and the login node hpc1 local. n2's iperf3
is a stand-in that fails (a node whose tool is broken): n2 fails with every partner and is
drained with the reason; an admin's drain on another node is left alone."""
from __future__ import annotations

import shutil

import pytest
import yaml

from remote.ground.exitcodes import EXIT_VALIDATION_FAILED
from tests.slurm_cluster import SlurmCluster, missing_reason
from tests.sshd import server_with_tools

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def slurm():
    why = missing_reason()
    if why:
        pytest.skip(why)
    if not shutil.which("iperf3"):
        pytest.fail("iperf3 is not installed (.ci/setup --dev installs it)")
    cluster = SlurmCluster(3)
    yield cluster
    cluster.stop()


BROKEN_IPERF3 = "#!/bin/sh\necho 'iperf3: error - the NIC is gone' >&2\nexit 1\n"


def test_drain_failed_drains_the_suspect_with_the_reason(slurm, farm, work, capsys):
    from remote.commands import fabric as fabric_cmd

    with server_with_tools(farm, "127.0.0.40", {"iperf3": BROKEN_IPERF3}, "fabric-n2-"):
        inventory = work / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({
            "known_hosts": [str(farm.known_hosts)],
            "vars": {"fabric_seconds": 1},
            "hosts": {"hpc1": {"connection": "local",
                               "slurm": {"partition": "debug", "conf": str(slurm.conf)}},
                      "n1": farm.host_entry(farm.addresses[0]),
                      "n2": farm.host_entry("127.0.0.40"),
                      "n3": farm.host_entry(farm.addresses[1])}}, sort_keys=False))
        try:
            rc = fabric_cmd.run(host="all", inventory=str(inventory), logs_dir=str(work / "logs"),
                            drain_failed=True, json_path=str(work / "out.json"))
            out = capsys.readouterr().out
            info = slurm.node_info()
        finally:
            slurm.resume_all()
    assert rc == EXIT_VALIDATION_FAILED, out
    assert "SUSPECT NODE n2" in out
    run_id = next((work / "logs" / "n2").iterdir()).name
    assert info["n2"]["state_flags"] == ["DRAIN"], info["n2"]
    assert info["n2"]["reason"].startswith(f"gpuprov {run_id}: fabric: no pair completed"), \
        info["n2"]["reason"]
    assert "n2: drained, through hpc1" in out
    assert not info["n1"].get("state_flags") and not info["n3"].get("state_flags")


def test_an_admins_drain_is_left_alone(slurm, farm, work, capsys):
    from remote.commands import fabric as fabric_cmd

    slurm.drain("n1", "admin: cable swap")
    try:
        inventory = work / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({
            "known_hosts": [str(farm.known_hosts)],
            "vars": {"fabric_seconds": 1, "fabric_floor": {"iperf3": 100000}},
            "hosts": {"hpc1": {"connection": "local",
                               "slurm": {"partition": "debug", "conf": str(slurm.conf)}},
                      "n1": farm.host_entry(farm.addresses[0]),
                      "n3": farm.host_entry(farm.addresses[1])}}, sort_keys=False))
        rc = fabric_cmd.run(host="all", inventory=str(inventory), logs_dir=str(work / "logs"),
                        drain_failed=True)
        out = capsys.readouterr().out
        info = slurm.node_info()
    finally:
        slurm.resume_all()
    # 2 nodes under a floor no link reaches: both suspects, node and link not told apart
    assert rc == EXIT_VALIDATION_FAILED, out
    assert "only one partner" in out
    assert info["n1"]["reason"] == "admin: cable swap"
    assert "n1: not drained: left alone, drained by someone else meanwhile: admin: cable swap" in out
    assert info["n3"]["state_flags"] == ["DRAIN"]


def test_the_nodes_of_a_cluster_are_paired_through_slurm(slurm, work, capsys):
    """`gpuprov fabric --host hpc1`: the partition's usable nodes, each command a job on its
    node (`srun -w`), the servers and clients real iperf3 (the test cluster's nodes all share
    127.0.0.1); a node an admin drained is not paired."""
    from remote.commands import fabric as fabric_cmd

    slurm.drain("n2", "admin: cable swap")
    try:
        inventory = work / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({
            "vars": {"fabric_seconds": 1},
            "hosts": {"hpc1": {"connection": "local",
                               "slurm": {"partition": "debug", "conf": str(slurm.conf)}}}},
            sort_keys=False))
        rc = fabric_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(work / "logs"),
                        json_path=str(work / "out.json"))
        out = capsys.readouterr().out
    finally:
        slurm.resume_all()
    assert rc == 0, out
    import json

    doc = json.loads((work / "out.json").read_text())["fabric"]
    assert [(p["client"], p["server"], p["tool"]) for p in doc["pairs"]] == [
        ("n1", "n3", "iperf3")], out
    assert doc["pairs"][0]["value"] > 0 and doc["suspect_nodes"] == []
    assert doc["pairs"][0]["detail"]["authenticated"] is True  # the credentials on srun's stdin
    run_id = next((work / "logs" / "n1").iterdir()).name
    assert (work / "logs" / "n3" / run_id / "fabric.json").exists()
    assert not (work / "logs" / "n2").exists()


def cluster_inventory(work, slurm, **slurm_keys):
    """An inventory of the login node hpc1 alone (`slurm:` plus `slurm_keys`), 1 s tests."""
    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({
        "vars": {"fabric_seconds": 1},
        "hosts": {"hpc1": {"connection": "local",
                           "slurm": {"partition": "debug", "conf": str(slurm.conf),
                                     **slurm_keys}}}}, sort_keys=False))
    return inventory


def test_the_nodes_hostlist_of_slurm_chooses_the_nodes_paired(slurm, work, capsys):
    """`slurm.nodes: n[1-2]` (expanded by Slurm, as `validate` does): only n1 and n2 are paired,
    n3 of the same partition runs nothing."""
    import json

    from remote.commands import fabric as fabric_cmd

    inventory = cluster_inventory(work, slurm, nodes="n[1-2]")
    rc = fabric_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(work / "logs"),
                    json_path=str(work / "out.json"))
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = json.loads((work / "out.json").read_text())["fabric"]
    assert [(p["client"], p["server"]) for p in doc["pairs"]] == [("n1", "n2")], out
    assert doc["pairs"][0]["value"] > 0
    assert sorted(p.name for p in (work / "logs").iterdir() if p.name != "hpc1") == ["n1", "n2"]


def _line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("partition, hostlist, message", [
    ("debug", "n[2-9]", "slurm.nodes names nodes the cluster does not have: n4, n5, n6, n7, n8, n9"),
    ("small", "n[1-3]", "slurm.nodes names nodes outside partition 'small': n3"),
    ("debug", "n[3-1]", "slurm.nodes 'n[3-1]' is not a hostlist Slurm reads (Invalid hostlist: n[3-1])"),
])
def test_a_hostlist_naming_nodes_it_cannot_have_is_one_line_and_exit_2(slurm, work, capsys,
                                                                      partition, hostlist, message):
    """As `validate`'s survey: a name Slurm does not know, a node outside the partition, or a
    hostlist Slurm cannot read is the inventory's line, exit 2, and no node runs anything
    (without the check, the partition's usable nodes were paired). `small`, a partition of
    n1 and n2, is made for this test with scontrol."""
    from remote.commands import fabric as fabric_cmd

    slurm.run("scontrol", "create", "PartitionName=small", "Nodes=n[1-2]")
    try:
        inventory = cluster_inventory(work, slurm, nodes=hostlist)
        inventory.write_text(inventory.read_text().replace("partition: debug",
                                                           f"partition: {partition}"))
        rc = fabric_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(work / "logs"))
        err = capsys.readouterr().err
    finally:
        slurm.run("scontrol", "delete", "PartitionName=small")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert f"inventory.yaml:{_line_of(inventory, 'nodes:')}: host 'hpc1': {message}" in lines[0], err
    logs = work / "logs"
    assert not logs.exists() or [p.name for p in logs.iterdir()] in ([], ["hpc1"]), err


@pytest.mark.slow  # scontrol tries its controller for ~9 s before it gives up
def test_a_controller_that_does_not_answer_is_said_not_blamed_on_the_hostlist(work, capsys):
    """The login node's slurm.conf names a controller that does not answer (port 9, nothing
    there): `scontrol show hostnames` still expands `nodes:` (it reads only the file), but
    `scontrol show nodes` fails. The run says so, with scontrol's reason, exit 2; before, the
    empty listing was read as a cluster without n1 and n2, and the inventory's `nodes:` line
    was blamed for naming nodes the cluster does not have."""
    from remote.commands import fabric as fabric_cmd

    conf = work / "slurm.conf"
    conf.write_text("ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=9\n"
                    "NodeName=n[1-3] CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=n[1-3]\n")
    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {"connection": "local", "slurm": {
        "partition": "debug", "conf": str(conf), "nodes": "n[1-2]"}}}}))
    rc = fabric_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(work / "logs"))
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "hpc1: Slurm did not list its nodes (exit 1: slurm_load_node error: Unable to contact " \
           "slurm controller" in err, err
    assert "does not have" not in err, err


def fabric_iperf3() -> list[int]:
    """PIDs of iperf3 processes the test cluster's jobs run (bound to 127.0.0.1 by fabric)."""
    import subprocess

    out = subprocess.run(["pgrep", "-f", "^iperf3 .*-B 127.0.0.1"], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def test_ctrl_c_on_a_cluster_ends_every_job_and_server(slurm, work):
    """SIGTERM (as Ctrl-C) while round 1's 30 s tests run as Slurm jobs: exit 130, and no
    iperf3 and no job of the run is left."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO
    from tests.procs import wait_until

    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({
        "vars": {"fabric_seconds": 30},
        "hosts": {"hpc1": {"connection": "local",
                           "slurm": {"partition": "debug", "conf": str(slurm.conf)}}}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "fabric", "--host", "hpc1",
         "--inventory", str(inventory)], cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_until(lambda: len(fabric_iperf3()) >= 6, 60), "the tests never started"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert wait_until(lambda: not fabric_iperf3(), 20), out
    jobs = subprocess.run(["squeue", "-h", "-o", "%j"], env=slurm.env, capture_output=True,
                          text=True).stdout
    assert wait_until(lambda: "gpuprov-fabric" not in subprocess.run(
        ["squeue", "-h", "-o", "%j"], env=slurm.env, capture_output=True, text=True).stdout,
        30), jobs


def fabric_jobs(slurm: SlurmCluster, run_id: str) -> tuple[list[str], list[str]]:
    """The run's jobs as the controller reports them: (job ids of `squeue --json`, whose
    finished jobs stay MinJobAge=3600 s; JobId of each jobcomp/filetxt line, one per finished
    job), those named gpuprov-fabric-<run>."""
    import json
    import re

    from remote.fabric.measure import job_name

    name = job_name(run_id)
    jobs = json.loads(slurm.run("squeue", "--json").stdout)["jobs"]  # 22.05: no filter works
    listed = [str(j["job_id"]) for j in jobs if j.get("name") == name]
    done = (slurm.dir / "log" / "jobcomp.txt").read_text()
    ended = [m.group(1) for m in re.finditer(rf"JobId=([0-9]+) .*? Name={re.escape(name)} ",
                                             done)]
    return listed, ended


def test_fabric_on_slurm_is_one_job(slurm, work, capsys):
    """Every command of a run (probes, servers, clients, stops) is a step of one allocation:
    the controller lists one job of the run, and its job completion log one finished job
    (this cluster has no accounting, so `sacct` cannot say it: "Slurm accounting storage is
    disabled"; squeue and the jobcomp/filetxt log are the controller's own record). Before,
    each command was a job of its own: 9 for 3 nodes."""
    from remote.commands import fabric as fabric_cmd

    inventory = cluster_inventory(work, slurm)
    rc = fabric_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(work / "logs"))
    out = capsys.readouterr().out
    assert rc == 0, out
    run_id = next((work / "logs" / "n1").iterdir()).name
    listed, ended = fabric_jobs(slurm, run_id)
    assert len(listed) == 1 and ended == listed, (listed, ended, out)
    assert "gpuprov-fabric" not in slurm.run("squeue", "-h", "-t", "R,PD", "-o", "%j").stdout.decode()
