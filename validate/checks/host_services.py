"""host_services: every service the node profile names (``host.services``) is running, as
TensorWave checks its daemons (cluster-demand.md).

Where systemd runs (``/run/systemd/system``, sd_booted(3)) a name is a unit:
``systemctl is-active NAME`` prints ``active`` for a running one (systemctl(1), is-active).
Elsewhere (a container, a node without systemd) it is a process name, matched against
``/proc/[pid]/comm`` (proc(5); the kernel cuts it to 15 characters), as LBNL NHC's
``check_ps_service`` looks for a process (mej/nhc scripts/common.nhc).

A stopped service fails, named; action: none (start it: ``systemctl start NAME``; ours: no
reset or reboot needed).  Not applicable without ``host.services``.
"""

import os
import shutil

from .. import actions, host

COMM_MAX = 15  # TASK_COMM_LEN 16 with its NUL (proc(5), /proc/[pid]/comm)


def process_names(proc="/proc"):
    names = set()
    for pid in os.listdir(proc):
        if pid.isdigit():
            try:
                with open(os.path.join(proc, pid, "comm")) as f:
                    names.add(f.read().strip())
            except OSError:
                continue
    return names


def running_as_process(name, names):
    return name[:COMM_MAX] in names


def unit_state(systemctl, name):
    r = host.run_tool([systemctl, "is-active", name], timeout=10)
    return (r["stdout"].strip() or r["error"] or "unknown").splitlines()[0]


def run(ctx, res, systemd_dir="/run/systemd/system"):
    want = ((ctx.profile or {}).get("host") or {}).get("services") or []
    if not want:
        res.waive("not applicable: the node profile names no services (host.services)", warning=False)
        return
    systemctl = shutil.which("systemctl") if os.path.isdir(systemd_dir) else None
    names = None if systemctl else process_names()
    states = {}
    for name in want:
        if systemctl:
            states[name] = unit_state(systemctl, name)
        else:
            states[name] = "running" if running_as_process(name, names) else "no such process"
        if states[name] not in ("active", "running"):
            how = "systemctl start %s" % name if systemctl else "start it"
            res.problem("service %s is not running (%s: %s): %s" % (
                name, "systemctl is-active" if systemctl else "/proc/*/comm", states[name], how), actions.NONE)
    res.figures.update({"services": states, "by": "systemd" if systemctl else "process name"})
    res.summary = "%d of %d services running (%s)" % (
        sum(1 for s in states.values() if s in ("active", "running")), len(states),
        "systemd" if systemctl else "process names")
