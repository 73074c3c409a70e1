"""Rebooting nodes through Slurm: the `scontrol reboot` command, and the wait until each node is
back, read from the node listing (`nodes.parse_nodes`'s JSON shapes; untrusted).

scontrol(1), Slurm 22.05.8, `reboot [ASAP] [nextstate={RESUME|DOWN}] [reason=<reason>]
{ALL|<NodeList>}`: "Reboot the nodes in the system when they become idle using the
RebootProgram ... The node's "DRAIN" state flag will be cleared if the reboot was "ASAP",
nextstate=resume or down ... The reason will be appended with: "reboot issued" when the reboot
is issued; "reboot complete" when the node registers and has a "nextstate" of "DOWN"; or
"reboot timed out" when the node fails to register within ResumeTimeout".

What 22.05.8 does with a node gpuprov drained first (measured with real daemons,
tests/test_remediate_slurm.py; the RebootProgram of tests/slurm_cluster.py, ReturnToService=2):
- no ASAP, no nextstate: IDLE+DRAIN+REBOOT_REQUESTED, then DOWN+DRAIN+REBOOT_ISSUED (reason
  "<ours> : reboot issued"), then IDLE+DRAIN once its slurmd registered with a boot time after
  the request: the drain survives, whatever ReturnToService says;
- nextstate=RESUME (or ASAP, which sets it when none is given): IDLE, drain and reason cleared:
  the node takes jobs before anyone validated it;
- nextstate=DOWN: DOWN, reason "... : reboot complete", drain cleared; with ReturnToService=2
  ("A DOWN node will become available for use upon registration with a valid configuration",
  slurm.conf(5)) its next periodic registration, seconds later, made it IDLE with no reason.
So gpuprov drains first and reboots with neither: the node comes back drained with gpuprov's
reason, and is validated again in a reservation before it is resumed, as `validate
--resume-passed` takes a node back (gate.py). ASAP adds nothing for a drained node (a node
still running jobs is rebooted "when they become idle" either way).

Slurm decides that a node rebooted from the boot time its slurmd registers with: it ignores the
node's registrations while `boot_time < boot_req_time` (src/slurmctld/node_mgr.c,
waiting_for_node_boot), and `boot_time = now - up_time` (src/slurmctld/job_mgr.c and
node_mgr.c; up_time from sysinfo(2) in src/slurmd/slurmd/get_mach_stat.c, get_up_time). A node
is back here when it is listed with no REBOOT_* flag, not DOWN or not responding, and a boot
time later than before the request; a node Slurm set DOWN after ResumeTimeout ("reboot timed
out", node_mgr.c check_reboot_nodes) failed; past the limit, it did not come back in time, and
its reboot is cancelled while only requested (`cancel_command`), so that the node stays
drained.

Slurm's verdict on a reboot under way clears the node's drain (`cancel_command`), and a node
that registers later, DOWN, is back in service with ReturnToService=2 (measured, 22.05.8:
ResumeTimeout=5, a reboot of 100 s: DOWN "reboot timed out" with no DRAIN at 30 s, IDLE with
no reason at 101 s). So gpuprov waits for that verdict (`wait_limit`: the cluster's
ResumeTimeout, read with `CONFIG`, and slurmctld's check period) and drains the node again.
"""
from __future__ import annotations

import json
import re
import shlex
import time
from typing import Any, Callable, Optional

from .nodes import Node, NodeListError, parse_nodes

REBOOT_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED"})
# The words slurmctld appends to the reason of a node that did not register within
# ResumeTimeout (src/slurmctld/node_mgr.c, check_reboot_nodes: set_node_reboot_reason(node_ptr,
# "reboot timed out")), before it sets the node DOWN.
TIMED_OUT = "reboot timed out"
POLL_S = 1.0  # chosen: a listing is one command on the login node
# slurmctld checks reboots against ResumeTimeout every PERIODIC_TIMEOUT seconds
# (src/slurmctld/slurmctld.h: 30; controller.c, _slurmctld_background: check_reboot_nodes), so
# its "reboot timed out" comes up to 30 s after ResumeTimeout (measured: 30 s after a reboot
# with ResumeTimeout=5). The slack is chosen: a busy slurmctld, and one more listing.
PERIODIC_TIMEOUT_S, VERDICT_SLACK_S = 30, 15
# The cluster's settings, ResumeTimeout among them: `ResumeTimeout           = 60 sec`
# (scontrol(1) "show config", 22.05.8)
CONFIG = "scontrol show config"
RESUME_TIMEOUT = re.compile(r"^ResumeTimeout\s*=\s*([0-9]{1,7}) sec", re.M | re.ASCII)
# The node listing, as the survey reads it (cluster.survey_script): 23.02+ lists nodes in
# scontrol's JSON; 22.05's scontrol has none.
LISTING = "scontrol show nodes --json 2>/dev/null || sinfo --json"


def reboot_command(nodes: list[str], reason: str) -> str:
    """Reboot `nodes` (drained already) with `reason`, neither ASAP nor nextstate: the drain
    survives the reboot (the module's measurements)."""
    return f"scontrol reboot reason={shlex.quote(reason)} {shlex.quote(','.join(nodes))}"


def cancel_command(node: str) -> str:
    """Cancel `node`'s reboot while it is only requested (REBOOT_REQUESTED: the node still
    runs jobs), once gpuprov stopped waiting for it: "Pending reboots can be cancelled by using
    "scontrol cancel_reboot <node>"" (scontrol(1) 22.05); the node keeps its flags, the drain
    among them. An issued one cannot be: "REBOOT on node %s already in progress -- unable to
    cancel" (src/slurmctld/node_mgr.c, update_node, 22.05.8; scontrol then says "Invalid node
    state specified", measured); Slurm sets such a node DOWN at ResumeTimeout, clearing its
    drain (check_reboot_nodes: `node_state &= (~NODE_STATE_DRAIN)`)."""
    return f"scontrol cancel_reboot {shlex.quote(node)}"


ISSUED_TOO_LATE = ("its reboot is under way and Slurm cannot cancel it: at ResumeTimeout Slurm "
                   "sets it DOWN and clears its drain; drain it again then, or it takes jobs "
                   "when it registers")
# What gpuprov did with a node Slurm set DOWN at ResumeTimeout (its drain cleared)
DRAINED_AGAIN = "drained again, so that it stays out when it registers"


def resume_timeout(config: str) -> Optional[int]:
    """The cluster's ResumeTimeout in seconds from `CONFIG`'s text; None when it has none."""
    match = RESUME_TIMEOUT.search(config)
    return int(match.group(1)) if match else None


def wait_limit(timeout_s: float, resume_s: Optional[int]) -> float:
    """How long to wait for rebooting nodes: `timeout_s`, or longer where Slurm's own verdict
    on a reboot under way would come later (ResumeTimeout `resume_s`, then its check period):
    gpuprov must see that verdict to drain the node again."""
    if resume_s is None:
        return timeout_s
    return max(timeout_s, float(resume_s + PERIODIC_TIMEOUT_S + VERDICT_SLACK_S))


def boot_times(text: str) -> dict[str, int]:
    """Node -> its boot time (Unix seconds) from a node listing: 22.05's `boot_time` is a
    number, 23.02+'s an object `{"set": true, "number": N}` (data_parser v0.0.39+); a node
    without a readable one is left out. Untrusted: anything else counts as absent."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    records = data.get("nodes") if isinstance(data, dict) else None
    found: dict[str, int] = {}
    for record in records if isinstance(records, list) else []:
        if not isinstance(record, dict) or not isinstance(record.get("name"), str):
            continue
        value = _number(record.get("boot_time"))
        if value is not None:
            found[record["name"]] = value
    return found


def _number(value: Any) -> Optional[int]:
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) is True else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def state_of(node: Optional[Node], before: Optional[int], now: Optional[int]) -> tuple[str, str]:
    """Where one node's reboot stands: ("back", ""), ("waiting", its state) or ("failed",
    why). `before`/`now`: its boot time before the request and in this listing (None when
    unknown: then the flags alone say it)."""
    if node is None:
        return "waiting", "not listed"
    if node.states & REBOOT_FLAGS:
        return "waiting", node.state
    if TIMED_OUT in node.reason and "DOWN" in node.states:
        return "failed", f"Slurm set it DOWN: {TIMED_OUT} (ResumeTimeout)"
    if node.unavailable:
        return "waiting", node.state
    if before is not None and now is not None and now <= before:
        return "failed", "Slurm did not reboot it (its boot time did not change)"
    return "back", ""


def wait_back(listing: Callable[[], str], nodes: list[str], before: dict[str, int],
              timeout_s: float, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> dict[str, tuple[bool, str]]:
    """Node -> (back, why not) once every node of `nodes` is back or failed, or `timeout_s`
    passed (then "did not come back within N s (its last state)"). `listing()`: the login
    node's node listing (LISTING), '' when it could not be had; `before`: the boot times from
    before the request."""
    deadline = clock() + timeout_s
    answers: dict[str, tuple[bool, str]] = {}
    last: dict[str, str] = {}
    while True:
        text = listing()
        try:
            listed = parse_nodes(text) if text else {}
        except NodeListError as exc:
            listed, last = {}, {n: f"the node listing cannot be read: {exc}" for n in nodes}
        booted = boot_times(text) if text else {}
        for name in nodes:
            if name in answers or name not in listed:
                continue
            state, why = state_of(listed[name], before.get(name), booted.get(name))
            if state == "waiting":
                last[name] = why
            else:
                answers[name] = (state == "back", why)
        if len(answers) == len(nodes) or clock() >= deadline:
            break
        sleep(POLL_S)
    for name in nodes:
        answers.setdefault(name, (False, f"did not come back within {timeout_s:.0f} s "
                                         f"({last.get(name, 'not listed')})"))
    return answers
