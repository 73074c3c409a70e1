"""One host's side of a run: its connection, run log, facts, template context and result, and
the reporter its lines go to. A job (`engine/jobs/`) gets a `HostSession` and works only
through it; the session knows the commands every job may need (gather facts, reboot).
"""
from __future__ import annotations

import threading
import time

import paramiko
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from . import facts as facts_mod
from .fact_shapes import FactShapeError, check_fact_shapes
from ..config.inventory import Host, Inventory
from ..config.recipe import Recipe
from ..config.templating import facts_read, resolve_vars
from ..errors import (CommandTimeout, ConnectionLost, HostError, Interrupted, TemplateError, Unreachable,
                      Where)
from ..kinds import Kind, Probe
from ..output.recap import Reporter
from ..output.runlog import Redactor, RunLog
from ..transport.connection import BaseConnection
from ..transport.forward import RemoteForwards
from ..kinds.route import CacheRoute
from .cache import CacheLink, parse_reach, reach_script
from .probes import batch_script, in_one_write, parse_batch
from .results import HostResult, Outcome, StepResult, StepStatus

if TYPE_CHECKING:
    from .jobs import Job
    from .run import RunOptions

Vars = dict[str, Any]
VarPositions = dict[str, Where]
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


def layered_vars(inventory: Inventory, host: Host, extra_vars: Vars,
                 recipe: Optional[Recipe] = None) -> tuple[Vars, VarPositions]:
    """(raw vars, where each is defined) for `host`, low to high precedence: the recipe's vars
    (its defaults), the inventory's layers (everywhere, groups parents first, the host's),
    `--var`."""
    raw: Vars = dict(recipe.vars) if recipe is not None else {}
    where: VarPositions = dict(recipe.vars_where) if recipe is not None else {}
    for layer, layer_where in inventory.layered_vars(host):
        raw.update(layer)
        where.update(layer_where)
    raw.update(extra_vars)
    return raw, where


def facts_read_by_vars(layers: Iterable[Vars]) -> Optional[set[str]]:
    """Fact names the values of these var layers can read; None means all of them."""
    used: set[str] = set()
    pending: list[Any] = [value for layer in layers for value in layer.values()]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending += value.values()
        elif isinstance(value, list):
            pending += value
        else:
            found = facts_read(value)
            if found is None:
                return None
            used |= found
    return used


def union(*names: Optional[set[str]]) -> Optional[set[str]]:
    """Fact names several readers need together; None (all) wins."""
    total: set[str] = set()
    for part in names:
        if part is None:
            return None
        total |= part
    return total


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
        self.log = RunLog(logs / host.name / options.run_id / "provision.log"
                          if logs is not None else None, redact)
        self.facts: dict[str, Any] = {}
        self.context: dict[str, Any] = {}
        # The fleet cache as this host reaches it: worked out before the first step that
        # downloads, again after the connection is reopened (a reboot ends the forwards).
        self._route: Optional[CacheRoute] = None
        self._route_known = False
        self._forwards: Optional[RemoteForwards] = None
        self._cache_link = cache_link or CacheLink(connect)
        # Read-only snippets a job adds to the facts round trip (the stack manifest), and
        # their answers: saves a round trip when the run changes nothing.
        self.ride_along: list[str] = []
        self.ride_along_answers: dict[str, Probe] = {}

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
        if self._forwards is not None:
            self._forwards.close()
            self._forwards = None
        self._route, self._route_known = None, False
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def check_cancel(self) -> None:
        """Raise `Interrupted` once the run is cancelled (called between steps)."""
        if self.cancel.is_set():
            raise Interrupted("interrupted")

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
        answers: dict[str, Probe] = {}
        result, label, fact_lines, probe_lines = None, "gather facts", "", ""
        if early:
            # The facts script in a subshell, so the probes see none of its functions or vars.
            batch, token = batch_script(list(enumerate(early)))
            try:
                # the probes' own bound; should slow facts need more, they go alone below
                result = self.conn.run(in_one_write(f"(\n{script})\n{batch}"),
                                       timeout=self.inventory.timeouts.command)
            except CommandTimeout as exc:  # a hanging `unless`: facts alone, probes later
                self.log.event(f"facts + {len(early)} probes {exc}; gathering facts alone")
            else:
                steps = len([p for p in early if p not in self.ride_along])
                label = "gather facts" + (f" + {steps} probes" if steps else "")
                cut = result.out.find(token)
                cut = len(result.out) if cut < 0 else cut
                fact_lines, probe_lines = result.out[:cut], result.out[cut:]
                answers = {early[key]: answer
                           for key, answer in parse_batch(probe_lines, token).items()}
        if result is None:
            result = self.conn.run(script, timeout=60)
            fact_lines = result.out
        self.log.command("facts", label, result.rc, result.elapsed_s, probe_lines, result.err)
        result.require_complete("facts")  # a cut answer would parse as wrong facts
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

    def vars(self, recipe: Optional[Recipe] = None) -> tuple[Vars, VarPositions]:
        """This host's raw vars and where each is defined (see `layered_vars`)."""
        return layered_vars(self.inventory, self.host, self.options.extra_vars, recipe)

    def build_context(self, recipe: Optional[Recipe] = None) -> None:
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

    # ------------------------------------------------------------------ the fleet cache
    def through_cache(self, kind: Kind[Any], args: dict[str, Any]) -> dict[str, Any]:
        """A downloading step's rendered `args`, sent through the fleet cache when the
        inventory names one and it answers; as written otherwise (the origin)."""
        if not kind.fetches or self.inventory.cache is None:
            return args
        if not self._route_known:
            self._route = self._find_cache()
            self._route_known = True
        return kind.through_cache(args, self._route) if self._route is not None else args

    def _find_cache(self) -> Optional[CacheRoute]:
        """Ask the cache from the host directly, then over an SSH forward (as `reach` allows);
        say which way it answered, or warn that the downloads go to the origin."""
        cache = self.inventory.cache
        if cache is None or cache.host == self.host.name:
            return None
        tried = []
        route: Optional[CacheRoute] = None
        if cache.reach != "forward":
            route, why = self._ask_cache(cache.address, cache.apt_port, cache.pypi_port, "direct")
            if route is None:
                tried.append(f"direct to {cache.address}: {why}")
        if route is None and cache.reach != "direct":
            try:
                ports = self._forward_to_cache()
            except (HostError, OSError, EOFError, paramiko.SSHException) as exc:
                tried.append(f"SSH forward: {exc or type(exc).__name__}")
            else:
                route, why = self._ask_cache("127.0.0.1", *ports, "SSH forward")
                if route is None:
                    tried.append(f"SSH forward: {why}")
        if route is None:
            self._warn(f"fleet cache {cache.host} does not answer, apt and pip go to the origin "
                       f"({'; '.join(tried)})")
        elif not route.apt_proxy or not route.indexes:
            self._warn(f"fleet cache {cache.host}: "
                       + ("apt-cacher-ng does not answer, apt goes" if not route.apt_proxy
                          else "devpi mirrors no index, pip goes") + " to the origin")
        return route

    def _warn(self, text: str) -> None:
        self.reporter.warning(self.host.name, text)
        self.log.event(f"warning: {text}")
        self.result.warnings.append(text)

    def _ask_cache(self, address: str, apt_port: int, pypi_port: int,
                   via: str) -> tuple[Optional[CacheRoute], str]:
        result = self.conn.run(reach_script(self.host.python, address, apt_port, pypi_port),
                               timeout=60)
        route, why = parse_reach(result.out, address, apt_port, pypi_port, via)
        if route is not None:
            served = ", ".join(filter(None, ["apt" if route.apt_proxy else "",
                                             f"{len(route.indexes)} pip index(es)"
                                             if route.indexes else ""]))
            self.log.event(f"fleet cache: {served} via {via}: "
                           + " ".join(filter(None, [route.apt_proxy, *route.indexes.values()])))
            self.result.cache = via
        return route, why

    def _forward_to_cache(self) -> tuple[int, int]:
        """Ports on the host's loopback that lead to the cache host's two services."""
        cache = self.inventory.cache
        assert cache is not None
        if self._forwards is None:
            target = self._cache_link.conn(self.inventory.hosts[cache.host])
            self._forwards = RemoteForwards(self.conn, target)
        return self._forwards.add(cache.apt_port), self._forwards.add(cache.pypi_port)

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

    # ------------------------------------------------------------------ commands the session knows
    def reboot(self, timeout: float) -> tuple[StepStatus, str]:
        """Reboot the host, reconnect, and wait for a new boot_id: (status, message)."""
        if self.host.is_local:
            return StepStatus.FAILED, ("refusing to reboot: this host is the control machine "
                                       "(connection: local)")
        before = self.conn.run(BOOT_ID, timeout=30).out.strip()
        self.reporter.running(self.host.name, f"rebooting (waiting up to {timeout:g} s)")
        self.log.event(f"reboot: boot_id before {before}")
        try:
            # Detached, so the command returns before sshd goes down with the host.
            self.conn.run("nohup sh -c 'sleep 1; reboot || shutdown -r now' >/dev/null 2>&1 &",
                          become=True, timeout=30)
        except (ConnectionLost, CommandTimeout):
            pass
        self.close()
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        time.sleep(2)
        while time.monotonic() < deadline:
            self.check_cancel()
            try:
                self.open()
                after = self.conn.run(BOOT_ID, timeout=30).out.strip()
                if after and after != before:
                    self.facts["boot_id"] = after
                    self.log.event(f"reboot: back with boot_id {after}")
                    return StepStatus.CHANGED, \
                        f"rebooted in {timeout - (deadline - time.monotonic()):.0f} s"
                last = "still the same boot_id (reboot not started?)"
                self.close()
            except (Unreachable, ConnectionLost, CommandTimeout, EOFError, OSError) as exc:
                # sshd may accept and drop connections while the host comes back
                last = str(exc) or type(exc).__name__
            time.sleep(2)
        raise Unreachable(f"did not come back with a new boot_id within {timeout:g} s after "
                          f"reboot ({last})")
