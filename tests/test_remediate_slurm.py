"""Remediation through Slurm, against a real cluster: munged, slurmctld and four `slurmd -N nX`
(tests/slurm_cluster.py) with its RebootProgram: `scontrol reboot` restarts that node's slurmd
after a delay, in a time namespace whose uptime starts at 0, so slurmctld sees the node
rebooted. The login node is reached with `connection: local`; the Target
(remote/remediation/slurm.py) runs on its engine session, as `gpuprov remediate` runs it.

How a node is sick, honestly, without a GPU: each node's tasks get their own TMPDIR, the node's
`run/` folder (the cluster's TaskProlog), and the validation scans `$TMPDIR/kern.log` for Xid
lines (`--checks xid --kernel-log ../kern.log`, relative to the task's folder in TMPDIR). A
sick node's kernel log holds an Xid 79 ("GPU has fallen off the bus", action: reboot the
node; the line is tests/fixtures/validate/kernel_xid_lines.txt's). A reboot starts a fresh
kernel log: the RebootProgram empties the node's `run/` and copies in its `boot/` files, where a
node that stays sick has the Xid again (a fault that comes back at every boot).
"""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from tests.slurm_cluster import SlurmCluster, missing_reason

pytestmark = pytest.mark.root  # runs slurmd as root: the slow layer

XID_79 = "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus\n"
VALIDATE_ARGS = "--checks xid --kernel-log ../kern.log"
REBOOT_LIMIT_S = 60.0
ADMIN_REASON = "fan 3 bad, do not resume (ticket 4711)"


@pytest.fixture(scope="module")
def slurm():
    why = missing_reason()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(4, reboot_delay=2, resume_timeout=30)
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(slurm):
    """The module's cluster with every node healthy, and idle again after the test."""
    for node in slurm.nodes:
        kernel_log(slurm, node, "", "")
    yield slurm
    slurm.resume_all()


def kernel_log(cluster: SlurmCluster, node: str, now: str, after_boot: str) -> None:
    """The node's kernel log now, and the one each of its boots starts with."""
    (cluster.node_dir(node, "run") / "kern.log").write_text(now)
    (cluster.node_dir(node, "boot") / "kern.log").write_text(after_boot)


def inventory(cluster: SlurmCluster, tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local",
        "slurm": {"partition": "debug", "conf": str(cluster.conf), "gpus_per_node": 2},
        "vars": {"validate_args": VALIDATE_ARGS}}}}, sort_keys=False))
    return path


class Scenario:
    """A job for the login node: the Slurm Target on its session, handed to `steps`; what
    `steps` returns is kept in `answer`, the run's id in `run_id`."""

    outcome = "remediation"

    def __init__(self, steps: Callable[[Any], Any], logs: Path):
        self.steps, self.logs = steps, logs
        self.answer: Any = None
        self.run_id = ""
        self.error: BaseException | None = None

    def __call__(self, session) -> None:
        from remote.engine.jobs.validate import Validate
        from remote.engine.results import Outcome
        from remote.remediation.slurm import open_target

        session.build_context()
        self.run_id = session.options.run_id
        target = open_target(session, session.host.scheduler.settings, Validate("quick", self.logs))
        try:
            self.answer = self.steps(target)
        except BaseException as exc:  # kept for the test, which raises it
            self.error = exc
        finally:
            target.close()
        session.conclude(Outcome("remediation", "done", self.error is None))


def on_login_node(cluster: SlurmCluster, tmp_path: Path, steps: Callable[[Any], Any]) -> Scenario:
    """Run `steps(target)` on the login node hpc1 in a real run of the engine."""
    from remote.commands.assembly import Outputs
    from remote.commands.hostrun import HostRun, execute
    from remote.commands.inputs import run_inputs

    outputs = Outputs.of("validate", {}, 0, False, False)
    extra, forks, _, (inv, hosts, _) = run_inputs(str(inventory(cluster, tmp_path)), "hpc1", None,
                                                  None, None, None, "quick", outputs)
    logs = tmp_path / "logs"
    scenario = Scenario(steps, logs)
    execute(HostRun(inv, hosts, "remediate (test)", scenario, str(logs), extra, forks, outputs))
    if scenario.error is not None:
        raise scenario.error
    return scenario


def reasons(cluster: SlurmCluster) -> dict[str, tuple[str, str]]:
    """`sinfo -R`: node -> (state, reason), as an operator reads it."""
    out = cluster.run("sinfo", "-R", "-N", "-h", "-o", "%N|%T|%E").stdout.decode()
    return {n: (state, reason) for n, state, reason in
            (line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2)}


def state(cluster: SlurmCluster, node: str) -> tuple[str, list[str]]:
    info = cluster.node_info()[node]
    return info["state"], sorted(info.get("state_flags") or [])


def wait_for(predicate: Callable[[], bool], what: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------------- the RebootProgram
def test_reboot_program_reboots_the_one_node_and_slurm_sees_it_rebooted(cluster):
    """`scontrol reboot` of a drained node, with neither ASAP nor nextstate: its slurmd is
    restarted with a later boot time, the node comes back still drained with the reason, and
    the other nodes keep their slurmd, boot time and state."""
    before = cluster.node_info()
    pids = {n: cluster.slurmd_pid(n) for n in cluster.nodes}
    cluster.drain("n2", "gpuprov 20261129T100000.000Z-ab12: remediate: xid: Xid 79")
    asked = time.time()
    cluster.run("scontrol", "reboot", "reason=gpuprov 20261129T100000.000Z-ab12: remediate: "
                "reboot", "n2")
    assert "REBOOT_REQUESTED" in state(cluster, "n2")[1] or "REBOOT_ISSUED" in state(cluster, "n2")[1]
    wait_for(lambda: not {"REBOOT_REQUESTED", "REBOOT_ISSUED"} & set(state(cluster, "n2")[1])
             and state(cluster, "n2")[0] == "idle", "n2 back from its reboot")
    after = cluster.node_info()
    assert state(cluster, "n2") == ("idle", ["DRAIN"])  # the drain survived the reboot
    assert after["n2"]["boot_time"] >= int(asked) > before["n2"]["boot_time"]
    assert after["n2"]["reason"].startswith("gpuprov 20261129T100000.000Z-ab12: remediate: reboot")
    assert cluster.slurmd_pid("n2") != pids["n2"]
    log = (cluster.dir / "log" / "reboot-n2.log").read_text()
    assert f"stopping slurmd {pids['n2']}" in log and "starting slurmd" in log
    for node in ("n1", "n3", "n4"):
        assert cluster.slurmd_pid(node) == pids[node]
        assert after[node]["boot_time"] == before[node]["boot_time"]
        assert state(cluster, node) == ("idle", [])


# ---------------------------------------------------------------------- the Target
def test_a_rebooted_node_is_validated_again_and_resumed_when_healthy(cluster, tmp_path):
    """n1's kernel log has an Xid 79 (action: reboot the node); its boot starts a clean one.
    Drained, rebooted (still drained after), validated in a reservation, drained again with
    "passed" until put back, then resumed: idle, no reason, no reservation left."""
    kernel_log(cluster, "n1", XID_79, "")
    pid = cluster.slurmd_pid("n1")
    seen: dict[str, Any] = {}

    def steps(target):
        seen["taken"] = target.take_out({"n1": "xid: Xid 79 (GPU has fallen off the bus)"})
        seen["after take_out"] = reasons(cluster).get("n1")
        seen["out"] = target.out_now()
        seen["rebooted"] = target.reboot(["n1"], {"n1": "reboot the node"}, REBOOT_LIMIT_S)
        seen["after reboot"] = state(cluster, "n1")
        seen["again"] = target.revalidate(["n1"], target.run_id)
        seen["after revalidate"] = (state(cluster, "n1"), reasons(cluster).get("n1"),
                                    cluster.reservations())
        return target.put_back(["n1"])

    scenario = on_login_node(cluster, tmp_path, steps)
    run_id = scenario.run_id
    assert seen["taken"]["n1"].ok, seen["taken"]
    assert seen["after take_out"][1].startswith(f"gpuprov {run_id}: remediate: xid: Xid 79")
    assert seen["out"].out == {"n1"} and seen["out"].pool == 4
    assert seen["rebooted"]["n1"].ok, seen["rebooted"]
    assert seen["after reboot"] == ("idle", ["DRAIN"])
    assert cluster.slurmd_pid("n1") != pid  # it really rebooted
    again = seen["again"]["n1"]
    assert again.ok and again.run_id == run_id, again
    results = json.loads((tmp_path / "logs" / "n1" / run_id / "results.json").read_text())
    assert {c["name"]: c["status"] for c in results["checks"]}["xid"] == "pass"
    (node_state, flags), (_, reason), held = seen["after revalidate"]
    assert "DRAIN" in flags and "passed its validation again" in reason
    assert held == []  # the reservation went before put_back
    assert scenario.answer["n1"].ok, scenario.answer
    # right after a resume the node is idle* for a moment (slurm.md gotcha 10)
    wait_for(lambda: state(cluster, "n1") == ("idle", []), "n1 idle, no flags")
    assert "n1" not in reasons(cluster)


def test_a_node_still_sick_after_its_reboot_stays_drained_with_the_escalation(cluster, tmp_path):
    """n2's Xid comes back at every boot: its re-validation fails with the finding and the
    action; left out, it stays drained with the escalation as its reason (`sinfo -R`)."""
    kernel_log(cluster, "n2", XID_79, XID_79)

    def steps(target):
        target.take_out({"n2": "xid: Xid 79"})
        rebooted = target.reboot(["n2"], {"n2": "reboot the node"}, REBOOT_LIMIT_S)
        again = target.revalidate(["n2"], target.run_id)
        left = target.leave_out({"n2": "still sick after a reboot (xid: Xid 79): drain and "
                                       "replace (RMA)"})
        return rebooted, again, left

    scenario = on_login_node(cluster, tmp_path, steps)
    rebooted, again, left = scenario.answer
    assert rebooted["n2"].ok, rebooted
    assert not again["n2"].ok
    assert again["n2"].action == "reboot the node"
    assert again["n2"].finding.startswith("xid: GPU PCI:0000:44:00: Xid 79"), again["n2"]
    assert left["n2"].ok, left
    node_state, reason = reasons(cluster)["n2"]
    assert node_state == "drained"
    assert reason == (f"gpuprov {scenario.run_id}: remediate: still sick after a reboot "
                      "(xid: Xid 79): drain and replace (RMA)")
    assert cluster.reservations() == []


def test_an_admins_drain_is_never_touched(cluster, tmp_path):
    """n3 drained by an admin: named as someone else's, and every step that would change it
    refuses; its state and reason stay as the admin left them."""
    cluster.drain("n3", ADMIN_REASON)
    before = reasons(cluster)["n3"]

    def steps(target):
        return (target.taken_by_someone_else(["n1", "n3"]),
                target.take_out({"n3": "xid: Xid 79"}),
                target.leave_out({"n3": "RMA"}), target.put_back(["n3"]), target.out_now())

    taken, took, left, back, out = on_login_node(cluster, tmp_path, steps).answer
    assert list(taken) == ["n3"] and ADMIN_REASON in taken["n3"]
    for answer in (took, left, back):
        assert not answer["n3"].ok and ADMIN_REASON in answer["n3"].detail, answer
    assert "n3" not in out.out
    assert reasons(cluster)["n3"] == before == ("drained", ADMIN_REASON)


def test_out_now_counts_remediation_drains_and_gpuprov_reservations(cluster, tmp_path):
    """The breaker's view: a node drained by a remediation, and one held in a gpuprov
    reservation, are out; a node drained by a validation run (not a remediation) and an
    admin's are not; the pool is the partition's nodes."""
    cluster.drain("n1", "gpuprov 20261129T100000.000Z-ab12: remediate: xid: Xid 79")
    cluster.drain("n2", "gpuprov 20261129T100000.000Z-ab12: xid: Xid 79")
    cluster.drain("n3", ADMIN_REASON)
    cluster.run("scontrol", "create", "reservation", "reservationname=gpuprov-20261129T100000_000Z-ab12",
                "users=root", "nodes=n4", "starttime=now", "duration=10", "flags=ignore_jobs")

    out = on_login_node(cluster, tmp_path, lambda target: target.out_now()).answer
    assert out.out == {"n1", "n4"} and out.pool == 4


def test_a_gpu_reset_and_evidence_through_slurm_say_what_they_do_not_do(cluster, tmp_path):
    """No GPU reset through Slurm (root on the node is needed): refused with `escalate`, so
    the loop goes on to the reboot; no evidence through Slurm: said, with the way that works.
    Nothing changes on the cluster."""
    def steps(target):
        return target.reset_gpu(["n1"]), target.evidence(["n1"])

    reset, evidence = on_login_node(cluster, tmp_path, steps).answer
    assert not reset["n1"].ok and reset["n1"].escalate
    assert "needs root" in reset["n1"].detail and "reboot" in reset["n1"].detail
    assert not evidence["n1"].ok and "SSH host" in evidence["n1"].detail
    assert state(cluster, "n1") == ("idle", [])


def test_a_limit_shorter_than_resume_timeout_waits_for_slurm_all_the_same(cluster, tmp_path,
                                                                           capsys):
    """A reboot limit of 1 s on a cluster whose ResumeTimeout is 30 s: gpuprov waits until
    Slurm's own verdict could come (30 s, slurmctld's 30 s check, 15 s of slack), says so,
    and the node, back after its 2 s reboot, is back, not "did not come back"."""
    def steps(target):
        target.take_out({"n4": "xid: Xid 79"})
        return target.reboot(["n4"], {"n4": "reboot the node"}, 1.0)

    answer = on_login_node(cluster, tmp_path, steps).answer["n4"]
    assert answer.ok, answer
    out = capsys.readouterr()
    assert "rebooting through Slurm (up to 75 s: the cluster's ResumeTimeout 30 s and Slurm's " \
           "check after it)" in out.out + out.err
    assert state(cluster, "n4") == ("idle", ["DRAIN"])


def test_a_node_slurm_gives_up_on_is_drained_again_and_stays_out_when_it_registers(tmp_path):
    """The node's reboot (45 s) outlasts the cluster's ResumeTimeout (5 s): Slurm sets it DOWN,
    "reboot timed out", and clears its drain; with ReturnToService=2 it would take jobs when its
    slurmd registers (measured: IDLE, no reason). gpuprov, its own limit 1 s, waits for Slurm's
    verdict, drains the node again, and the node registers drained with gpuprov's reason."""
    why = missing_reason()
    if why:
        pytest.skip(why)
    slow = SlurmCluster(1, reboot_delay=45, resume_timeout=5)
    try:
        def steps(target):
            target.take_out({"n1": "xid: Xid 79"})
            return target.reboot(["n1"], {"n1": "reboot the node"}, 1.0)

        answer = on_login_node(slow, tmp_path, steps).answer["n1"]
        assert not answer.ok
        assert answer.detail == ("Slurm set it DOWN: reboot timed out (ResumeTimeout); drained "
                                 "again, so that it stays out when it registers"), answer
        wait_for(lambda: state(slow, "n1")[0] == "idle", "n1's slurmd registered", 90)
        assert state(slow, "n1") == ("idle", ["DRAIN"])
        assert re.match(r"gpuprov [0-9TZ.a-f-]+: remediate: reboot the node",
                        reasons(slow)["n1"][1]), reasons(slow)
    finally:
        slow.stop()


# ---------------------------------------------------------------------- `gpuprov remediate`
def validate_and_remediate(cluster: SlurmCluster, tmp_path: Path, capsys,
                           before_remediate: Callable[[], None] = lambda: None,
                           **options) -> tuple[int, str, Path, str]:
    """`gpuprov validate --host hpc1` (the verdicts), then `gpuprov remediate --host hpc1`:
    (remediate's exit status, its output, the logs, its run id)."""
    from remote.commands import remediate as remediate_cmd
    from remote.commands import validate as validate_cmd

    path, logs = inventory(cluster, tmp_path), tmp_path / "logs"
    validate_cmd.run(host="hpc1", inventory=str(path), logs_dir=str(logs))
    before_remediate()
    capsys.readouterr()
    rc = remediate_cmd.run(host="hpc1", inventory=str(path), logs_dir=str(logs), **options)
    out = capsys.readouterr()
    record_runs = {p.parent.name for p in logs.glob("*/*/remediation.json")}
    assert len(record_runs) <= 1, record_runs
    return rc, out.out + out.err, logs, next(iter(record_runs), "")


def record(logs: Path, node: str, run_id: str) -> dict:
    return json.loads((logs / node / run_id / "remediation.json").read_text())


def test_remediate_reboots_revalidates_resumes_escalates_and_leaves_an_admins_drain(
        cluster, tmp_path, capsys):
    """`gpuprov remediate` on the login node, after a validation found an Xid 79 (action:
    reboot the node) on n1, n2 and n3: n1 is clean after its reboot, validated again and
    resumed; n2's Xid comes back at boot: still sick, it goes up the ladder (an RMA) and stays
    drained with the escalation as its reason; n3 an admin drained after the validation: left
    as the admin left it. n4 passed: untouched."""
    for node in ("n1", "n2", "n3"):
        kernel_log(cluster, node, XID_79, XID_79 if node == "n2" else "")
    pids = {n: cluster.slurmd_pid(n) for n in cluster.nodes}

    rc, out, logs, run_id = validate_and_remediate(
        cluster, tmp_path, capsys, lambda: cluster.drain("n3", ADMIN_REASON))

    from remote.ground.exitcodes import EXIT_VALIDATION_FAILED
    assert rc == EXIT_VALIDATION_FAILED, out  # n2 is left out
    wait_for(lambda: state(cluster, "n1") == ("idle", []), "n1 idle, no flags")
    assert "n1" not in reasons(cluster)
    repaired = record(logs, "n1", run_id)
    assert repaired["outcome"] == "repaired", repaired
    assert [(s["action"], s["result"]) for s in repaired["steps"]][-2:] == [
        ("reboot the node", "done"), ("validate again", "done")]
    left = record(logs, "n2", run_id)
    assert left["outcome"] == "left out", left
    n2_state, n2_reason = reasons(cluster)["n2"]
    assert n2_state == "drained", n2_reason
    assert n2_reason.startswith(f"gpuprov {run_id}: remediate: reboot the node did not help: "), n2_reason
    assert "Xid 79" in n2_reason
    for node in ("n1", "n2"):
        assert cluster.slurmd_pid(node) != pids[node], f"{node} was not rebooted"
    assert reasons(cluster)["n3"] == ("drained", ADMIN_REASON)
    assert cluster.slurmd_pid("n3") == pids["n3"] and not (logs / "n3" / run_id).exists()
    assert re.search(r"^n3 .*taken out by someone else", out, re.M), out
    assert cluster.slurmd_pid("n4") == pids["n4"] and state(cluster, "n4") == ("idle", [])
    assert cluster.reservations() == []


def test_with_four_sick_nodes_and_a_breaker_of_two_at_most_two_are_out_at_once(
        cluster, tmp_path, capsys):
    """Four nodes with an Xid 79, clean after a reboot, and `--max-out 2`: slurmctld's view,
    sampled all along the run (drained, down, rebooting or in a reservation: out), never
    shows more than two out at once; the run takes all four through, two by two."""
    for node in cluster.nodes:
        kernel_log(cluster, node, XID_79, "")
    seen: list[set[str]] = []
    stop = threading.Event()

    def sample() -> None:
        keep_off = {"DRAIN", "DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED"}
        while not stop.is_set():
            info = cluster.node_info()
            out = {n for n, i in info.items()
                   if keep_off & ({i.get("state", "").upper()} | set(i.get("state_flags") or []))}
            seen.append(out | held_in_reservations(cluster))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        rc, out, logs, run_id = validate_and_remediate(cluster, tmp_path, capsys, max_out="2")
    finally:
        stop.set()
        sampler.join()
    assert rc == 0, out
    most = max(seen, key=len)
    assert len(most) == 2, (most, len(seen))
    assert "wait: " in out and "--max-out 2" in out, out
    for node in cluster.nodes:
        assert record(logs, node, run_id)["outcome"] == "repaired"
    wait_for(lambda: all(state(cluster, n) == ("idle", []) for n in cluster.nodes), "all idle")


def held_in_reservations(cluster: SlurmCluster) -> set[str]:
    out = cluster.run("scontrol", "show", "reservation", "-o", check=False).stdout.decode()
    held: set[str] = set()
    for expr in re.findall(r" Nodes=(\S+)", out):
        names = cluster.run("scontrol", "show", "hostnames", expr, check=False).stdout.decode()
        held |= set(names.split())
    return held
