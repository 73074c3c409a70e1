"""Apply a recipe to a host (`provision`).

In order: gather the facts (one round trip); resolve vars; evaluate `when` and render every
selected step; send all their probes as one script; then walk the steps: a step whose probe
shows its target state reports `ok` and sends nothing, others run only the commands their kind
planned. The probes of steps that read no fact (in `when`, the probed arguments, `creates`,
`unless`) travel with the facts script, so a converged host usually costs connect + one round
trip. After a change the probes of the steps that follow are stale, so they are sent again
(one round trip) before the next step that needs them. Notified handlers run once at the end;
then, if every step succeeded and a validation was asked for, the host is validated.
"""
from __future__ import annotations

import difflib
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence

from ...config.recipe import Recipe, Step, facts_used
from ...config.templating import evaluate, fact_dependent_vars, names_in, render_shell, render_text, resolve_vars
from ...ground.errors import BecomeError, CommandTimeout, Interrupted, PlanError, TemplateError
from ...kinds import Command, Kind, LocalAction, Planned, Probe, RebootAndWait
from ...transport.connection import CommandResult
from ..probes import batch_script, in_one_write, parse_batch
from ..results import StepResult, StepStatus
from ..session import HostSession
from ..varlayers import facts_read_by_vars, union
from .reboot import reboot_and_wait
from .validate import remember_python

KindStep = Step[Kind[Any]]  # a recipe's step with gpuprov's own kinds

PROBE_SLOTS = ("kind", "creates", "unless")


@dataclass
class _Prepared:
    """A step rendered for one host, with its probes and their answers."""

    step: KindStep
    become: bool = False
    timeout: float = 0.0
    args: dict[str, Any] = field(default_factory=dict)
    skip: str = ""
    error: str = ""
    probes: dict[str, str] = field(default_factory=dict)   # slot -> snippet
    answers: dict[str, Probe] = field(default_factory=dict)
    stale: bool = False


DIFF_MAX_BYTES = 256 * 1024  # --diff reads at most this much of a file on the host


class Then(Protocol):
    """What runs on a host after its recipe succeeded: a validation (jobs/validate.py
    `Validate`, or the scheduler route's `ClusterValidate` for a cluster's login node)."""

    @property
    def outcome(self) -> Optional[str]: ...

    def run(self, session: HostSession) -> None: ...


class ApplyRecipe:
    """The `provision` job: `recipe`'s steps selected by `tags`, then `validate` if given."""

    def __init__(self, recipe: Recipe[Kind[Any]], tags: Optional[set[str]] = None,
                 validate: Optional[Then] = None):
        self.recipe = recipe
        self.tags = tags
        self.validate = validate
        # The facts the recipe's steps and vars read, worked out once for every host.
        self.fact_names = union(facts_used(recipe, []), facts_read_by_vars([recipe.vars]))

    @property
    def outcome(self) -> Optional[str]:
        return self.validate.outcome if self.validate is not None else None

    def __call__(self, session: HostSession) -> None:
        _HostApply(self.recipe, session).run(self.recipe.select(self.tags), self.fact_names)
        if self.validate is not None and session.result.ok:
            self.validate.run(session)
        elif session.result.ok and not session.options.check:
            remember_python(session)


class _HostApply:
    """One host's pass through the recipe: its notified handlers and early probe answers."""

    def __init__(self, recipe: Recipe[Kind[Any]], session: HostSession):
        self.recipe = recipe
        self.session = session
        self.check = session.options.check
        self.notified: list[str] = []
        # Probe answers that came with the facts, by snippet; good until the first step runs.
        self.early_answers: dict[str, Probe] = {}

    def run(self, steps: list[KindStep], fact_names: Optional[set[str]]) -> None:
        """Facts (the recipe's `fact_names` and the vars'), context, steps, handlers."""
        session = self.session
        self.early_answers = session.gather_facts(union(session.var_facts, fact_names),
                                                  lambda: self.early_probes(steps))
        session.build_context(self.recipe)
        if self.run_steps(steps) and self.notified:
            self.run_steps([h for name, h in self.recipe.handlers.items() if name in self.notified])

    # ------------------------------------------------------------------ probes before facts
    def early_probes(self, steps: list[KindStep]) -> list[str]:
        """Probe snippets of the steps that can be judged before the facts are known: run
        without become, and neither `when`, the probed arguments, `creates` nor `unless` read a
        fact (directly or through a var). Each snippet once."""
        session = self.session
        raw, where = session.vars(self.recipe)
        blocked = fact_dependent_vars(raw) | {"facts", "vars"}
        try:
            values = resolve_vars({n: v for n, v in raw.items() if n not in blocked},
                                  {"host": session.host.name}, where)
        except TemplateError:
            return []  # only a shortcut: build_context reports the var's error
        session.note_secrets(values)
        context = dict(values)
        context.update(host=session.host.name, vars=values)
        snippets: dict[str, None] = {}
        for step in steps:
            if self._become(step):
                continue
            probed = {k: v for k, v in step.args.items() if k in step.kind.probe_fields}
            reads = set().union(*(names_in(e, expression=True) for e in step.when),
                                names_in([step.creates, step.unless, probed]))
            if reads & blocked:
                continue
            try:
                if all(evaluate(expr, context) for expr in step.when):
                    args = step.kind.render_for_probe(step.args, context)
                    snippets.update(dict.fromkeys(_probe_snippets(step, args, context).values()))
            except Exception:  # noqa: BLE001 - only a shortcut: prepare() reports the step's error
                continue
        return list(snippets)

    # ------------------------------------------------------------------ steps
    def run_steps(self, steps: list[KindStep]) -> bool:
        """Run `steps` in order; False when one failed (the host stops there)."""
        prepared = [self.prepare(step) for step in steps]
        self.probe(prepared)
        for index, item in enumerate(prepared):
            self.session.check_cancel()
            if item.stale and item.probes:
                self.probe(prepared[index:])
            result = self.execute(item)
            self.session.record(result)
            if result.status is StepStatus.CHANGED:
                for name in item.step.notify:
                    if name not in self.notified:
                        self.notified.append(name)
                if not self.check:  # in check mode nothing really changed
                    for later in prepared[index + 1:]:
                        later.stale = True
            if result.status is StepStatus.FAILED:
                return False
        return True

    def prepare(self, step: KindStep) -> _Prepared:
        context = self.session.context
        item = _Prepared(step=step, become=self._become(step),
                         timeout=step.timeout or self.session.inventory.timeouts.command)
        try:
            for expr in step.when:
                if not evaluate(expr, context):
                    item.skip = f"when: {expr}"
                    return item
            item.args = self.session.cache.through(step.kind, step.kind.render(step.args, context))
            item.probes = _probe_snippets(step, item.args, context)
        except (TemplateError, PlanError) as exc:
            item.error = str(exc)
        return item

    def _become(self, step: KindStep) -> bool:
        return step.become if step.become is not None else self.session.host.become

    def probe(self, items: list[_Prepared]) -> None:
        """Send the probes of `items` as one script per privilege level; store the answers."""
        groups: dict[bool, list[tuple[int, str]]] = {False: [], True: []}
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
            if probes:
                self._probe_level(items, become, probes)

    def _probe_level(self, items: list[_Prepared], become: bool,
                     probes: list[tuple[int, str]]) -> None:
        """One privilege level's probes in one script; a failure marks each of its steps."""
        session = self.session
        script, token = batch_script(probes)
        error = ""
        try:
            result = session.conn.run(in_one_write(script), become=become,
                                      timeout=session.inventory.timeouts.command,
                                      become_user=session.host.become_user)
        except BecomeError as exc:
            error = str(exc)
        except CommandTimeout as exc:
            error = session.stalled = f"probes {exc}"
        else:
            session.log.command("probe", f"{len(probes)} probes{' (become)' if become else ''}",
                                result.rc, result.elapsed_s, result.out, result.err)
            if not result.complete:  # a cut answer would read as wrong probe results
                error = "probes: the host's answer is over the output limit"
        if error:
            for item in items:
                if item.become == become and item.probes:
                    item.error = error
            return
        for key, answer in parse_batch(result.out, token).items():
            index, slot_index = divmod(key, len(PROBE_SLOTS))
            items[index].answers[PROBE_SLOTS[slot_index]] = answer

    def execute(self, item: _Prepared) -> StepResult:
        step = item.step
        started = time.monotonic()
        result = StepResult(self._name(step), StepStatus.OK)
        try:
            if item.skip:
                result.status, result.message = StepStatus.SKIPPED, item.skip
            elif item.error:
                result.status, result.message = StepStatus.FAILED, item.error
            else:
                self._execute_planned(item, result)
        except TemplateError as exc:
            result.status, result.message = StepStatus.FAILED, str(exc)
        result.elapsed_s = time.monotonic() - started
        return result

    def _execute_planned(self, item: _Prepared, result: StepResult) -> None:
        step, session = item.step, self.session
        missing = [slot for slot in item.probes if slot not in item.answers]
        if missing:
            result.status = StepStatus.FAILED
            result.message = f"no answer from the {missing[0]} probe (host stopped responding?)"
            return
        if "creates" in item.answers and item.answers["creates"].rc == 0:
            assert step.creates is not None  # its probe exists only when it is set
            result.message = f"creates: {render_text(step.creates, session.context)} exists"
            return
        if "unless" in item.answers and item.answers["unless"].rc == 0:
            result.message = "unless: command succeeded"
            return
        try:
            commands = step.kind.plan(item.args, step.kind.fact(item.answers.get("kind")))
        except PlanError as exc:
            result.status, result.message = StepStatus.FAILED, str(exc)
            return
        on_host = [c for c in commands if not isinstance(c, LocalAction)]
        if on_host:
            result.commands = [c.shown() for c in on_host]
            if session.reporter.diff:
                result.diff = self._diff(item)
        if self.check and on_host:
            result.status = StepStatus.CHANGED
            result.message = "would run: " + "; ".join(c.shown().splitlines()[0] for c in on_host)
            return
        self._run_planned(item, result, commands)

    def _run_planned(self, item: _Prepared, result: StepResult, commands: Sequence[Planned]) -> None:
        """Run a step's commands in the order its kind planned them, each by its type
        (`kinds.commands`); stop at the first that fails. The last shell command judges the
        step (`changed_when`); a reboot is a change."""
        session = self.session
        running = None  # signs of life on a long step, its output live with -v (output/progress.py)
        last: Optional[CommandResult] = None
        rebooted = ""
        try:
            for command in commands:
                if isinstance(command, LocalAction):
                    ok, message = command.run(session.context)
                    if not ok:
                        result.status, result.message = StepStatus.FAILED, message
                        return
                    if command.warning:  # shown once per host; each step keeps it as its message
                        session.warn(f"{result.name}: {command.warning}", once=command.warning)
                        result.message = command.warning
                elif isinstance(command, RebootAndWait):
                    result.status, rebooted = reboot_and_wait(session, command.timeout)
                    result.message = rebooted
                    if result.status is StepStatus.FAILED:
                        return
                else:
                    if running is None:
                        running = session.reporter.started(session.host.name, result.name)
                    last = self._run_command(item, command,
                                             running.on_output if running.show_line else None)
                    if last is None or self._failed(item.step, last):
                        break
        finally:
            if running is not None:
                session.reporter.progress.stop(running)
        if running is not None:
            self._judge(item, result, last)
        if rebooted and result.status is StepStatus.OK:
            result.status = StepStatus.CHANGED

    def _diff(self, item: _Prepared) -> str:
        """`--diff`: the unified diff of the content a file or template step writes."""
        step, session = item.step, self.session
        target = step.kind.diff_target(item.args, step.kind.fact(item.answers.get("kind")))
        if target is None:
            return ""
        path, new, exists = target
        old = ""
        if exists:
            try:
                res = session.conn.run(f"head -c {DIFF_MAX_BYTES + 1} -- {shlex.quote(path)}",
                                       become=item.become, timeout=item.timeout,
                                       become_user=session.host.become_user)
            except CommandTimeout:
                return f"(no diff: reading {path} timed out)"
            if res.rc != 0 or len(res.out.encode()) > DIFF_MAX_BYTES:
                return f"(no diff: {path} is unreadable or over {DIFF_MAX_BYTES} bytes)"
            old = res.out
        lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     f"{path} (before)" if exists else "/dev/null",
                                     f"{path} (after)")
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def _judge(self, item: _Prepared, result: StepResult, last: Optional[CommandResult]) -> None:
        """Status of a step from its last command: failed, changed, or ok (changed_when)."""
        step = item.step
        if last is None:
            result.status = StepStatus.FAILED
            result.message = f"timed out after {item.timeout:g} s"
            return
        if self._failed(step, last):
            result.status = StepStatus.FAILED
            result.message = _failure_text(last)
            return
        changed = True
        if step.changed_when is not None:
            changed = bool(evaluate(step.changed_when, self._result_context(last)))
        result.status = StepStatus.CHANGED if changed else StepStatus.OK

    def _run_command(self, item: _Prepared, command: Command,
                     on_output: Any = None) -> Optional[CommandResult]:
        """Run one command with the step's retries; None when it timed out."""
        step, session = item.step, self.session
        attempts = step.retries + 1
        attempt = 1
        while True:
            try:
                res = session.conn.run(command.script, become=item.become, timeout=item.timeout,
                                       stdin=command.stdin, shell=command.shell,
                                       on_output=on_output, become_user=session.host.become_user)
            except CommandTimeout:
                session.log.command(step.name, command.shown(), None, item.timeout)
                # the rest of the job (the stack manifest) does not ask this host again
                session.stalled = f"{step.name} timed out after {item.timeout:g} s"
                return None
            except Interrupted:
                session.log.event(f"{step.name}: interrupted; stopped on the host: "
                                  f"{command.shown().splitlines()[0] if command.shown() else ''}")
                raise
            except BecomeError as exc:
                session.log.event(f"{step.name}: {exc}")
                return CommandResult(1, b"", str(exc).encode(), 0.0)
            session.log.command(step.name, command.shown(), res.rc, res.elapsed_s, res.out,
                                res.err)
            if not self._failed(step, res) or attempt == attempts:
                return res
            wait = min(step.delay * (2 ** (attempt - 1)), 60.0)
            session.log.event(f"{step.name}: attempt {attempt}/{attempts} failed "
                              f"(rc={res.rc}); retrying in {wait:g}s")
            session.sleep(wait)
            attempt += 1

    def _name(self, step: KindStep) -> str:
        if not step.named:
            return step.name
        try:
            return render_text(step.name, self.session.context)
        except TemplateError:
            return step.name

    def _failed(self, step: KindStep, res: CommandResult) -> bool:
        if step.failed_when is None:
            return res.rc != 0
        return bool(evaluate(step.failed_when, self._result_context(res)))

    def _result_context(self, res: CommandResult) -> dict[str, Any]:
        context = dict(self.session.context)
        context.update(rc=res.rc, stdout=res.out, stderr=res.err)
        return context


def _probe_snippets(step: KindStep, args: dict[str, Any], context: dict[str, Any]) -> dict[str, str]:
    """{slot: sh snippet} of a step's read-only checks, from its rendered arguments."""
    probes = {}
    snippet = step.kind.probe(args)
    if snippet:
        probes["kind"] = snippet
    if step.creates:
        probes["creates"] = f"test -e {shlex.quote(render_text(step.creates, context))}"
    if step.unless:
        probes["unless"] = render_shell(step.unless, context)
    return probes


def _failure_text(res: CommandResult) -> str:
    text = (res.err.strip() or res.out.strip()).splitlines()
    tail = " | ".join(text[-3:])
    if len(tail) > 400:
        tail = "..." + tail[-400:]
    return f"rc={res.rc}" + (f": {tail}" if tail else "")
