"""`gpuprov remediate`'s parts as data (pyinfra's habit: arguments + facts -> commands): the plan
read from real results.json files on disk, the breaker's arithmetic and its bad values (exit 2,
one line, through the command line), the GPU reset's fact and commands, the ladder's order."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from remote.ground.errors import InputError
from remote.remediation import breaker, gpureset, ladder
from remote.remediation.plan import plan
from tests.conftest import invoke

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"


def _results(folder: Path, ok: bool, checks: list, action=None, deferred=None) -> None:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(
        {"schema": 2, "ok": ok, "action": action, "deferred_action": deferred,
         "host": {"hostname": "n"}, "checks": checks}))


def _check(name, status, action, what, fails=True):
    return {"name": name, "status": status, "required": True, "action": action, "reason": what,
            "findings": [{"what": what, "action": action, "fails": fails}]}


def test_plan_names_finding_action_and_leaves_the_rest(tmp_path):
    logs = tmp_path / "logs"
    _results(logs / "n1" / "20261129T100000.000Z-aaaa", False,
             [_check("host_mounts", "fail", "reboot the node", "/scratch is not mounted")], "reboot the node")
    # an older failure, then a pass: the latest verdict counts
    _results(logs / "n2" / "20261128T100000.000Z-aaaa", False,
             [_check("gpu_health", "fail", "reset the GPU", "Xid 48")], "reset the GPU")
    _results(logs / "n2" / "20261129T100000.000Z-aaaa", True, [_check("system", "pass", None, "ok", False)])
    _results(logs / "n3" / "20261129T100000.000Z-aaaa", False,
             [_check("torch", "fail", "restart the job", "NCCL timeout")], "restart the job")
    _results(logs / "n4" / "20261129T100000.000Z-aaaa", True,
             [_check("system", "pass", "reset the GPU", "GPU 0: row remapping pending", False)],
             None, "reset the GPU")
    got = {p.node: p for p in plan(logs, ["n1", "n2", "n3", "n4", "n5"])}
    assert got["n1"].sick.action == "reboot the node"
    assert got["n1"].sick.finding == "host_mounts: /scratch is not mounted; action: reboot the node"
    assert got["n1"].sick.run_id == "20261129T100000.000Z-aaaa"
    assert got["n2"].sick is None and "passed" in got["n2"].why
    assert got["n3"].sick is None and "restart the job" in got["n3"].why
    assert got["n4"].deferred and got["n4"].sick.action == "reset the GPU"
    assert "row remapping pending" in got["n4"].sick.finding
    assert got["n5"].sick is None and got["n5"].why == "no validation with a verdict yet"


@pytest.mark.parametrize("text,pool,limit", [("2", 10, 2), ("25%", 10, 2), ("10%", 5, 1),
                                             ("100%", 7, 7), (" 3 ", 1, 3)])
def test_max_out_limits(text, pool, limit):
    assert breaker.parse_max_out(text).limit(pool) == limit


@pytest.mark.parametrize("text", ["0", "-1", "0%", "101%", "2.5", "x", "", "5%%"])
def test_bad_max_out_is_input_error(text):
    with pytest.raises(InputError, match="--max-out must be"):
        breaker.parse_max_out(text)


def test_wave_takes_what_is_left_and_says_who_waits():
    two = breaker.parse_max_out("2")
    w = breaker.wave(["n3", "n4", "n5", "n6"], frozenset(), 10, two)
    assert w.take == ["n3", "n4"] and w.wait == ["n5", "n6"]
    assert w.line == "n5, n6 wait: 2 of 2 out (--max-out 2)"
    w = breaker.wave(["n5", "n6"], frozenset({"n1", "n2"}), 10, two)
    assert w.take == [] and w.line == "n5, n6 wait: 2 of 2 out (--max-out 2)"


def test_bad_max_out_on_the_command_line_exits_2_with_one_line(tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts:\n  gpu1: {address: 127.0.0.1}\n")
    res = invoke("remediate", "--host", "gpu1", "--inventory", str(inventory), "--max-out", "0",
                 cwd=tmp_path)
    assert res.rc == 2, res.out + res.err
    assert res.err.strip().splitlines() == [
        "error: --max-out must be a number of nodes (1 or more) or a percentage of the pool "
        "(1% to 100%), not '0'"]
    assert not (tmp_path / "logs").exists()


def test_reset_refused_while_a_process_holds_a_gpu_else_the_board_resets():
    busy = (FIXTURES / "compute-apps-busy.csv").read_text()
    commands, why = gpureset.plan_reset(busy)
    assert commands == []
    assert why.startswith("2 process(es) hold a GPU: pid 24711 vgpu on GPU-d0180485")
    assert gpureset.plan_reset("") == (["nvidia-smi -r"], "")
    assert gpureset.plan_reset("No running processes found\n") == (["nvidia-smi -r"], "")
    assert gpureset.plan_reset("", ["0", "1"])[0] == ["nvidia-smi -r -i 0", "nvidia-smi -r -i 1"]
    commands, why = gpureset.plan_reset("garbage\x1b[2J line\n")
    assert commands == [] and why.startswith("not a compute process line: garbage?[2J")


def test_ladder_escalates_reset_reboot_rma_with_evidence_before_reboot_and_rma():
    assert ladder.steps_from("reset the GPU") == ["reset the GPU", "reboot the node",
                                                  "drain and replace (RMA)"]
    assert [r.evidence_first for r in ladder.LADDER.values()] == [False, True, True]
    assert ladder.REBOOT_TIMEOUT_S == 900.0


def test_the_reason_is_one_a_slurm_run_knows_as_gpuprovs():
    """The take-out and left-out reasons have gate.drain_reason's shape (`gpuprov <run>: ...`):
    a later run (nodes.GPUPROV_REASON) knows the drain as its own, never as an admin's."""
    from remote.ground.runid import new_run_id
    from remote.remediation.run import escalation, reason
    from remote.scheduler.slurm.nodes import GPUPROV_REASON

    run = new_run_id()
    out = reason(run, "host_mounts: /scratch is not mounted -> reboot the node")
    left = reason(run, escalation("reboot the node", "host_mounts: /scratch is not mounted" * 20))
    assert out == f"gpuprov {run}: remediate: host_mounts: /scratch is not mounted -> reboot the node"
    assert left.startswith(f"gpuprov {run}: remediate: reboot the node did not help: host_mounts:")
    assert len(left) == 200 and left.endswith("...")
    assert GPUPROV_REASON.match(out) and GPUPROV_REASON.match(left)


def test_a_reason_names_the_nodes_action_once():
    """A finding read from results.json ends with its action (`; action: reboot the node`, as
    a Slurm drain reason says it); the remediation's reason names the step after it, so the
    same action is not said twice. An escalated step keeps the finding's own, other action."""
    from remote.ground.runid import new_run_id
    from remote.remediation.reasons import step_reason
    from remote.remediation.run import escalation

    run = new_run_id()
    finding = "host_mounts: /scratch is not mounted; action: reboot the node"
    assert step_reason(run, finding, "reboot the node") == \
        f"gpuprov {run}: remediate: host_mounts: /scratch is not mounted -> reboot the node"
    assert step_reason(run, "xid: Xid 48; action: reset the GPU", "reboot the node") == \
        f"gpuprov {run}: remediate: xid: Xid 48; action: reset the GPU -> reboot the node"
    assert escalation("reboot the node", finding) == \
        "reboot the node did not help: host_mounts: /scratch is not mounted; drain and replace (RMA)"
    assert escalation("drain and replace (RMA)", "xid: Xid 79; action: drain and replace (RMA)") \
        == "xid: Xid 79 -> drain and replace (RMA)"


def test_a_clusters_login_node_out_of_reach_is_one_line_and_exit_4(tmp_path):
    """The Slurm route cannot start when its login node cannot be reached: the command says so
    on that host's line and exits 4 (unreachable), as every command does; before, the error
    left the command as exit 2, "bad input", though the input was fine. A port nothing
    listens on (127.0.0.1, a port bound and closed here) is the unreachable host."""
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"hosts:\n  hpc1:\n    address: 127.0.0.1\n    port: {port}\n"
                         "    slurm: {partition: debug}\n")
    res = invoke("remediate", "--host", "hpc1", "--inventory", str(inventory), cwd=tmp_path)
    assert res.rc == 4, res.out + res.err
    assert "Traceback" not in res.out + res.err
    lines = [line for line in (res.out + res.err).splitlines() if "hpc1" in line]
    assert any("UNREACHABLE" in line.upper() for line in lines), res.out + res.err
