"""One host's side of a run: its connection, run log, facts, template context and result, and
the reporter its lines go to. A job (`engine/jobs/`, the `Job` protocol here) gets a
`HostSession` and works only through it; the session knows what every job may need (the
connection, facts, vars and context, the result). The fleet cache as the host reaches it is
`cache.HostCache`; the facts round trip, probes riding along, is `gather.round_trip`; a reboot
is a command type (`jobs/reboot.py`).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Optional, Protocol

from ..config.inventory import Host, Inventory
from ..config.recipe import Recipe
from ..config.templating import resolve_vars
from ..ground.errors import (
    ConnectionLost,
    GpuprovError,
    HostError,
    Interrupted,
    TemplateError,
    Unreachable,
)
from ..ground.runfolder import PROVISION_LOG, run_dir
from ..kinds import Probe
from ..output.recap import Reporter
from ..output.runlog import Redactor, RunLog
from ..transport.connection import BaseConnection
from . import facts as facts_mod
from .cache import CacheLink, HostCache
from .fact_shapes import FactShapeError, check_fact_shapes
from .gather import round_trip
from .options import RunOptions
from .results import HostResult, Outcome, StepResult, StepStatus
from .varlayers import VarPositions, Vars, layered_vars


class Job(Protocol):
    """What a run does on each host (`jobs/`): one object serves every host of a run."""

    @property
    def outcome(self) -> Optional[str]:
        """The name of the `Outcome` this job concludes with (the recap's extra column and
        the `--json` key), or None when its steps say everything."""

    def __call__(self, session: HostSession) -> None:
        """Do the job on one host; raise only what `HostSession.run_job` handles."""


class _VarsFailed(Exception):
    """A var does not render for this host (`{{ 1 // 0 }}`, a bad filter argument)."""


class HostSession:
    """One host's connection, run log, facts, context and result for the length of one job."""

    def __init__(self, host: Host, inventory: Inventory, options: RunOptions, reporter: Reporter,
                 redact: Redactor, connect: Callable[[Host], BaseConnection],
                 cancel: threading.Event, var_facts: Optional[set[str]],
                 cache_link: Optional[CacheLink] = None):
        self.host = host
        self.inventory = inventory
        self.options = options
        self.reporter = reporter
        self.redact = redact
        self.cancel = cancel
        # The facts the vars can read: a job building the context must gather at least these.
        self.var_facts = var_facts
        self._connect = connect
        self._conn: Optional[BaseConnection] = None
        self.result = HostResult(host.name)
        logs = options.logs_dir
        self.log = RunLog(None if logs is None else run_dir(logs, host.name, options.run_id) / PROVISION_LOG, redact)
        self.facts: dict[str, Any] = {}
        self.context: dict[str, Any] = {}
        # The fleet cache as this host reaches it (engine/cache.py).
        self.cache = HostCache(self, cache_link or CacheLink(connect))
        # Read-only snippets a job adds to the facts round trip (the stack manifest), and
        # their answers: saves a round trip when the run changes nothing.
        self.ride_along: list[str] = []
        self.ride_along_answers: dict[str, Probe] = {}
        # Why the host stopped answering in time during the job ("" : it did not): what is
        # left of the run (the stack manifest) does not ask such a host again.
        self.stalled = ""
        self._warned: set[str] = set()  # `warn(once=...)` keys already shown

    # ------------------------------------------------------------------ a job from start to end
    def run_job(self, job: Job) -> HostResult:
        """Connect, run `job`, close; whatever happens, the host's result (one failing host
        never stops the others: even a bug fails this host only)."""
        started = time.monotonic()
        self.log.event(f"run {self.options.run_id} on {self.host.name} "
                       f"({'check' if self.options.check else 'apply'})")
        try:
            self.open()
            job(self)
        except (Unreachable, ConnectionLost) as exc:
            self.result.unreachable = True
            self.result.message = str(exc)
            self.reporter.unreachable(self.host.name, str(exc))
            self.log.event(f"{'unreachable' if isinstance(exc, Unreachable) else 'connection lost'}"
                           f": {exc}")
        except Interrupted:
            self.result.interrupted = True
            self.result.message = "interrupted"
            self.log.event("interrupted")
        except _VarsFailed as exc:
            self.fail("vars", str(exc))
        except FactShapeError as exc:
            self.fail("facts", str(exc))
        except HostError as exc:  # an answer refused (facts over the output limit), a timeout
            self.fail("host", str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug must fail this host, not the run
            self.fail("internal error", f"{type(exc).__name__}: {exc}")
        finally:
            self.close()
            self.result.elapsed_s = time.monotonic() - started
            self.log.event(f"done in {self.result.elapsed_s:.2f}s: {self.result.counts()}"
                           f"{' unreachable' if self.result.unreachable else ''}")
            self.log.close()
        return self.result

    # ------------------------------------------------------------------ connection
    def open(self) -> None:
        self._conn = self._connect(self.host)
        self.log.event(f"connected: {self._conn.describe()}")

    @property
    def conn(self) -> BaseConnection:
        """The open connection (a job runs only once it is open)."""
        if self._conn is None:
            raise RuntimeError(f"no open connection to {self.host.name}")
        return self._conn

    def close(self) -> None:
        self.cache.forget()  # a reopened connection (after a reboot) looks for it again
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def check_cancel(self) -> None:
        """Raise `Interrupted` once the run is cancelled (called between steps)."""
        if self.cancel.is_set():
            raise Interrupted("interrupted")

    def remove_folder(self, folder: str, timeout: float, become: bool = False) -> None:
        """`rm -rf FOLDER` (`folder`: a shell word) on the host, whatever stopped the job: not
        cancellable, since the Ctrl-C, SIGTERM or timeout that stopped the job's command stopped
        its own clean-up with it; bounded by `timeout`, a failure logged, never raised. With
        `become`, as the host's become user."""
        try:
            self.conn.run(f"rm -rf {folder}", timeout=timeout, cancellable=False,
                          become=become and self.host.become,
                          become_user=self.host.become_user if become else None)
        except GpuprovError as exc:
            self.log.event(f"could not remove {folder} on the host: {exc}")

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, or raise `Interrupted` as soon as the run is cancelled."""
        if self.cancel.wait(seconds):
            raise Interrupted("interrupted")

    # ------------------------------------------------------------------ facts and vars
    def gather_facts(self, names: Optional[set[str]],
                     probes: Callable[[], Iterable[str]] = tuple) -> dict[str, Probe]:
        """Gather the facts `names` (None: all) into `facts`. When that takes a round trip,
        the read-only sh snippets `probes()` returns ride along; their answers come back by
        snippet (a probe that got none is absent)."""
        if names == set() and self.host.user and not self.host.is_local:
            # Nothing reads a fact and the login user is known: save the round trip.
            uid = 0 if self.host.user == "root" else -1
            self._store_facts(f"user={self.host.user}\nuid={uid}")
            return {}
        script = facts_mod.script(self.host.python, names, over_ssh=not self.host.is_local)
        early = list(dict.fromkeys([*probes(), *self.ride_along]))
        fact_lines, answers = round_trip(self.conn, script, early, self.ride_along,
                                         self.inventory.timeouts.command, self.log)
        self._store_facts(fact_lines)
        if self.facts["uid"] == 0:
            self.conn.is_root = True
        self.ride_along_answers.update((s, answers[s]) for s in self.ride_along if s in answers)
        return answers

    def _store_facts(self, lines: str) -> None:
        self.facts = facts_mod.parse(lines)
        check_fact_shapes(self.facts)  # what the host answered is untrusted: refuse odd shapes
        self.facts.update(self.options.facts_override)
        self.result.facts = self.facts

    def vars(self, recipe: Optional[Recipe[Any]] = None) -> tuple[Vars, VarPositions]:
        """This host's raw vars and where each is defined (see `layered_vars`)."""
        return layered_vars(self.inventory, self.host, self.options.extra_vars, recipe)

    def build_context(self, recipe: Optional[Recipe[Any]] = None) -> None:
        """Resolve the vars with the gathered facts into the context every template sees:
        the vars, `vars`, `host` and `facts`. A var that does not render fails the host."""
        raw, where = self.vars(recipe)
        base = {"host": self.host.name, "facts": self.facts}
        try:
            values = resolve_vars(raw, base, where)
        except TemplateError as exc:
            raise _VarsFailed(str(exc)) from None
        self.note_secrets(values)
        self.context = dict(values)
        self.context.update(base, vars=values)

    def note_secrets(self, values: Vars) -> None:
        """Mask the values of the inventory's secret vars from here on."""
        for name in self.inventory.secrets:
            if name in values:
                self.redact.add(str(values[name]))

    def warn(self, text: str, once: str = "") -> None:
        """A warning for this host: shown, logged, and kept in its result. With `once`, the
        first warning of that key is shown and kept, later ones only logged (the same notice
        from several steps: every apt step of a host whose apt lock is missing)."""
        if once and once in self._warned:
            self.log.event(f"warning (shown once): {text}")
            return
        if once:
            self._warned.add(once)
        self.reporter.warning(self.host.name, text)
        self.log.event(f"warning: {text}")
        self.result.warnings.append(text)

    # ------------------------------------------------------------------ results
    def record(self, step: StepResult) -> None:
        """Add a step's result and show its line."""
        self.result.steps.append(step)
        self.reporter.step(self.host.name, step)

    def fail(self, name: str, message: str) -> None:
        """Record a failed pseudo-step (`vars`, `internal error`): the host stops here."""
        self.record(StepResult(name, StepStatus.FAILED, message=message))
        self.log.event(f"{name}: {message}")

    def conclude(self, outcome: Outcome) -> None:
        """The job's verdict beyond its steps (see `Outcome`)."""
        self.result.outcome = outcome
