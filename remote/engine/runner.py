"""The runner: a recipe applied to many hosts at once, each host on its own connection.

Per host, in order: connect; gather facts (one round trip); resolve vars; evaluate `when` and
render every selected step; send all their probes as one script; then walk the steps: a step
whose probe shows its target state reports `ok` and sends nothing, others run only the commands
their kind planned. The probes of steps that read no fact (in `when`, the probed arguments,
`creates`, `unless`) travel with the facts script, so a converged host usually costs connect +
one round trip. After a change the probes of the steps that follow are stale, so they are sent
again (one round trip) before the next step that needs them. Notified handlers run once at the
end.

Hosts run in a thread pool bounded by `forks`; one host failing never stops the others.
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from . import facts as facts_mod
from ..errors import GpuprovError
from ..transport.connection import (BecomeError, CommandTimeout, ConnectionLost, Interrupted, Unreachable,
                         connection_for)
from ..transport.hostkeys import KnownHosts
from ..config.inventory import Host, Inventory
from .probes import batch_script, parse_batch
from ..output.recap import Reporter
from ..config.recipe import Recipe, Step, facts_used
from ..output.runlog import Redactor, RunLog
from ..kinds import PlanError
from ..fileio import write_atomic
from ..config.templating import (TemplateError, evaluate, fact_dependent_vars, names_in, render_shell,
                         render_text, resolve_vars)

PROBE_SLOTS = ("kind", "creates", "unless")


@dataclass
class StepResult:
    name: str
    status: str  # ok | changed | skipped | failed
    elapsed_s: float = 0.0
    message: str = ""
    commands: list = field(default_factory=list)

    def to_json(self, redact) -> dict:
        return {"name": redact(self.name), "status": self.status,
                "elapsed_s": round(self.elapsed_s, 4), "message": redact(self.message)}


@dataclass
class HostResult:
    name: str
    steps: list = field(default_factory=list)
    unreachable: bool = False
    message: str = ""
    elapsed_s: float = 0.0
    facts: Optional[dict] = None
    validation: Optional[str] = None
    validation_ok: Optional[bool] = None
    interrupted: bool = False

    def counts(self) -> dict:
        counts = {"ok": 0, "changed": 0, "skipped": 0, "failed": 0}
        for step in self.steps:
            counts[step.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        return (not self.unreachable and not self.interrupted
                and not any(s.status == "failed" for s in self.steps)
                and self.validation_ok is not False)

    def to_json(self, redact) -> dict:
        data = dict(self.counts())
        data.update(unreachable=self.unreachable, elapsed_s=round(self.elapsed_s, 3),
                    steps=[s.to_json(redact) for s in self.steps])
        if self.message:
            data["message"] = redact(self.message)
        if self.validation is not None:
            data["validation"] = redact(self.validation)
        if self.interrupted:
            data["interrupted"] = True
        return data


@dataclass
class RunOptions:
    check: bool = False
    tags: Optional[set] = None
    extra_vars: dict = field(default_factory=dict)
    forks: int = 16
    become_password: Optional[str] = None
    logs_dir: Optional[Path] = Path("logs")  # None: keep no provision.log
    run_id: str = ""
    # Facts to use instead of the gathered ones (plans for another distro in check mode).
    facts_override: dict = field(default_factory=dict)
    all_facts: bool = False  # gather every fact, not only those the recipe reads


@dataclass
class _Prepared:
    step: Step
    become: bool = False
    timeout: float = 0.0
    args: dict = field(default_factory=dict)
    skip: str = ""
    error: str = ""
    probes: dict = field(default_factory=dict)   # slot -> snippet
    answers: dict = field(default_factory=dict)  # slot -> Probe
    stale: bool = False


class HostRun:
    """One host's run. `after_steps` (if given) runs with the open connection at the end."""

    def __init__(self, run: "Run", host: Host):
        self.run = run
        self.host = host
        self.result = HostResult(host.name)
        logs = run.options.logs_dir
        self.log = RunLog(logs / host.name / run.options.run_id / "provision.log"
                          if logs is not None else None, run.redact)
        self.conn = None
        self.facts: dict = {}
        self.context: dict = {}
        self.notified: list = []
        # Probe answers that came with the facts, by snippet; good until the first step runs.
        self.early_answers: dict = {}

    # ------------------------------------------------------------------ entry point
    def __call__(self) -> HostResult:
        started = time.monotonic()
        reporter = self.run.reporter
        self.log.event(f"run {self.run.options.run_id} on {self.host.name} "
                       f"({'check' if self.run.options.check else 'apply'})")
        try:
            self.conn = self.run.connect(self.host)
            self.log.event(f"connected: {self.conn.describe()}")
            steps = self.run.recipe.select(self.run.options.tags)
            self.facts = self.gather_facts(steps)
            self.result.facts = self.facts
            self.context = self.build_context()
            if self.run_steps(steps) and self.notified:
                handlers = [h for name, h in self.run.recipe.handlers.items()
                            if name in self.notified]
                self.run_steps(handlers)
            if self.run.after_steps and self.result.ok:
                self.run.after_steps(self)
        except Unreachable as exc:
            self.result.unreachable = True
            self.result.message = str(exc)
            reporter.unreachable(self.host.name, str(exc))
            self.log.event(f"unreachable: {exc}")
        except ConnectionLost as exc:
            self.result.unreachable = True
            self.result.message = str(exc)
            reporter.unreachable(self.host.name, str(exc))
            self.log.event(f"connection lost: {exc}")
        except _Interrupted:
            self.result.interrupted = True
            self.result.message = "interrupted"
            self.log.event("interrupted")
        except _VarsFailed as exc:
            self._fail("vars", str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug must fail this host, not the run
            self._fail("internal error", f"{type(exc).__name__}: {exc}")
        finally:
            if self.conn is not None:
                self.conn.close()
            self.result.elapsed_s = time.monotonic() - started
            self.log.event(f"done in {self.result.elapsed_s:.2f}s: {self.result.counts()}"
                           f"{' unreachable' if self.result.unreachable else ''}")
            self.log.close()
        return self.result

    def _fail(self, name: str, message: str) -> None:
        self.result.steps.append(StepResult(name, "failed", message=message))
        self.run.reporter.step(self.host.name, self.result.steps[-1])
        self.log.event(f"{name}: {message}")

    # ------------------------------------------------------------------ facts and vars
    def gather_facts(self, steps: list) -> dict:
        """The host's facts; the probes of `steps` that need no fact ride along (one trip)."""
        if self.run.fact_names == set() and self.host.user and not self.host.is_local:
            # Nothing reads a fact and the login user is known: save the round trip.
            facts = facts_mod.parse(f"user={self.host.user}\nuid={0 if self.host.user == 'root' else -1}")
            facts.update(self.run.options.facts_override)
            return facts
        script = facts_mod.script(self.host.python, self.run.fact_names,
                                  over_ssh=not self.host.is_local)
        early = self.early_probes(steps)
        result, label, fact_lines, probe_lines = None, "gather facts", "", ""
        if early:
            # The facts script in a subshell, so the probes see none of its functions or vars.
            batch, token = batch_script(list(enumerate(early)))
            try:
                # the probes' own bound; should slow facts need more, they go alone below
                result = self.conn.run(f"(\n{script})\n{batch}",
                                       timeout=self.run.inventory.timeouts.command)
            except CommandTimeout as exc:  # a hanging `unless`: facts alone, probes later
                self.log.event(f"facts + {len(early)} probes {exc}; gathering facts alone")
            else:
                label = f"gather facts + {len(early)} probes"
                cut = result.out.find(token)
                cut = len(result.out) if cut < 0 else cut
                fact_lines, probe_lines = result.out[:cut], result.out[cut:]
                self.early_answers = {early[key]: answer
                                      for key, answer in parse_batch(probe_lines, token).items()}
        if result is None:
            result = self.conn.run(script, timeout=60)
            fact_lines = result.out
        self.log.command("facts", label, result.rc, result.elapsed_s, probe_lines, result.err)
        facts = facts_mod.parse(fact_lines)
        facts.update(self.run.options.facts_override)
        if facts["uid"] == 0:
            self.conn.is_root = True
        return facts

    def early_probes(self, steps: list) -> list:
        """Probe snippets of the steps that can be judged before the facts are known: run
        without become, and neither `when`, the probed arguments, `creates` nor `unless` read a
        fact (directly or through a var). Each snippet once."""
        raw, where = self._layered_vars()
        blocked = fact_dependent_vars(raw) | {"facts", "vars"}
        try:
            values = resolve_vars({n: v for n, v in raw.items() if n not in blocked},
                                  {"host": self.host.name}, where)
        except TemplateError:
            return []  # only a shortcut: build_context reports the var's error
        self._note_secrets(values)
        context = dict(values)
        context.update(host=self.host.name, vars=values)
        snippets: dict = {}
        for step in steps:
            if not step.kind.remote or self._become(step):
                continue
            probed = {k: v for k, v in step.args.items() if k in step.kind.probe_fields}
            reads = set().union(*(names_in(e, expression=True) for e in step.when),
                                names_in([step.creates, step.unless, probed]))
            if reads & blocked:
                continue
            try:
                if all(evaluate(expr, context) for expr in step.when):
                    args = step.kind.render_for_probe(step.args, context)
                    snippets.update(dict.fromkeys(self._probe_snippets(step, args, context).values()))
            except Exception:  # noqa: BLE001 - only a shortcut: prepare() reports the step's error
                continue
        return list(snippets)

    def _layered_vars(self) -> tuple:
        """(raw vars, where each is defined) for this host: recipe, inventory layers, --var."""
        recipe, inventory = self.run.recipe, self.run.inventory
        raw, where = dict(recipe.vars), dict(recipe.vars_where)
        for layer, layer_where in inventory.layered_vars(self.host):
            raw.update(layer)
            where.update(layer_where)
        raw.update(self.run.options.extra_vars)
        return raw, where

    def build_context(self) -> dict:
        raw, where = self._layered_vars()
        base = {"host": self.host.name, "facts": self.facts}
        try:
            values = resolve_vars(raw, base, where)
        except TemplateError as exc:
            raise _VarsFailed(str(exc)) from None
        self._note_secrets(values)
        context = dict(values)
        context.update(base, vars=values)
        return context

    def _note_secrets(self, values: dict) -> None:
        for name in self.run.inventory.secrets:
            if name in values:
                self.run.redact.add(str(values[name]))

    # ------------------------------------------------------------------ steps
    def run_steps(self, steps: list) -> bool:
        """Run `steps` in order; False when one failed (the host stops there)."""
        prepared = [self.prepare(step) for step in steps]
        self.probe(prepared)
        for index, item in enumerate(prepared):
            if self.run.cancel.is_set():
                raise _Interrupted()
            if item.stale and item.probes:
                self.probe(prepared[index:])
            result = self.execute(item)
            self.result.steps.append(result)
            self.run.reporter.step(self.host.name, result)
            if result.status == "changed":
                for name in item.step.notify:
                    if name not in self.notified:
                        self.notified.append(name)
                if not self.run.options.check:  # in check mode nothing really changed
                    for later in prepared[index + 1:]:
                        later.stale = True
            if result.status == "failed":
                return False
        return True

    def prepare(self, step: Step) -> _Prepared:
        item = _Prepared(step=step, become=self._become(step),
                         timeout=step.timeout or self.run.inventory.timeouts.command)
        try:
            for expr in step.when:
                if not evaluate(expr, self.context):
                    item.skip = f"when: {expr}"
                    return item
            item.args = step.kind.render(step.args, self.context)
            if step.kind.remote:
                item.probes = self._probe_snippets(step, item.args, self.context)
        except (TemplateError, PlanError) as exc:
            item.error = str(exc)
        return item

    @staticmethod
    def _probe_snippets(step: Step, args: dict, context: dict) -> dict:
        """{slot: sh snippet} of a step's read-only checks, from its rendered arguments."""
        probes = {}
        snippet = step.kind.probe(args)
        if snippet:
            probes["kind"] = snippet
        if step.creates:
            probes["creates"] = f"test -e {_q(render_text(step.creates, context))}"
        if step.unless:
            probes["unless"] = render_shell(step.unless, context)
        return probes

    def _become(self, step: Step) -> bool:
        return step.become if step.become is not None else self.host.become

    def probe(self, items: list) -> None:
        """Send the probes of `items` as one script per privilege level; store the answers."""
        groups: dict = {False: [], True: []}
        for n, item in enumerate(items):
            if item.skip or item.error:
                continue
            item.stale = False
            item.answers = {}
            for slot, snippet in item.probes.items():
                if not item.become and snippet in self.early_answers:
                    item.answers[slot] = self.early_answers[snippet]
                    continue
                groups[item.become].append((n * len(PROBE_SLOTS) + PROBE_SLOTS.index(slot),
                                            snippet))
        self.early_answers = {}  # from here on, steps may change what they saw
        for become, probes in groups.items():
            if not probes:
                continue
            script, token = batch_script(probes)
            try:
                result = self.conn.run(script, become=become,
                                       timeout=self.run.inventory.timeouts.command)
            except BecomeError as exc:
                for item in items:
                    if item.become == become and item.probes:
                        item.error = str(exc)
                continue
            except CommandTimeout as exc:
                for item in items:
                    if item.become == become and item.probes:
                        item.error = f"probes {exc}"
                continue
            self.log.command("probe", f"{len(probes)} probes{' (become)' if become else ''}",
                             result.rc, result.elapsed_s, result.out, result.err)
            answers = parse_batch(result.out, token)
            for key, answer in answers.items():
                n, slot = divmod(key, len(PROBE_SLOTS))
                items[n].answers[PROBE_SLOTS[slot]] = answer

    def execute(self, item: _Prepared) -> StepResult:
        step = item.step
        started = time.monotonic()
        result = StepResult(self._name(step), "ok")
        try:
            if item.skip:
                result.status, result.message = "skipped", item.skip
            elif item.error:
                result.status, result.message = "failed", item.error
            elif not step.kind.remote:
                ok, message = step.kind.run_local(item.args, self.context)
                result.status, result.message = ("ok", "") if ok else ("failed", message)
            else:
                self._execute_remote(item, result)
        except TemplateError as exc:
            result.status, result.message = "failed", str(exc)
        result.elapsed_s = time.monotonic() - started
        return result

    def _execute_remote(self, item: _Prepared, result: StepResult) -> None:
        step = item.step
        missing = [slot for slot in item.probes if slot not in item.answers]
        if missing:
            result.status = "failed"
            result.message = f"no answer from the {missing[0]} probe (host stopped responding?)"
            return
        if "creates" in item.answers and item.answers["creates"].rc == 0:
            result.message = f"creates: {render_text(step.creates, self.context)} exists"
            return
        if "unless" in item.answers and item.answers["unless"].rc == 0:
            result.message = "unless: command succeeded"
            return
        try:
            commands = step.kind.plan(item.args, step.kind.fact(item.answers.get("kind")))
        except PlanError as exc:
            result.status, result.message = "failed", str(exc)
            return
        if not commands:
            return
        result.commands = [c.shown() for c in commands]
        if self.run.options.check:
            result.status = "changed"
            result.message = "would run: " + "; ".join(c.shown().splitlines()[0] for c in commands)
            return
        if hasattr(step.kind, "run_on_host"):
            result.status, result.message = step.kind.run_on_host(self, item.args)
            return
        # Announce a step only when it is still running after a second: quick ones stay quiet.
        announce = threading.Timer(1.0, self.run.reporter.running, (self.host.name, result.name))
        announce.daemon = True
        announce.start()
        try:
            last = None
            for command in commands:
                last = self._run_command(item, command)
                if last is None or self._failed(step, last):
                    break
        finally:
            announce.cancel()
        self._judge(item, result, last)

    def _judge(self, item: _Prepared, result: StepResult, last) -> None:
        """Status of a step from its last command: failed, changed, or ok (changed_when)."""
        step = item.step
        if last is None:
            result.status = "failed"
            result.message = f"timed out after {item.timeout:g} s"
            return
        if self._failed(step, last):
            result.status = "failed"
            result.message = _failure_text(last)
            return
        changed = True
        if step.changed_when is not None:
            changed = bool(evaluate(step.changed_when, self._result_context(last)))
        result.status = "changed" if changed else "ok"

    def _run_command(self, item: _Prepared, command):
        """Run one command with the step's retries; None when it timed out."""
        step = item.step
        attempts = step.retries + 1
        for attempt in range(attempts):
            try:
                res = self.conn.run(command.script, become=item.become, timeout=item.timeout,
                                    stdin=command.stdin, shell=command.shell)
            except CommandTimeout:
                self.log.command(step.name, command.shown(), None, item.timeout)
                return None
            except Interrupted:
                self.log.event(f"{step.name}: interrupted; stopped on the host: "
                               f"{command.shown().splitlines()[0] if command.shown() else ''}")
                raise
            except BecomeError as exc:
                self.log.event(f"{step.name}: {exc}")
                from ..transport.connection import CommandResult
                return CommandResult(1, b"", str(exc).encode(), 0.0)
            self.log.command(step.name, command.shown(), res.rc, res.elapsed_s, res.out, res.err)
            if not self._failed(step, res) or attempt == attempts - 1:
                return res
            wait = min(step.delay * (2 ** attempt), 60.0)
            self.log.event(f"{step.name}: attempt {attempt + 1}/{attempts} failed "
                           f"(rc={res.rc}); retrying in {wait:g}s")
            if self.run.cancel.wait(wait):
                raise _Interrupted()
        return res

    def reboot(self, timeout: float) -> tuple:
        """Reboot the host, reconnect, and wait for a new boot_id: (status, message)."""
        if self.host.is_local:
            return "failed", ("refusing to reboot: this host is the control machine "
                              "(connection: local)")
        before = self.conn.run("cat /proc/sys/kernel/random/boot_id", timeout=30).out.strip()
        self.run.reporter.running(self.host.name, f"rebooting (waiting up to {timeout:g} s)")
        self.log.event(f"reboot: boot_id before {before}")
        try:
            # Detached, so the command returns before sshd goes down with the host.
            self.conn.run("nohup sh -c 'sleep 1; reboot || shutdown -r now' >/dev/null 2>&1 &",
                          become=True, timeout=30)
        except (ConnectionLost, CommandTimeout):
            pass
        self.conn.close()
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        time.sleep(2)
        while time.monotonic() < deadline:
            if self.run.cancel.is_set():
                raise _Interrupted()
            try:
                self.conn = self.run.connect(self.host)
                after = self.conn.run("cat /proc/sys/kernel/random/boot_id", timeout=30).out.strip()
                if after and after != before:
                    self.facts["boot_id"] = after
                    self.log.event(f"reboot: back with boot_id {after}")
                    return "changed", f"rebooted in {timeout - (deadline - time.monotonic()):.0f} s"
                last = "still the same boot_id (reboot not started?)"
                self.conn.close()
            except (Unreachable, ConnectionLost, CommandTimeout, EOFError, OSError) as exc:
                # sshd may accept and drop connections while the host comes back
                last = str(exc) or type(exc).__name__
            time.sleep(2)
        raise Unreachable(f"did not come back with a new boot_id within {timeout:g} s after "
                          f"reboot ({last})")

    def _name(self, step: Step) -> str:
        if not step.named:
            return step.name
        try:
            return render_text(step.name, self.context)
        except TemplateError:
            return step.name

    def _failed(self, step: Step, res) -> bool:
        if step.failed_when is None:
            return res.rc != 0
        return bool(evaluate(step.failed_when, self._result_context(res)))

    def _result_context(self, res) -> dict:
        context = dict(self.context)
        context.update(rc=res.rc, stdout=res.out, stderr=res.err)
        return context


# Raised by the runner between steps, and by a connection whose command it stopped.
_Interrupted = Interrupted


class _VarsFailed(Exception):
    """A var does not render for this host (`{{ 1 // 0 }}`, a bad filter argument)."""


def _q(text: str) -> str:
    import shlex
    return shlex.quote(text)


def _failure_text(res) -> str:
    text = (res.err.strip() or res.out.strip()).splitlines()
    tail = " | ".join(text[-3:])
    if len(tail) > 400:
        tail = "..." + tail[-400:]
    return f"rc={res.rc}" + (f": {tail}" if tail else "")


class Run:
    """A recipe applied to hosts in parallel."""

    def __init__(self, inventory: Inventory, recipe: Recipe, hosts: list, options: RunOptions,
                 reporter: Reporter, redact: Redactor,
                 after_steps: Optional[Callable[[HostRun], None]] = None):
        self.inventory = inventory
        self.recipe = recipe
        self.hosts = hosts
        self.options = options
        self.reporter = reporter
        self.redact = redact
        self.after_steps = after_steps
        self.cancel = threading.Event()
        # Connections still opening: a cancel aborts them rather than wait out their timeouts.
        self._opening: set = set()
        self._opening_lock = threading.Lock()
        self.known_hosts = KnownHosts(inventory.known_hosts, inventory.host_key_policy)
        # Only the facts something can read are gathered (None: all of them).
        layers = [recipe.vars, inventory.vars, options.extra_vars]
        layers += [g.vars for g in inventory.groups.values()]
        layers += [h.vars for h in inventory.hosts.values()]
        self.fact_names = None if options.all_facts else facts_used(recipe, layers)

    def connect(self, host: Host):
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

    def execute(self) -> dict:
        """Run every host; return {name: HostResult} in inventory order."""
        results: dict = {}
        workers = max(1, min(self.options.forks, len(self.hosts)))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="host")
        futures = {h.name: pool.submit(HostRun(self, h)) for h in self.hosts}
        try:
            for name, future in futures.items():
                results[name] = future.result()
        except KeyboardInterrupt:
            self.stop()
            for name, future in futures.items():
                if future.cancel():
                    results[name] = HostResult(name, interrupted=True, message="interrupted")
            for name, future in futures.items():
                if name not in results:
                    results[name] = future.result()
            raise RunInterrupted(results) from None
        finally:
            pool.shutdown(wait=True)
        return results


class RunInterrupted(GpuprovError):
    """Ctrl-C or SIGTERM: `results` holds what every host got to."""

    def __init__(self, results: dict):
        super().__init__("interrupted")
        self.results = results


def write_json(path: Path, results: dict, redact) -> None:
    """Write the `--json` result document (README: Commands) atomically."""
    data = {"hosts": {name: r.to_json(redact) for name, r in results.items()}}
    write_atomic(Path(path), json.dumps(data, indent=2) + "\n")
