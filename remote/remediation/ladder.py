"""The ladder of actions, as a table: one row per action, from the least disruptive up.

    reset the GPU  --(refused or failed)-->  reboot the node  --(failed)-->  drain and replace (RMA)

Each row: the action (validate/actions.py's words), the `Target` method that carries it out,
whether the node's evidence is gathered first (an RMA needs it; a reboot may erase what the
evidence holds: the kernel's ring buffer with the Xid lines, the GPU's volatile error counts,
so it comes before a reboot too), the next step when this one does not help, and its
timeout's default with its source.

After the last row's step (an RMA: evidence, then left out) the node stays out of service with
the escalation in its reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from validate.actions import DRAIN_RMA, REBOOT_NODE, RESET_GPU

from ..ground.reboots import REBOOT_TIMEOUT_S as REBOOT_DEFAULT_S


@dataclass(frozen=True)
class Rung:
    action: str
    method: str  # the Target method ("" for an RMA: evidence, then left out)
    evidence_first: bool
    next: Optional[str]  # the action after this one; None: the last
    timeout_s: float
    timeout_source: str


# `nvidia-smi -r` returns once the reset is done or refused (it takes seconds on an idle GPU);
# 120 s is chosen, a bound for a driver that hangs. A reboot: the reboot kind's own default
# (remote/ground/reboots.py, its one owner).
LADDER: dict[str, Rung] = {rung.action: rung for rung in (
    Rung(RESET_GPU, "reset_gpu", False, REBOOT_NODE, 120.0, "chosen"),
    Rung(REBOOT_NODE, "reboot", True, DRAIN_RMA, float(REBOOT_DEFAULT_S), "the reboot kind's default"),
    Rung(DRAIN_RMA, "", True, None, 0.0, "nothing waited for"),
)}
REBOOT_TIMEOUT_S = LADDER[REBOOT_NODE].timeout_s


def rung(action: str) -> Rung:
    return LADDER[action]


def next_step(action: str) -> Optional[str]:
    """The action after `action` on the ladder (None after the last)."""
    return LADDER[action].next


def steps_from(action: str) -> list[str]:
    """`action` and every step after it, in order."""
    out: list[str] = []
    current: Optional[str] = action
    while current is not None:
        out.append(current)
        current = LADDER[current].next
    return out
