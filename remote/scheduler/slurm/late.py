"""How long a run waits for a node that missed a ping (NOT_RESPONDING, nothing else keeping jobs
off it: `nodes.Node.late`): as long as the cluster's own SlurmdTimeout, within a ceiling.

slurmctld pings each slurmd; a node that does not answer is flagged NOT_RESPONDING, and set
DOWN once it has not answered for SlurmdTimeout ("The interval, in seconds, that the Slurm
controller waits for slurmd to respond before configuring that node's state to DOWN ... The
default value is 300 seconds", slurm.conf(5), Slurm 22.05.8). Within SlurmdTimeout of being
flagged, then, the node either answers (the flag clears, it is validated) or is set DOWN (it is
reported down): waiting that long is never waiting for nothing, and a fixed 15 s sent home
nodes that would have answered at the next ping (pings go SlurmdTimeout/3 apart,
src/slurmctld/controller.c `ping_interval`). The run asks for the value only when a node is
late, with `scontrol show config` (22.05's scontrol has no --json: "scontrol: unrecognized
option '--json'", seen on Debian 12's 22.05.8; it came in 23.02), and reads its text as
untrusted: one line `SlurmdTimeout = N sec` in ASCII digits.
"""
from __future__ import annotations

import re
from typing import Optional

from ..base import LATE_WAIT_S

CONFIG_SCRIPT = "scontrol show config"
SLURMD_TIMEOUT_DEFAULT_S = 300  # slurm.conf(5), 22.05: "The default value is 300 seconds"
# The ceiling, chosen: Slurm's own default SlurmdTimeout. A cluster set longer (slurm.conf
# allows up to 65533 s) does not hold a validation run for more than 5 minutes per listing.
LATE_WAIT_MAX_S = float(SLURMD_TIMEOUT_DEFAULT_S)
CONFIG_LINES_MAX = 2000  # 22.05 prints about 300 lines; past this the answer is not read
_TIMEOUT = re.compile(r"SlurmdTimeout[ \t]*=[ \t]*([0-9]{1,5})(?:[ \t]+sec)?", re.ASCII)


def slurmd_timeout(config: str) -> Optional[int]:
    """SlurmdTimeout in seconds from `scontrol show config`'s text, None when no single line
    gives it plainly."""
    found = [m for m in (_TIMEOUT.fullmatch(line.strip())
                         for line in config.splitlines()[:CONFIG_LINES_MAX]) if m]
    return int(found[0].group(1)) if len(found) == 1 else None


def late_wait(config: str) -> tuple[float, str]:
    """How long to wait for late nodes, and why, from `scontrol show config`'s text: the
    cluster's SlurmdTimeout up to LATE_WAIT_MAX_S; LATE_WAIT_S when it cannot be read or is 0
    (slurmctld then never pings, so a node is not late for a ping: "A value of zero indicates
    the node will not be tested by slurmctld", slurm.conf(5))."""
    timeout = slurmd_timeout(config)
    if timeout is None:
        return LATE_WAIT_S, "SlurmdTimeout not readable"
    if timeout == 0:
        return LATE_WAIT_S, "SlurmdTimeout 0: no pings"
    if timeout > LATE_WAIT_MAX_S:
        return LATE_WAIT_MAX_S, f"SlurmdTimeout {timeout} s, capped"
    return float(timeout), "SlurmdTimeout"
