"""The reason a remediation writes (a Slurm drain's, an SSH host's quarantine mark's), its one
owner: `gpuprov <run>: remediate: <text>`, one printable line, cut as every reason gpuprov
writes. The shape of a drain of gpuprov's (scheduler/slurm/nodes.GPUPROV_REASON knows it as
ours), with the word that marks it as a remediation's (the breaker counts those as out).
"""
from __future__ import annotations

import re

from validate.shared import DRAIN_PREFIX
from validate.shared import DRAIN_REASON_MAX as REASON_MAX

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
