"""What a scheduler is to gpuprov: a row of the table (`Scheduler`), the cluster one run drives
through it (`Cluster`: list the nodes, plan, resume, validate, drain, release), and what the
route keeps per node (`NodeRecord`), whichever scheduler it came from.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Optional, Protocol, Sequence, TypeVar

from ..engine.jobs.logs import summarize
from ..ground.ages import DEFAULT_MAX_AGE
from ..ground.errors import PullError, Where
from ..ground.runfolder import run_dir
from ..transport.connection import COMMIT_FILE, publish_pull

if TYPE_CHECKING:
    from ..engine.jobs.validate import Validate
    from ..engine.session import HostSession

# How long a run lists a cluster's nodes again while some are kept off only for a moment
# (Scheduler.late_nodes), and how often, when the scheduler says nothing longer (Slurm waits
# its SlurmdTimeout: slurm/late.py). Chosen, not sourced: long enough for a short stall or a
# resume, short enough that a node really going down costs little.
LATE_WAIT_S = 15.0
LATE_POLL_S = 2.0
Listing = TypeVar("Listing")


def list_until_answered(listing: Callable[[], Listing], late: Callable[[Listing], list[str]],
                        say: Callable[[str], None], noun: str,
                        sleep: Callable[[float], None] = time.sleep,
                        wait: Callable[[], tuple[float, str]] = lambda: (LATE_WAIT_S, "")
                        ) -> Listing:
    """`listing()`, asked again every LATE_POLL_S while `late` of it names nodes kept off only
    for a moment, for as long as `wait()` says (seconds and why, asked once, only when a node
    is late; `say` tells so once, naming the scheduler by its `noun`); the last listing."""
    started = time.monotonic()
    listed = listing()
    names = late(listed)
    if not names:
        return listed
    seconds, why = wait()
    deadline = started + seconds
    because = f" ({why})" if why else ""
    say(f"waiting up to {seconds:.0f} s{because} for {', '.join(names)} to answer {noun}")
    while names and time.monotonic() < deadline:
        sleep(LATE_POLL_S)
        listed = listing()
        names = late(listed)
    return listed


class NodeView(Protocol):
    """A node as its scheduler reports it, for the recap and the run's record."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...   # one word for messages, e.g. `IDLE+DRAIN`

    @property
    def reason(self) -> str: ...  # why it is drained or down ('' when it is not)


@dataclass
class Plan:
    """What a run does with the cluster's nodes."""

    validate: list[Any]         # validated (the ones in `resume` among them); NodeView each
    resume: list[Any]           # drained by gpuprov earlier, validated again (--resume-passed)
    skipped: list[tuple[Any, str]]  # not validated, with why
    down: list[tuple[Any, str]]     # cannot run anything now: reported like unreachable hosts


@dataclass
class NodeRecord:
    """What the run learned of one validated node (for the recap and the run's record)."""

    node: NodeView
    verdict: str = "not validated: the job did not start"
    ok: bool = False
    rc: Optional[int] = None
    elapsed_s: float = 0.0
    validate_s: Optional[float] = None
    resumed: bool = False
    judged: bool = False     # its task ran (or its node failed): the verdict is the node's
    drained: str = ""        # the reason it was drained with
    gate_error: str = ""     # why draining it failed
    results: Optional[Path] = None
    extra: dict[str, Any] = field(default_factory=dict)  # the scheduler's own, for the record
    # a sweep gave the node back to real work (preempted mid-job, or taken before its batch
    # started): not validated, and no failure of the node's (not drained, not counted)
    preempted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"state_before": self.node.state, "reason_before": self.node.reason,
                "verdict": self.verdict, "ok": self.ok, "exit_status": self.rc, **self.extra,
                "elapsed_s": round(self.elapsed_s, 3),
                "validate_s": None if self.validate_s is None else round(self.validate_s, 3),
                "taken_back": self.resumed, "preempted": self.preempted,
                "drained_with": self.drained or None, "drain_error": self.gate_error or None}

    def store(self, archive: BinaryIO, rc: Optional[int], dest: Path) -> None:
        """Judge the node from its output folder (`archive`, a gzip tarball as a pull brings
        it), stored into `dest` (logs/<node>/<run>/) as the SSH route stores a host's."""
        self.judged, self.rc = True, rc
        try:
            publish_pull(archive, dest)
        except PullError as exc:
            self.verdict = f"not validated: {exc}"
        else:
            self.results = dest / COMMIT_FILE
            self.verdict, self.ok = summarize(self.results, rc)


@dataclass(frozen=True)
class Sweep:
    """`validate --sweep`: the idle nodes only, as preemptible low-priority work, in batches;
    a node whose latest validation with a verdict started less than `max_age_s` ago is
    skipped (`max_age`: as the user wrote it, for messages)."""

    max_age_s: float
    max_age: str = DEFAULT_MAX_AGE


# What runs a command on the login node inside the run's allocation: (command, timeout, its
# stdin) -> (exit status, stdout, stderr).
StepRunner = Callable[[str, float, bytes], tuple[int, str, str]]


class AfterStep(Protocol):
    """A second step in the validation's own allocation, over the nodes that passed
    (`validate --distributed`): the allocation is held up to `hold_s` after the validation
    step for it; it updates the nodes' records with its verdict."""

    hold_s: float

    def __call__(self, context: "RunContext", records: dict[str, "NodeRecord"],
                 run: StepRunner) -> None: ...


@dataclass
class RunContext:
    """What the route hands a cluster for one run."""

    session: HostSession        # the login node's: its connection, run log, reporter
    validate: Validate          # the SSH route's job: the package, the suite, the timeout
    record: dict[str, Any]      # the run's record (logs/<cluster>/<run>/<Scheduler.record>)
    incomplete: bool = False    # set by the cluster: the job did not end by itself (timed out)
    no_task: str = ""           # set by the cluster: why no node's task ran, in its words
    sweep: Optional[Sweep] = None  # `validate --sweep`: `Scheduler.open` gives its sweep
    after_step: Optional["AfterStep"] = None  # `validate --distributed` (remote/distributed/)

    @property
    def run_id(self) -> str:
        return self.session.options.run_id

    def timeout(self) -> float:
        """The job's bound: the validate job's own, else the inventory's timeouts.command."""
        return self.validate.timeout or self.session.inventory.timeouts.command

    def node_folder(self, node: str) -> Path:
        """Where a node's results go: logs/<node>/<run>/, as a host's."""
        return run_dir(self.validate.logs_dir, node, self.run_id)


def natural_order(name: str) -> list[Any]:
    """n2 before n10."""
    # ASCII digits only: a node's name is Slurm's answer, and int() refuses some of what \d and
    # str.isdigit() take ("²"); re.split puts the digit runs at the odd places
    return [int(p) if i % 2 else p for i, p in enumerate(re.split(r"([0-9]+)", name))]


class RouteFailed(Exception):
    """The cluster could not do what was asked: the login node's row fails with this."""


class Cluster(Protocol):
    """One run's view of a cluster through its scheduler, on the login node's session. The
    route calls, in order: `list_nodes`, `plan`, `resume` (only when the run gates:
    --drain-failed or --resume-passed), `validate`, `drain`, then `release` in every case.
    Each raises `RouteFailed` when the scheduler cannot do it, `InputError` (exit status 2) when
    the inventory asked for something the cluster has not."""

    def list_nodes(self) -> Sequence[NodeView]:
        """The nodes the inventory entry names, as the scheduler reports them now."""

    def plan(self, nodes: Sequence[NodeView], resume_passed: bool) -> Plan:
        """Which nodes are validated, taken back (drained by gpuprov, with --resume-passed),
        skipped (drained by anyone else: left alone) and down."""

    def resume(self, nodes: list[NodeView], hold: list[NodeView]) -> None:
        """Hold every node of `hold` for this run only (no other work lands on them until
        `release`), then resume `nodes`, drained by gpuprov earlier, so they can be validated."""

    def validate(self, records: dict[str, NodeRecord]) -> None:
        """Validate the planned nodes (the keys), each as the SSH route validates a host (the
        package, `python3 -m validate`), and fill in each node's record (`NodeRecord.store`
        judges it from its results; `judged` stays False for a node whose task never ran)."""

    def drain(self, records: dict[str, NodeRecord]) -> None:
        """Drain each of these nodes (failed, or taken back and not passed), with a reason of
        the scheduler's that says what failed (a node whose task never ran: the reason it had
        before it was taken back); set each record's `drained` (the reason) or `gate_error`."""

    def release(self) -> None:
        """End the run's hold on the nodes (called last, even after Ctrl-C)."""


class Scheduler(Protocol):
    """A row of `SCHEDULERS`: the inventory key that makes a host a cluster's login node
    (`key:` beside `address:`), the reader of that key's settings, and how to open a run."""

    @property
    def key(self) -> str: ...

    @property
    def noun(self) -> str: ...    # how messages name it: "validated through Slurm"

    @property
    def record(self) -> str: ...  # the run's record, logs/<cluster>/<run>/<record>: set in
    # `SCHEDULERS`, the row registers it with the run folder (a pull refuses it, the report
    # reads a folder holding it as the cluster's)

    def read_settings(self, spec: Any, where: Where, host: str) -> Any:
        """The host's settings from its `key:` mapping; `InputError` (file:line) at a flaw,
        before any host is contacted."""

    def open(self, settings: Any, context: RunContext) -> Cluster:
        """The cluster behind the login node of `context.session`, for one run; with
        `context.sweep`, its sweep of idle nodes (`InputError` where it has none)."""

    def check_sweep(self, settings: Any) -> None:
        """`InputError` (file:line) when these settings cannot run `validate --sweep` (Slurm:
        no `sweep_partition`), before any host is contacted."""

    def drain_script(self, settings: Any, findings: dict[str, str], run_id: str) -> str:
        """A script for the login node that drains each node of `findings` with a reason of
        the scheduler's made of the run and the finding (never a node drained by someone
        else), outside a validation run (`gpuprov fabric --drain-failed`); run with the
        host's `become`, its output read by `drained`."""

    def drained(self, out: str) -> dict[str, tuple[int, str]]:
        """Node -> (exit status, what it said) from `drain_script`'s output."""

    def nodes_script(self, settings: Any) -> str:
        """A script for the login node that lists the nodes of the inventory entry's
        partition (and expands the nodes it names, if it does), read by `usable_nodes`
        (`gpuprov fabric` on a cluster)."""

    def usable_nodes(self, settings: Any, out: str) -> list[tuple[str, str]]:
        """(name, address) of each node `nodes_script` listed that can run a job now (not
        drained, down or failing), only those the inventory entry names when it names some,
        in the scheduler's order; what the login node printed is untrusted: names and
        addresses are checked. `InputError` (file:line) when the entry names a node the
        cluster has not, or one outside the partition (as `Cluster.list_nodes`)."""

    def late_nodes(self, settings: Any, out: str) -> list[str]:
        """The nodes `nodes_script` listed that are kept off only for a moment (Slurm: a
        missed ping), worth listing again for a few seconds before they are left out."""

    def late_wait_script(self, settings: Any) -> str:
        """A script for the login node whose output `late_wait` reads."""

    def late_wait(self, out: str) -> tuple[float, str]:
        """How long to wait for late nodes (seconds, and why in a few words), from
        `late_wait_script`'s output (untrusted)."""

    def allocate_script(self, settings: Any, nodes: list[str], job_name: str) -> str:
        """A script for the login node that takes one allocation (one job named `job_name`)
        of `nodes` and returns once it is granted, leaving it held; `allocated` reads its
        output (stdout and stderr together)."""

    def allocated(self, out: str) -> Optional[str]:
        """The allocation's id from `allocate_script`'s output (untrusted), None when it
        gave none."""

    def on_node(self, settings: Any, node: str, script: str, allocation: str) -> str:
        """A script for the login node that runs `script` on `node` as a step of the
        allocation `allocation` (one task; steps of it may run at once on a node), its output
        passed through line by line."""

    def cancel_script(self, settings: Any, job_name: str) -> str:
        """A script for the login node that cancels the user's jobs named `job_name`: a job
        whose client (srun) was stopped hard stays allocated otherwise."""
