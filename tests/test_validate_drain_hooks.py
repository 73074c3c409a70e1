"""A scheduler's node-side drain hook is one row of a table (validate/drain.py DRAIN_HOOKS): a
hook this test defines, for a scheduler validate/ has never heard of, is registered in-process
as one row, and `python3 -m validate --health --farm-drain` (run here as `-m` runs it, through
runpy) offers its option, reads the node's name from the hook's variable and runs its gate with
the verdict, as `--slurm-drain` does with SLURMD_NODENAME and scontrol.

The "scheduler" is a folder per node holding its state (`idle`, or `drain REASON`), as
tests/test_scheduler_plugin.py's farm; the node's nvidia-smi is the stand-in serving a recorded
H100 capture (tests/fixtures/validate/smi_node), its kernel log a real Xid 79 line
(tests/fixtures/validate/health_cases.json)."""
from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from validate import drain
from validate.shared import HEALTH_PREFIX

SMI_NODE = REPO / "tests" / "fixtures" / "validate" / "smi_node"
XID_79 = "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus\n"


def _farm_gate(farm: Path):
    """Drain a farm node with the health line as its reason; give back only a node drained so."""
    def gate(node, healthy, line, stream, action=None):
        state = farm / node / "state"
        if healthy:
            if not state.read_text().startswith("drain " + HEALTH_PREFIX):
                return None
            state.write_text("idle\n")
            stream.write("farm: resumed %s\n" % node)
            return "resumed"
        state.write_text("drain %s%s\n" % (HEALTH_PREFIX, line))
        stream.write("farm: drained %s (action: %s)\n" % (node, action))
        return "drained"
    return gate


def _python_m_validate(monkeypatch, capsys, *args):
    """`python3 -m validate ARGS` in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["validate"] + list(args))
    with pytest.raises(SystemExit) as end:
        runpy.run_module("validate", run_name="__main__", alter_sys=True)
    said = capsys.readouterr()
    return end.value.code, said.out, said.err


@pytest.fixture
def farm(tmp_path, monkeypatch):
    farm = tmp_path / "farm"
    (farm / "n1").mkdir(parents=True)
    (farm / "n1" / "state").write_text("idle\n")
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % SMI_NODE)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    monkeypatch.delenv("FARMD_NODE", raising=False)
    return farm


def test_a_drain_hook_added_as_one_row_gets_its_option_and_runs_its_gate(farm, tmp_path, monkeypatch, capsys):
    sick_log, clean_log = tmp_path / "sick.log", tmp_path / "clean.log"
    sick_log.write_text(XID_79)
    clean_log.write_text("")
    state = farm / "n1" / "state"
    health = ("--health", "--farm-drain", "--expect-gpus", "8")

    # without its row, validate has never heard of the option
    assert _python_m_validate(monkeypatch, capsys, *health, "--kernel-log", str(sick_log)) == (
        2, "", "validate: error: unrecognized arguments: --farm-drain\n")

    monkeypatch.setitem(drain.DRAIN_HOOKS, "farm", drain.Hook(
        "--farm-drain", "FARMD_NODE", _farm_gate(farm), "under the farm (FARMD_NODE set), drain this node"))
    code, out, err = _python_m_validate(monkeypatch, capsys, "--health", "--help")
    assert code == 0 and "--farm-drain" in out and "drain this node" in out and "--slurm-drain" in out

    # not started by the farm (no FARMD_NODE): the verdict alone, nothing drained
    code, out, err = _python_m_validate(monkeypatch, capsys, *health, "--kernel-log", str(sick_log))
    assert (code, err, state.read_text()) == (1, "", "idle\n")

    # sick: drained with the one line the check printed, which results.json has as the option's
    monkeypatch.setenv("FARMD_NODE", "n1")
    results = tmp_path / "out"
    code, out, err = _python_m_validate(monkeypatch, capsys, *health, "--kernel-log", str(sick_log),
                                        "--out", str(results))
    assert code == 1 and out.startswith("gpuprov health: sick: GPU PCI:0000:44:00: Xid 79") and out.count("\n") == 1
    assert state.read_text() == "drain " + out
    assert err == "farm: drained n1 (action: reboot the node)\n"
    options = json.loads((results / "results.json").read_text())["options"]
    assert (options["farm_drain"], options["slurm_drain"]) == (True, False)

    # healthy again: given back
    code, out, err = _python_m_validate(monkeypatch, capsys, *health, "--kernel-log", str(clean_log))
    assert code == 0 and out.startswith("gpuprov health: healthy: 8 GPU(s) NVIDIA H100 80GB HBM3")
    assert (err, state.read_text()) == ("farm: resumed n1\n", "idle\n")
