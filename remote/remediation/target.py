"""What the remediation loop asks of the nodes' route: one `Target` per run, over the SSH hosts
of an inventory (ssh.py) or a cluster's nodes through its scheduler (slurm.py). The loop calls
it in batches (every node of a wave at once: a cluster runs one job for a wave, not one per
node) and never blocks one node on another's failure: each call answers per node.

Order per wave: `out_now` (breaker) -> `take_out` -> `evidence` (RMA, or a reboot that may
erase it) -> `reset_gpu` / `reboot` -> `revalidate` -> `put_back` (passed) or the next step,
and after the last step `leave_out`. `close` last, in every case.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol


@dataclass(frozen=True)
class Sick:
    """A node whose latest verdict names an action (validate/actions.py words)."""

    node: str
    run_id: str   # the run of that verdict
    finding: str  # `check: finding`, one line, as the drain reason and the recap say it
    action: str


@dataclass(frozen=True)
class Outcome:
    """What one call did to one node: `ok`, or not with `detail` (one line, untrusted text of
    the host's already made safe); `escalate`: refused in a way that calls for the next step
    at once (a GPU reset refused because a process holds the GPU)."""

    ok: bool
    detail: str = ""
    escalate: bool = False


@dataclass(frozen=True)
class Revalidation:
    """A node's re-validation: passed or not, in which run folder, and the finding and action
    of its verdict when it did not pass (empty when it passed)."""

    ok: bool
    run_id: str
    finding: str = ""
    action: str = ""


@dataclass(frozen=True)
class OutNow:
    """The breaker's inputs: the nodes out for remediation now (a remediation's take-out, or
    held in a reservation), and how many nodes the pool holds (for `--max-out P%`)."""

    out: frozenset[str]
    pool: int


class Target(Protocol):
    """One remediation run's nodes. Each method answers for every node it was given (a node
    missing from the answer counts as failed with "no answer")."""

    @property
    def name(self) -> str: ...  # for messages: "ssh" or the scheduler's key

    def out_now(self) -> OutNow:
        """Who is out for remediation now, and the pool's size."""

    def taken_by_someone_else(self, nodes: list[str]) -> dict[str, str]:
        """The nodes of `nodes` taken out of service by someone else (an admin's drain): node
        -> that reason. The loop never touches them."""

    def take_out(self, reasons: dict[str, str]) -> dict[str, Outcome]:
        """Take each node out of service with its reason (a drain on Slurm; a quarantine mark
        over SSH)."""

    def evidence(self, nodes: list[str]) -> dict[str, Outcome]:
        """Gather each node's evidence for a replacement (remote/evidence/) before an action
        that may erase it."""

    def reset_gpu(self, nodes: list[str]) -> dict[str, Outcome]:
        """Reset each node's GPUs (`nvidia-smi -r`), refused with `escalate` when a process
        holds a GPU."""

    def reboot(self, nodes: list[str], reasons: dict[str, str], timeout_s: float) -> dict[str, Outcome]:
        """Reboot each node and wait until it is back (a new boot id, or the scheduler says it
        rebooted), at most `timeout_s`."""

    def revalidate(self, nodes: list[str], run_id: str) -> dict[str, Revalidation]:
        """Validate each node again with its profile, as `gpuprov validate` does, into
        `<logs>/<node>/<run_id>/`; the node stays out of service for any other work."""

    def put_back(self, nodes: list[str]) -> dict[str, Outcome]:
        """Return each node to service (resume; remove the quarantine mark)."""

    def leave_out(self, reasons: dict[str, str]) -> dict[str, Outcome]:
        """Keep each node out with this reason (the escalation, or the RMA), replacing the
        reason the remediation took it out with."""

    def close(self) -> None:
        """Release what the run holds (a reservation, connections); called last, always."""


def missing(answers: dict[str, Outcome], nodes: list[str]) -> dict[str, Outcome]:
    """`answers` with a failed Outcome for every node of `nodes` it lacks."""
    return {n: answers.get(n) or Outcome(False, "no answer") for n in nodes}


def reason_of(outcome: Optional[Outcome]) -> str:
    return "" if outcome is None else outcome.detail
