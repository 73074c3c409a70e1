"""The reason a remediation writes (a Slurm drain's, an SSH host's quarantine mark's), its one
owner: `gpuprov <run>: remediate: <text>`, one printable line, cut as every reason gpuprov
writes. The shape of a drain of gpuprov's (scheduler/slurm/nodes.GPUPROV_REASON knows it as
ours), with the word that marks it as a remediation's (the breaker counts those as out).
"""
from __future__ import annotations

import re

from validate.shared import DRAIN_PREFIX
from validate.shared import DRAIN_REASON_MAX as REASON_MAX

from ..ground.resultsfile import ACTION_SAID
from ..ground.runid import RUN_ID_TEXT
from ..output.term import printable_line

REMEDIATE = "remediate"
# a reason a remediation wrote (any run's)
OURS = re.compile(rf"{re.escape(DRAIN_PREFIX)}{RUN_ID_TEXT}: {REMEDIATE}: ")
# a reason of gpuprov's at the start of a text, a remediation's or not
_PREFIX = re.compile(rf"{re.escape(DRAIN_PREFIX)}{RUN_ID_TEXT}: (?:{REMEDIATE}: )?")


def one_line(text: str) -> str:
    return " ".join(printable_line(text).split())


def reason(run_id: str, text: str) -> str:
    """`gpuprov <run>: remediate: <text>`; a reason of gpuprov's already at the start of
    `text` (a drain's it replaces) is not repeated."""
    match = _PREFIX.match(text)
    whole = one_line(f"{DRAIN_PREFIX}{run_id}: {REMEDIATE}: {text[match.end():] if match else text}")
    return whole if len(whole) <= REASON_MAX else whole[:REASON_MAX - 3] + "..."


def unsaid(finding: str, action: str) -> str:
    """`finding` without the `; action: <action>` at its end (resultsfile.first_failure's) when
    the reason names that same action after it: `X; action: reboot the node -> reboot the
    node` says it twice."""
    return finding.removesuffix(f"{ACTION_SAID}{action}")


def step_reason(run_id: str, finding: str, action: str) -> str:
    """The reason of a node being remediated: `gpuprov <run>: remediate: <finding> -> <action>`."""
    return reason(run_id, f"{unsaid(finding, action)} -> {action}")
