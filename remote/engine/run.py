"""The pool: one job run on many hosts at once, each host in its own `HostSession` on its own
connection, at most `forks` at a time; one host failing never stops the others. Ctrl-C (or
SIGTERM, which the command line turns into one) cancels the run: running commands are stopped
on their hosts and connections still opening give up at once.
"""
from __future__ import annotations

import functools
import gc
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterable, Optional

from ..config.inventory import Host, Inventory
from ..ground.errors import GpuprovError, Interrupted
from ..ground.runfolder import NOT_STARTED, PROVISION_LOG, run_dir
from ..output.recap import Reporter
from ..output.runlog import Redactor, RunLog
from ..transport.connection import BaseConnection, KnownHosts, connection_for
from .cache import CacheLink
from .options import RunOptions as RunOptions  # re-exported: the command line builds it
from .results import HostResult
from .rollout import Rollout, RolloutState
from .session import HostSession, Job
from .varlayers import facts_read_by_vars


class RunInterrupted(GpuprovError):
    """Ctrl-C or SIGTERM: `results` holds what every host got to."""

    def __init__(self, results: dict[str, HostResult]):
        super().__init__("interrupted")
        self.results = results


class Run:
    """Hosts of one inventory, the options of one run, and where its lines go."""

    def __init__(self, inventory: Inventory, hosts: list[Host], options: RunOptions,
                 reporter: Reporter, redact: Redactor):
        self.inventory = inventory
        self.hosts = hosts
        self.options = options
        self.reporter = reporter
        self.redact = redact
        for host in inventory.hosts.values():  # jump hosts' too: every password is masked
            redact.add(host.password)
            redact.add(host.become_password)
        self.cancel = threading.Event()
        # Connections still opening: a cancel aborts them rather than wait out their timeouts.
        self._opening: set[BaseConnection] = set()
        self._opening_lock = threading.Lock()
        # The hosts whose session a pool worker began (under `_opening_lock`, against a
        # cancel): only a host not in it was never started.
        self.started: set[str] = set()
        self.known_hosts = KnownHosts(inventory.known_hosts, inventory.host_key_policy)
        # Only the facts something can read are gathered: the vars' share, worked out once.
        layers = [inventory.vars, options.extra_vars]
        layers += [g.vars for g in inventory.groups.values()]
        layers += [h.vars for h in inventory.hosts.values()]
        self.var_facts = facts_read_by_vars(layers)
        # The hosts that reach the fleet cache through a forward share one connection to it.
        self.cache_link = CacheLink(self.connect)
        self.rollout: Optional[RolloutState] = None  # a rollout's batches, once `roll_out` ran

    def execute(self, job: Job, hosts: Optional[list[Host]] = None,
                into: Optional[dict[str, HostResult]] = None) -> dict[str, HostResult]:
        """Run `job` on every host (or on `hosts`); return {name: HostResult} in inventory
        order, each result also put in `into` as it is collected (a rollout keeps them there).

        Ctrl-C at any point (as hosts are handed to the pool, as their results are awaited,
        as the pool is closed) stops the hosts, drops those not begun and waits for every
        worker before `RunInterrupted` is raised: no thread goes on running a host after it."""
        hosts = self.hosts if hosts is None else hosts
        results: dict[str, HostResult] = {} if into is None else into
        _freeze_loaded_objects()
        workers = max(1, min(self.options.forks, len(hosts)))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="host")
        futures: dict[str, Future[Optional[HostResult]]] = {}
        try:
            for host in hosts:
                futures[host.name] = pool.submit(self._run_host, host, job)
            for name, future in futures.items():
                self._keep(results, name, future)
            pool.shutdown(wait=True)
            self.cache_link.close()
        except BaseException as exc:
            self._settle(pool, futures, results)
            if not isinstance(exc, KeyboardInterrupt):
                raise  # a bug: the workers are stopped and joined all the same
            interrupted = dict(results)
            for host in hosts:  # begun without a result, or never begun: interrupted
                interrupted.setdefault(host.name, HostResult(host.name, interrupted=True,
                                                             message="interrupted"))
                if host.name in self.started:
                    results.setdefault(host.name, interrupted[host.name])
            raise RunInterrupted({h.name: interrupted[h.name] for h in hosts}) from None
        return {h.name: results[h.name] for h in hosts}

    def _run_host(self, host: Host, job: Job) -> Optional[HostResult]:
        """A pool worker's work for one host: its session, from start to end; None when the
        run was cancelled before it began (nothing was done for the host)."""
        with self._opening_lock:
            if self.cancel.is_set():
                return None
            self.started.add(host.name)  # from here on, the host's run folder is its own
        return self.session(host).run_job(job)

    @staticmethod
    def _keep(results: dict[str, HostResult], name: str,
              future: Future[Optional[HostResult]]) -> None:
        result = future.result()
        if result is not None:
            results[name] = result

    def _settle(self, pool: ThreadPoolExecutor, futures: dict[str, Future[Optional[HostResult]]],
                results: dict[str, HostResult]) -> None:
        """After Ctrl-C: cancel the run and the hosts not begun, wait for every worker, keep
        the results of the hosts that ended. Another Ctrl-C meanwhile only cancels again: the
        workers are joined whatever comes."""
        while True:
            try:
                self.stop()
                pool.shutdown(wait=True, cancel_futures=True)
                for name, future in futures.items():
                    if name not in results and future.done() and not future.cancelled():
                        self._keep(results, name, future)
                self.cache_link.close()
                return
            except KeyboardInterrupt:
                continue

    def roll_out(self, job: Job, rollout: Rollout) -> dict[str, HostResult]:
        """Run `job` batch after batch (`rollout`): each batch's hosts end their job (the
        recipe, then the validation) before the next batch starts; the first batch whose
        failures exceed the limit stops the run, and the hosts after it are never contacted:
        their results say `not_started` and why (`self.rollout` has the batches). Ctrl-C
        leaves the hosts not begun (in the batches after, or in the batch under way)
        `not_started` too; a host that began is never one of them."""
        by_name = {h.name: h for h in self.hosts}
        batches = rollout.batches(list(by_name))
        self.rollout = state = RolloutState(batches)
        results: dict[str, HostResult] = {}
        number = 0
        try:
            for number, batch in enumerate(batches, 1):
                shown = ", ".join(batch[:3]) + (f", ... ({len(batch)} hosts)" if len(batch) > 3 else "")
                self.reporter.note(f"batch {number} of {len(batches)}: {shown}")
                self.execute(job, [by_name[name] for name in batch], into=results)
                failed = [name for name in batch if not results[name].ok]
                reason = rollout.stop_reason(batch, failed, number, len(batches))
                if reason and number < len(batches):
                    state.stopped_after, state.reason = number, reason
                    self.reporter.note(f"rollout stopped: {reason}")
                    self._not_started(results, by_name, reason)
                    break
        except (RunInterrupted, KeyboardInterrupt):  # in a batch, or between two
            self.stop()  # `results` holds what the hosts that began got to
            self._not_started(results, by_name, "the run was interrupted in batch "
                              f"{number} of {len(batches)}")
            raise RunInterrupted({name: results[name] for name in by_name}) from None
        return {name: results[name] for name in by_name}

    def _not_started(self, results: dict[str, HostResult], names: Iterable[str],
                     reason: str) -> None:
        """The hosts of `names` without a result: those never begun (`started`) were never
        contacted, and a result and a run log say why; one that began has lost its result to
        a Ctrl-C, and is interrupted. A run folder the host's run wrote in never gets the
        NOT_STARTED note (the report would hide that run)."""
        for name in names:
            if name in results:
                continue
            if name in self.started:
                results[name] = HostResult(name, interrupted=True, message="interrupted")
                continue
            results[name] = HostResult(name, not_started=reason)
            if self.options.logs_dir is None:
                continue
            folder = run_dir(self.options.logs_dir, name, self.options.run_id)
            if folder.is_dir() and any(folder.iterdir()):
                continue  # something of the host's own run is there
            log = RunLog(folder / PROVISION_LOG, self.redact)
            log.event(f"run {self.options.run_id} on {name}: not started, never contacted: "
                      f"{reason}")
            log.close()
            (folder / NOT_STARTED).write_text(reason + "\n", encoding="utf-8")

    def session(self, host: Host) -> HostSession:
        return HostSession(host, self.inventory, self.options, self.reporter, self.redact,
                           self.connect, self.cancel, self.var_facts, self.cache_link)

    def connect(self, host: Host) -> BaseConnection:
        """An open connection to `host`; `Interrupted` once the run is cancelled."""
        conn = connection_for(host, self.inventory.hosts, self.inventory.timeouts,
                              self.known_hosts, self.options.become_password)
        conn.cancel = self.cancel  # a cancelled run stops the host's running command
        with self._opening_lock:
            if self.cancel.is_set():
                raise Interrupted("interrupted")
            self._opening.add(conn)
        try:
            conn.open()
        finally:
            with self._opening_lock:
                self._opening.discard(conn)
        if self.cancel.is_set():  # cancelled as it opened: its socket may be shut already
            conn.close()
            raise Interrupted("interrupted")
        return conn

    def stop(self) -> None:
        """Cancel the run: hosts stop their running commands, and opening connections give up
        at once instead of waiting out their connect, banner or login timeouts."""
        with self._opening_lock:
            self.cancel.set()
            opening = list(self._opening)
        for conn in opening:
            conn.abort()


@functools.lru_cache(maxsize=None)
def _freeze_loaded_objects() -> None:
    """Keep what is loaded before the first run (modules, the recipe, the inventory) out of
    Python's cyclic garbage collector: a full collection otherwise walks all of it again, and
    64 hosts allocate enough to trigger one (22 ms of CPU in the bench's 64-host converged
    re-run, timed with gc.callbacks: 0.35 ms a host). Once per process: objects frozen are
    never freed."""
    gc.freeze()
