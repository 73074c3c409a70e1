"""Recipes: YAML files of steps and handlers, loaded and checked whole before any host is contacted.

A recipe is a mapping: `name`, `description`, `vars` (defaults, lowest precedence), `steps` (a
list), `handlers` (a mapping of name -> step). A step has exactly one kind key (see
`remote.kinds.KINDS`, plus `include`) and the common keys of `COMMON`, an argument spec checked
like a kind's (`remote.config.schema.check_args`). `include: other.yaml` inlines
another recipe's steps (path relative to the including file), adding its own `when`, `tags` and
`become` to theirs. Every template's syntax is checked at load; `check_names` then checks every
name a template reads against what each selected host defines.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Iterator, Mapping, Optional, Protocol, TypeVar

from ..ground.errors import InputError, Where
from .schema import Arg, check_args, check_keys, expect, suggest
from .templating import RESULT_NAMES, check_template, facts_read, parse
from .yamlfile import YamlMap, load_yaml


class StepKind(Protocol):
    """What loading a recipe needs of a step kind: its name, whether it runs on the control
    side, its arguments read and checked, and the templates and expressions in them. The kinds
    (remote/kinds' `Kind`) are passed in: config does not import them, and a recipe's steps
    carry whatever kind type the caller gave (`Recipe[Kind[Any]]` in the engine)."""

    name: str
    control_side: bool

    def load(self, value: Any, where: Where, base_dir: Path) -> dict[str, Any]: ...

    def templates(self, args: dict[str, Any]) -> list[tuple[Any, bool]]: ...

    def expressions(self, args: dict[str, Any]) -> list[str]: ...


K = TypeVar("K", bound=StepKind)

TOP_KEYS = {"name", "description", "vars", "steps", "handlers", "validate", "serial",
            "max_fail_percentage"}
# Play keywords of a canary rollout (Ansible's `serial` and `max_fail_percentage`), read from the
# top recipe only and checked by the engine's planner (engine/rollout.py) with their positions.
ROLLOUT_KEYS = ("serial", "max_fail_percentage")
# Keys that say how the whole run goes, so only the recipe that is run may say them: an
# include inlines steps (and may be conditional per host), as Ansible's import_tasks file holds
# tasks and no play keywords. An included recipe that says one is refused, never ignored.
RUN_KEYS = {"serial": "it says how the run goes through hosts",
            "max_fail_percentage": "it says how the run goes through hosts",
            "validate": "it says whether the run validates after the steps"}
MAX_INCLUDE_DEPTH = 20
MAX_SECONDS = 10_000_000  # ~116 days: anything above is a typo (and .inf/.nan are refused)
MAX_RETRIES = 1000


def _conditions(value: Any) -> bool:
    return all(isinstance(item, (str, bool)) for item in (value if isinstance(value, list)
                                                           else [value]))


def _seconds(value: Any) -> bool:
    # `0 < value <= MAX` also refuses NaN, and compares huge ints exactly.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        0 < value <= MAX_SECONDS


def _retries(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RETRIES


def _bool_or_expression(value: Any) -> bool:
    return isinstance(value, (bool, str))


# The keys every step may have besides its kind, in the order they are checked.
COMMON: dict[str, Arg] = {
    "name": Arg(),
    "when": Arg(valid=_conditions, must="an expression, true/false, or a list"),
    "tags": Arg((list, str), items=str, nullable=True),
    "become": Arg((bool,), nullable=True),
    "notify": Arg((list, str), items=str, nullable=True),
    "retries": Arg(default=0, valid=_retries, must=f"a whole number from 0 to {MAX_RETRIES}"),
    "delay": Arg(default=1.0, valid=_seconds,
                 must=f"a positive number of seconds (at most {MAX_SECONDS})"),
    "timeout": Arg(valid=_seconds, must=f"a positive number of seconds (at most {MAX_SECONDS})"),
    "changed_when": Arg(valid=_bool_or_expression, must="true, false or an expression"),
    "failed_when": Arg(valid=_bool_or_expression, must="true, false or an expression"),
    "creates": Arg((str,)),
    "unless": Arg((str,)),
}
INCLUDE: dict[str, Arg] = {"include": Arg((str,)),
                           **{key: COMMON[key] for key in ("name", "when", "tags", "become")}}


@dataclass
class Step(Generic[K]):
    name: str
    kind: K
    args: dict[str, Any]
    where: Where
    when: list[Any] = field(default_factory=list)
    become: Optional[bool] = None
    tags: frozenset[str] = frozenset()
    notify: list[str] = field(default_factory=list)
    retries: int = 0
    delay: float = 1.0
    timeout: Optional[float] = None
    changed_when: Any = None
    failed_when: Any = None
    creates: Optional[str] = None
    unless: Optional[str] = None
    named: bool = False  # the name was written by the user (and may be a template)


@dataclass
class Recipe(Generic[K]):
    path: Path
    name: str
    vars: dict[str, Any]
    vars_where: dict[str, Where]
    steps: list[Step[K]]
    handlers: dict[str, Step[K]]
    files: list[Path] = field(default_factory=list)
    validate: bool = True  # `validate: false` at the top: provision never validates after it
    rollout: dict[str, tuple[Any, Where]] = field(default_factory=dict)  # ROLLOUT_KEYS given

    def select(self, tags: Optional[set[str]]) -> list[Step[K]]:
        """Steps to run for `--tags` (all when None); steps tagged `always` always run."""
        if not tags:
            return list(self.steps)
        return [s for s in self.steps if s.tags & tags or "always" in s.tags]


def load_recipe(path: str | Path, kinds: Mapping[str, K]) -> Recipe[K]:
    """Load a recipe and everything it includes, with the step kinds in `kinds` (name -> kind);
    raise `InputError` at the first flaw."""
    loader = _Loader(kinds)
    root = Path(path)
    steps = loader.load_file(root, [], [], frozenset(), None, Where(str(root), 1))
    for step in steps + list(loader.handlers.values()):
        for name in step.notify:
            if name not in loader.handlers:
                raise step.where.error(f"notify: no handler named '{name}'"
                                       f"{suggest(name, loader.handlers)}")
    return Recipe(path=root, name=loader.root_name or root.stem, vars=loader.vars,
                  vars_where=loader.vars_where, steps=steps, handlers=loader.handlers,
                  files=loader.files, validate=loader.validate, rollout=loader.rollout)


class _Loader(Generic[K]):
    def __init__(self, kinds: Mapping[str, K]):
        self.kinds = kinds
        self.vars: dict[str, Any] = {}
        self.vars_where: dict[str, Where] = {}
        self.handlers: dict[str, Step[K]] = {}
        self.files: list[Path] = []
        self.included: set[tuple[Path, tuple[str, ...], frozenset[str], Optional[bool]]] = set()
        self.root_name: Optional[str] = None
        self.validate = True
        self.rollout: dict[str, tuple[Any, Where]] = {}

    def load_file(self, path: Path, stack: list[Path], when: list[Any], tags: frozenset[str],
                  become: Optional[bool], included_at: Where) -> list[Step[K]]:
        """The steps of the recipe at `path` (its vars and handlers go to the loader), under
        the conditions of the includes in `stack`; [] for a file already included alike."""
        resolved = path.resolve()
        if not self._enter(path, stack, (resolved, tuple(map(str, when)), tags, become), included_at):
            return []
        data = _read_yaml_recipe(path)
        self.files.append(path)
        if not stack:
            self.root_name = str(data["name"]) if data.get("name") else None
            if "validate" in data:
                expect(data["validate"], bool, data.at("validate"), "'validate'")
                self.validate = bool(data["validate"])
            self.rollout = {key: (data[key], data.at(key)) for key in ROLLOUT_KEYS if key in data}
        for key, why in RUN_KEYS.items() if stack else ():
            if key in data:
                raise data.at(key).error(f"'{key}' belongs in the recipe that is run, not in "
                                         f"an included one ({why})")
        self._add_vars(data)
        steps_raw = data.get("steps")
        if steps_raw is None:
            raise data.where.error("a recipe needs 'steps:' (a list of steps)")
        expect(steps_raw, list, data.at("steps"), "'steps'")
        stack = stack + [resolved]
        steps = []
        for index, raw in enumerate(steps_raw):
            expect(raw, dict, steps_raw.at(index), f"step {index + 1}")
            if "include" in raw:
                steps += self._include(raw, path, stack, when, tags, become)
            else:
                steps.append(self._step(raw, path.parent, when, tags, become))
        self._add_handlers(data, path.parent, become)
        return steps

    def _enter(self, path: Path, stack: list[Path],
               context: tuple[Path, tuple[str, ...], frozenset[str], Optional[bool]],
               included_at: Where) -> bool:
        """Check the include graph before reading `path`: no cycle, not too deep, a file that
        exists. False: the file was included before under the same conditions."""
        resolved = context[0]
        if resolved in stack:
            chain = " -> ".join(p.name for p in stack[stack.index(resolved):] + [resolved])
            raise included_at.error(f"include cycle: {chain}")
        if len(stack) >= MAX_INCLUDE_DEPTH:
            raise included_at.error(f"includes nested deeper than {MAX_INCLUDE_DEPTH}")
        if stack and not path.exists():
            raise included_at.error(f"included recipe {path} not found")
        if stack and not path.is_file():
            raise included_at.error(f"included recipe {path} is not a file")
        # A file included again under the same conditions adds nothing (stack.yaml and
        # nvidia-repo.yaml are shared by many recipes); under other conditions it comes in again.
        if stack and context in self.included:
            return False
        self.included.add(context)
        return True

    def _add_vars(self, data: YamlMap) -> None:
        file_vars = data.get("vars") or YamlMap()
        expect(file_vars, dict, data.at("vars"), "'vars'")
        for name, value in file_vars.items():
            # The including recipe's defaults win over those of the recipe it includes.
            if name not in self.vars:
                self.vars[name] = value
                self.vars_where[name] = file_vars.at(name)

    def _add_handlers(self, data: YamlMap, base_dir: Path, become: Optional[bool]) -> None:
        handlers_raw = data.get("handlers") or YamlMap()
        expect(handlers_raw, dict, data.at("handlers"), "'handlers'")
        for name, raw in handlers_raw.items():
            at = handlers_raw.at(name)
            if name in self.handlers:
                raise at.error(f"handler '{name}' is defined twice (first at "
                               f"{self.handlers[name].where})")
            expect(raw, dict, at, f"handler '{name}'")
            if "include" in raw:
                raise at.error("a handler cannot be an include")
            handler = self._step(raw, base_dir, [], frozenset(), become)
            if "name" not in raw:
                handler.name, handler.named = name, False
            self.handlers[name] = handler

    def _include(self, raw: YamlMap, path: Path, stack: list[Path], when: list[Any],
                 tags: frozenset[str], become: Optional[bool]) -> list[Step[K]]:
        check_keys(raw, INCLUDE, "include")
        common = check_args(raw, INCLUDE, raw.where, known_keys=False)
        return self.load_file(path.parent / common["include"], stack,
                              when + _listed(common["when"]), tags | _tags(common["tags"]),
                              raw.get("become", become), raw.at("include"))

    def _step(self, raw: YamlMap, base_dir: Path, when: list[Any], tags: frozenset[str],
              become: Optional[bool]) -> Step[K]:
        kinds = [k for k in raw if k not in COMMON]
        if not kinds:
            raise raw.where.error("step has no kind: add one of "
                                  + ", ".join(sorted(list(self.kinds) + ["include"])))
        for key in kinds:
            if key not in self.kinds:
                raise raw.at(key).error(
                    f"unknown step kind or key '{key}'{suggest(key, list(self.kinds) + sorted(COMMON))}")
        if len(kinds) > 1:
            raise raw.at(kinds[1]).error(f"a step has exactly one kind; this one has "
                                         f"{' and '.join(kinds)}")
        kind = self.kinds[kinds[0]]
        where = raw.at(kinds[0])
        args = kind.load(raw[kinds[0]], where, base_dir)
        common = check_args(raw, COMMON, raw.where, known_keys=False)
        notify = common["notify"] or []
        step = Step(name=str(common["name"] or _default_name(kind, args)), kind=kind,
                    args=args, where=raw.where, when=when + _listed(common["when"]),
                    become=raw.get("become", become), tags=tags | _tags(common["tags"]),
                    notify=[notify] if isinstance(notify, str) else list(notify),
                    retries=common["retries"], delay=float(common["delay"]),
                    timeout=None if common["timeout"] is None else float(common["timeout"]),
                    changed_when=common["changed_when"], failed_when=common["failed_when"],
                    creates=common["creates"], unless=common["unless"], named="name" in raw)
        if kind.control_side and (step.creates or step.unless):
            raise raw.where.error(f"'{kind.name}' runs on the control side: creates/unless do "
                                  "not apply")
        for key in ("changed_when", "failed_when"):
            if isinstance(common[key], str):
                parse(common[key], raw.at(key), expression=True)
        for expr in _listed(common["when"]):
            if isinstance(expr, str):
                parse(expr, raw.at("when"), expression=True)
        for value, _ in kind.templates(args):
            if isinstance(value, str):
                parse(value, where)
        return step


RECIPE_MAPPING = "a recipe must be a mapping with 'steps:'"


def _read_yaml_recipe(path: Path) -> YamlMap:
    """The format: a YAML mapping with the top-level keys of `TOP_KEYS`, with positions."""
    data = load_yaml(path, "recipe", mapping=RECIPE_MAPPING)
    if not isinstance(data, YamlMap):  # `~`: a null document
        raise InputError(RECIPE_MAPPING, path, 1)
    check_keys(data, TOP_KEYS, "recipe")
    return data


def _listed(value: Any) -> list[Any]:
    """A `when` as a list of conditions (none when absent)."""
    return [] if value is None else list(value) if isinstance(value, list) else [value]


def _tags(value: Any) -> frozenset[str]:
    """Tags from a list or a comma-separated string."""
    if isinstance(value, str):
        return frozenset(t.strip() for t in value.split(",") if t.strip())
    return frozenset(value or ())


def _default_name(kind: StepKind, args: dict[str, Any]) -> str:
    for key in ("cmd", "path", "dest", "packages", "that"):
        if args.get(key) is not None:
            value = args[key]
            text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            text = " ".join(text.split())
            return f"{kind.name}: {text[:50]}{'...' if len(text) > 50 else ''}"
    return kind.name


def step_templates(step: Step[Any]) -> Iterator[tuple[Any, str]]:
    """Every template of a step as (value, kind) with kind "text", "shell", "expression" or
    "result" (an expression that also sees rc/stdout/stderr)."""
    if step.named:
        yield step.name, "text"
    for expr in step.when:
        yield expr, "expression"
    for key in ("changed_when", "failed_when"):
        value = getattr(step, key)
        if isinstance(value, str):
            yield value, "result"
    if step.creates:
        yield step.creates, "text"
    if step.unless:
        yield step.unless, "shell"
    for value, is_shell in step.kind.templates(step.args):
        yield from _nested(value, "shell" if is_shell else "text")
    for expr in step.kind.expressions(step.args):
        yield expr, "expression"


def _nested(value: Any, kind: str) -> Iterator[tuple[Any, str]]:
    if isinstance(value, str):
        yield value, kind
    elif isinstance(value, dict):
        for item in value.values():
            yield from _nested(item, kind)
    elif isinstance(value, list):
        for item in value:
            yield from _nested(item, kind)


def check_names(recipe: Recipe[Any], known: set[str], host_label: str,
                fact_names: frozenset[str]) -> None:
    """Check every template and expression of `recipe` against the names one host defines
    and the facts the engine can gather (`fact_names`)."""
    for step in recipe.steps + list(recipe.handlers.values()):
        for value, kind in step_templates(step):
            try:
                check_template(value, step.where,
                               set(known) | RESULT_NAMES if kind == "result" else known,
                               fact_names, expression=kind in ("expression", "result"),
                               shell=kind == "shell")
            except InputError as exc:
                if host_label and "undefined variable" in exc.message:
                    exc.message += f" for host {host_label}"
                raise


def facts_used(recipe: Recipe[Any], var_layers: list[dict[str, Any]]) -> Optional[set[str]]:
    """Fact names the recipe's templates and these vars can read; None means all of them."""
    used: set[str] = set()
    sources = [(v, k) for step in recipe.steps + list(recipe.handlers.values())
               for v, k in step_templates(step)]
    for layer in var_layers:
        for value in layer.values():
            sources += list(_nested(value, "text"))
    for value, kind in sources:
        found = facts_read(value, expression=kind in ("expression", "result"))
        if found is None:
            return None
        used |= found
    return used
