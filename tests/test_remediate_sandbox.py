"""`gpuprov remediate` over SSH on four real sandbox hosts (tests/sandbox_fixture.py: real sshd,
a real reboot with a new boot_id, fresh /run and /dev/shm after it).

A host is made sick for real: /dev/shm made unwritable (`chmod 0555`) fails the host_mounts
check of a profile naming /dev/shm ("read-only (Permission denied)", action: reboot the node);
the reboot mounts a fresh /dev/shm (mode 1777), so the re-validation passes. /opt/wheels (a
read-only bind mount) stays read-only across reboots: that host stays sick. The verdicts come
from real `gpuprov validate` runs, except the GPU reset's: a sandbox host has no GPU to earn a
"reset the GPU" verdict, so that one results.json is written by the test (said where); the
reset itself is real commands against a recorded nvidia-smi put in the host's PATH."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from remote import sandbox
from remote.ground.repairs import read_repair
from remote.ground.runid import new_run_id
from tests.conftest import invoke
from tests.sandbox_fixture import own_hosts

pytestmark = [pytest.mark.root, pytest.mark.slow]
SHM = {"node_profile": {"host": {"mounts": ["/dev/shm"]}},
       "validate_args": "--device cpu --checks host_mounts"}
WHEELS = {"node_profile": {"host": {"mounts": ["/opt/wheels"]}},
          "validate_args": "--device cpu --checks host_mounts"}
MARK = "~/.gpuprov/{name}/quarantine"
SMI = Path(__file__).parent / "fixtures" / "nvidia-smi"


@pytest.fixture(scope="module")
def hosts():
    import os

    if os.geteuid() != 0:
        pytest.skip("sandbox hosts need root")
    with own_hosts(4) as made:
        yield made


def _validate(hosts, work, names, profile):
    res = invoke("validate", "--host", ",".join(names), "--inventory", str(hosts.inventory),
                 "--var", json.dumps(profile), cwd=work, timeout=600)
    return res


def _remediate(hosts, work, names, profile, *more):
    return invoke("remediate", "--host", ",".join(names), "--inventory", str(hosts.inventory),
                  "--var", json.dumps(profile), "--reboot-timeout", "120", *more, cwd=work,
                  timeout=900)


def _sicken(hosts, name):
    rc, out, err = hosts.run(name, "sudo -n chmod 0555 /dev/shm")
    assert rc == 0, out + err


def _record(work, name):
    found = sorted((work / "logs" / name).glob("*/remediation.json"))
    assert found, f"no remediation.json for {name}"
    return read_repair(found[-1])


def _mark(hosts, name):
    rc, out, _ = hosts.run(name, f"cat {MARK.format(name=name)} 2>/dev/null")
    return out.strip() if rc == 0 else None


def test_check_changes_nothing_then_the_loop_reboots_validates_and_puts_back(hosts, work):
    name = hosts.names[0]
    _sicken(hosts, name)
    assert _validate(hosts, work, [name], SHM).rc == 3
    boot = sandbox.boot_id(hosts.state_dir, name)
    listing = sorted(str(p) for p in (work / "logs").rglob("*"))

    check = _remediate(hosts, work, [name], SHM, "--check")
    assert check.rc == 0, check.out + check.err
    assert "PLAN (--check: nothing changed)" in check.out
    assert re.search(rf"{name}\s+host_mounts: /dev/shm .*Permission denied.*\s+reboot the node\s+"
                     r"drain and replace \(RMA\), if it does not help", check.out), check.out
    assert sorted(str(p) for p in (work / "logs").rglob("*")) == listing  # nothing written here
    assert sandbox.boot_id(hosts.state_dir, name) == boot  # nor done there
    assert _mark(hosts, name) is None
    assert hosts.run(name, "stat -c %a /dev/shm")[1].strip() == "555"

    healthy = hosts.names[3]  # no verdict yet: nothing to repair, nothing left on it or here
    res = _remediate(hosts, work, [name, healthy], SHM)
    assert res.rc == 0, res.out + res.err
    assert sandbox.boot_id(hosts.state_dir, name) != boot
    assert not (work / "logs" / healthy).exists()
    record = _record(work, name)
    assert record.outcome == "repaired" and record.ended_at is not None
    assert [(s.action, s.result) for s in record.steps] == [("reboot the node", "done"),
                                                            ("validate again", "done")]
    assert record.trigger.action == "reboot the node"
    assert (Path(work / "logs" / name / record.run_id) / "results.json").is_file()
    assert _mark(hosts, name) is None
    assert re.search(rf"{name}\s+reboot the node\s+repaired\s+\d+s", res.out), res.out


def test_a_node_that_stays_sick_is_left_out_with_the_escalation(hosts, work):
    name = hosts.names[1]
    assert _validate(hosts, work, [name], WHEELS).rc == 3
    res = _remediate(hosts, work, [name], WHEELS)
    assert res.rc == 3, res.out + res.err  # a node left out: as a failed validation
    record = _record(work, name)
    assert record.outcome == "left out"
    assert [(s.action, s.result) for s in record.steps] == [
        ("reboot the node", "done"), ("validate again", "failed"), ("drain and replace (RMA)", "done")]
    assert re.fullmatch(r"gpuprov \S+: remediate: reboot the node did not help: host_mounts: "
                        r"/opt/wheels .*", record.reason), record.reason
    assert "drain and replace (RMA)" in record.reason or record.reason.endswith("...")
    assert _mark(hosts, name) == record.reason  # still out of service, the reason on the host
    # gpuprov validate on a quarantined host says so, and goes on
    again = _validate(hosts, work, [name], WHEELS)
    assert "quarantined (gpuprov remediate holds it out of service)" in again.out + again.err
    hosts.run(name, f"rm -f {MARK.format(name=name)}")


def test_breaker_keeps_at_most_two_out_of_four(hosts, work):
    names = hosts.names[:4]
    for name in names:
        _sicken(hosts, name)
    assert _validate(hosts, work, names, SHM).rc == 3
    res = _remediate(hosts, work, names, SHM, "--max-out", "2")
    assert res.rc == 0, res.out + res.err
    assert f"{names[2]}, {names[3]} wait: 2 of 2 out (--max-out 2)" in res.out
    records = [_record(work, n) for n in names]
    assert all(r.outcome == "repaired" for r in records)
    for r in records:  # at no moment more than two out: count the intervals over each start
        overlapping = [o for o in records if o.started_at <= r.started_at < (o.ended_at or 0)]
        assert len(overlapping) <= 2, [(o.node, o.started_at, o.ended_at) for o in records]



def test_an_unreachable_node_never_stops_the_others(hosts, work):
    down, sick = hosts.names[2], hosts.names[3]
    for name in (down, sick):
        _sicken(hosts, name)
    assert _validate(hosts, work, [down, sick], SHM).rc == 3
    sandbox.stop(hosts.state_dir, down)  # powered off: its sshd refuses connections
    try:
        res = _remediate(hosts, work, [down, sick], SHM, "--max-out", "2")
    finally:
        sandbox.start(hosts.state_dir, down)
    assert res.rc == 3, res.out + res.err
    lost = _record(work, down)
    assert lost.outcome == "left out" and lost.steps == []
    assert lost.reason.startswith("not taken out of service (unreachable: "), lost.reason
    assert _record(work, sick).outcome == "repaired"
    assert re.search(rf"{down}\s+reboot the node\s+left out\s+-\s+not taken out of service", res.out), res.out

def _install_smi(hosts, name, busy: bool):
    script = (SMI / "nvidia-smi").read_text()
    apps = (SMI / "compute-apps-busy.csv").read_text() if busy else ""
    put = "cat > /usr/local/bin/nvidia-smi && chmod 755 /usr/local/bin/nvidia-smi"
    command = (f"sudo -n sh -c {shlex.quote(put)} "
               f"<<'EOF'\n{script}EOF\n"
               "rm -rf /var/tmp/gpuprov-smi && mkdir -p /var/tmp/gpuprov-smi && chmod 777 /var/tmp/gpuprov-smi\n")
    if busy:
        command += f"cat > /var/tmp/gpuprov-smi/apps <<'EOF'\n{apps}EOF\n"
    rc, out, err = hosts.run(name, command)
    assert rc == 0, out + err


def _reset_verdict(work, name):
    """The one verdict written by the test (a sandbox host has no GPU to earn it)."""
    folder = work / "logs" / name / new_run_id()
    folder.mkdir(parents=True)
    finding = {"what": "GPU 0: Xid 48 (double bit ECC error)", "action": "reset the GPU", "fails": True}
    (folder / "results.json").write_text(json.dumps(
        {"schema": 2, "ok": False, "action": "reset the GPU", "host": {"hostname": name},
         "checks": [{"name": "gpu_health", "status": "fail", "required": True,
                     "action": "reset the GPU", "reason": finding["what"], "findings": [finding]}]}))


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
def test_gpu_reset_refused_while_a_process_holds_a_gpu(hosts, work, busy):
    name = hosts.names[2 if busy else 3]
    _install_smi(hosts, name, busy)
    _reset_verdict(work, name)
    boot = sandbox.boot_id(hosts.state_dir, name)
    res = _remediate(hosts, work, [name], SHM)
    assert res.rc == 0, res.out + res.err
    calls = hosts.run(name, "cat /var/tmp/gpuprov-smi/calls")[1].splitlines()
    record = _record(work, name)
    assert record.outcome == "repaired"
    if busy:
        assert "-r" not in calls, calls
        assert [(s.action, s.result) for s in record.steps] == [
            ("reset the GPU", "refused"), ("reboot the node", "done"), ("validate again", "done")]
        assert "pid 24711 vgpu" in record.steps[0].detail
        assert sandbox.boot_id(hosts.state_dir, name) != boot
    else:
        assert calls[-1] == "-r", calls
        assert [(s.action, s.result) for s in record.steps] == [("reset the GPU", "done"),
                                                                ("validate again", "done")]
        assert sandbox.boot_id(hosts.state_dir, name) == boot
    hosts.run(name, "sudo -n rm -f /usr/local/bin/nvidia-smi")


def test_ctrl_c_during_the_reboot_leaves_the_record_stopped(hosts, work):
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    name = hosts.names[0]
    _sicken(hosts, name)
    assert _validate(hosts, work, [name], SHM).rc == 3
    boot = sandbox.boot_id(hosts.state_dir, name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "remediate", "--host", name,
         "--inventory", str(hosts.inventory), "--var", json.dumps(SHM), "--reboot-timeout", "120"],
        cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    seen = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "rebooting (waiting up to" in line:
                proc.send_signal(signal.SIGINT)
                break
        rest = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(seen) + rest
    assert proc.returncode == 130, output
    assert "interrupted" in output
    record = _record(work, name)
    assert record.outcome == "stopped" and record.ended_at is not None
    assert [s.action for s in record.steps] == []  # the reboot never ended: no step recorded
    sandbox.wait_rebooted(hosts.state_dir, name, boot, timeout=60)  # it comes back on its own
    assert _mark(hosts, name) is not None  # still out of service: the run stopped during it
    hosts.run(name, f"rm -f {MARK.format(name=name)}")


def _deferred_verdict(work, name):
    """A passing verdict with a deferred reset (a pending row remap), written by the test: a
    sandbox host has no GPU to earn it."""
    folder = work / "logs" / name / new_run_id()
    folder.mkdir(parents=True)
    finding = {"what": "GPU 0: row remapping pending, a GPU reset activates it",
               "action": "reset the GPU", "fails": False}
    (folder / "results.json").write_text(json.dumps(
        {"schema": 2, "ok": True, "action": None, "deferred_action": "reset the GPU",
         "host": {"hostname": name},
         "checks": [{"name": "system", "status": "pass", "required": True, "action": None,
                     "deferred_action": "reset the GPU", "reason": "", "findings": [finding]}]}))


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
def test_a_deferred_reset_waits_until_the_node_is_idle(hosts, work, busy):
    name = hosts.names[0 if busy else 1]
    _install_smi(hosts, name, busy)
    _deferred_verdict(work, name)
    res = _remediate(hosts, work, [name], SHM)
    assert res.rc == 0, res.out + res.err
    calls = hosts.run(name, "cat /var/tmp/gpuprov-smi/calls")[1].splitlines()
    if busy:
        assert re.search(rf"{name}\s+skipped\s+left in service busy: its deferred reset waits", res.out), res.out
        assert "-r" not in calls and _mark(hosts, name) is None
        assert not list((work / "logs" / name).glob("*/remediation.json"))
    else:
        assert calls[-1] == "-r", calls
        record = _record(work, name)
        assert record.outcome == "repaired"
        assert record.trigger.finding == "system: GPU 0: row remapping pending, a GPU reset activates it"
    hosts.run(name, "sudo -n rm -f /usr/local/bin/nvidia-smi")


def test_an_rma_gathers_evidence_and_leaves_the_node_out(hosts, work):
    """The RMA verdict is written by the test (a sandbox host has no GPU to earn one); the
    evidence, the mark and the record are real."""
    name = hosts.names[1]
    folder = work / "logs" / name / new_run_id()
    folder.mkdir(parents=True)
    finding = {"what": "GPU 0: Xid 95 uncontained ECC error", "action": "drain and replace (RMA)", "fails": True}
    (folder / "results.json").write_text(json.dumps(
        {"schema": 2, "ok": False, "action": "drain and replace (RMA)", "host": {"hostname": name},
         "checks": [{"name": "gpu_health", "status": "fail", "required": True,
                     "action": "drain and replace (RMA)", "reason": finding["what"], "findings": [finding]}]}))
    boot = sandbox.boot_id(hosts.state_dir, name)
    res = _remediate(hosts, work, [name], SHM)
    assert res.rc == 3, res.out + res.err
    record = _record(work, name)
    assert record.outcome == "left out"
    assert [(s.action, s.result) for s in record.steps] == [("drain and replace (RMA)", "done")]
    assert record.steps[0].detail.startswith("evidence: ")
    assert record.reason.endswith("remediate: gpu_health: GPU 0: Xid 95 uncontained ECC error "
                                  "-> drain and replace (RMA)")  # the action named once
    assert list((work / "logs" / name / record.run_id).glob("evidence-*.tar.gz"))
    assert sandbox.boot_id(hosts.state_dir, name) == boot  # never rebooted
    assert _mark(hosts, name) == record.reason
    hosts.run(name, f"rm -f {MARK.format(name=name)}")
