"""Jinja2 templating for recipes: strict about undefined names, safe in shell commands.

Three renderings share one environment setup:
- `render_text`: plain text (vars, file contents, template files).
- `render_shell`: a shell command line; every ``{{ value }}`` is shell-quoted, so a var holding
  ``hello; echo INJECTED`` arrives as that literal text. Lists become several quoted words.
  ``{{ value | verbatim }}`` opts out (for a var that deliberately holds shell syntax).
- `evaluate`: a Jinja expression (``when``, ``changed_when``, ``assert``).
`check_template` finds syntax errors and undefined names statically, before any host is contacted.
"""
from __future__ import annotations

import contextlib
import functools
import posixpath
import re
import shlex
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Union

import jinja2
from jinja2 import meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..ground.errors import InputError, TemplateError, Where
from .schema import suggest


class Verbatim(str):
    """A string the shell renderer inserts without quoting."""


def _quote_for_shell(value: Any) -> str:
    if isinstance(value, Verbatim):
        return str(value)
    if isinstance(value, (list, tuple)):
        return " ".join(shlex.quote(str(item)) for item in value)
    if isinstance(value, bool):
        value = "true" if value else "false"
    return shlex.quote(str(value))


def _make_env(finalize: Optional[Callable[[Any], Any]] = None) -> jinja2.Environment:
    # Sandboxed: templates see host facts, which a compromised host controls.
    env = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, finalize=finalize,
                                        keep_trailing_newline=True, autoescape=False)
    env.filters["quote"] = shlex.quote
    env.filters["verbatim"] = Verbatim
    env.filters["dirname"] = posixpath.dirname
    env.filters["basename"] = posixpath.basename
    return env


_TEXT = _make_env()
_SHELL = _make_env(finalize=_quote_for_shell)

# Names every template may use besides vars: see `context_for`.
BUILTIN_NAMES = frozenset({"host", "facts", "vars"})
# Extra names visible only in `changed_when`/`failed_when`.
RESULT_NAMES = frozenset({"rc", "stdout", "stderr"})

_SELF_QUOTED = re.compile(r"""(['"])\{\{(?:(?!\}\}).)*\}\}\1""")


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def render_text(source: str, context: dict[str, Any]) -> str:
    return _render(_TEXT, source, context)


def render_shell(source: str, context: dict[str, Any]) -> str:
    return _render(_SHELL, source, context)


@functools.lru_cache(maxsize=4096)
def _compiled(env: jinja2.Environment, source: str) -> jinja2.Template:
    # Every host renders the same templates: compile each once per run.
    return env.from_string(source)


@functools.lru_cache(maxsize=4096)
def _expression(source: str) -> Callable[..., Any]:
    return _TEXT.compile_expression(source, undefined_to_none=False)


def _render(env: jinja2.Environment, source: str, context: dict[str, Any]) -> str:
    if not is_template(source):
        return source
    with _as_template_error("render", source):
        return _compiled(env, source).render(context)


@contextlib.contextmanager
def _as_template_error(verb: str, source: str) -> Iterator[None]:
    """Turn what Jinja (or a filter) raises into a `TemplateError` naming the template."""
    try:
        yield
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"undefined name in '{_short(source)}': {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"cannot {verb} '{_short(source)}': {exc}") from None
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise TemplateError(f"cannot {verb} '{_short(source)}': {exc}") from None


_ONE_EXPRESSION = re.compile(r"^\{\{((?:(?!\}\}|\{\{).)*)\}\}\Z", re.S)  # \Z: not before a final newline


def render_value(value: Any, context: dict[str, Any]) -> Any:
    """Render every string inside a loaded YAML value (dicts and lists recursively).

    A string that is exactly one ``{{ expression }}`` keeps the expression's type, so
    ``packages: "{{ compat[v].wheels }}"`` gives a list, as in Ansible.
    """
    if isinstance(value, str):
        match = _ONE_EXPRESSION.match(value)
        if match:
            result = evaluate(match.group(1), context)
            if isinstance(result, (list, dict, bool, int, float)) or result is None:
                return result
            return str(result)
        return render_text(value, context)
    if isinstance(value, dict):
        return {k: render_value(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, context) for v in value]
    return value


def evaluate(expression: Any, context: dict[str, Any]) -> Any:
    """Evaluate a Jinja expression; YAML booleans and numbers pass through unchanged."""
    if not isinstance(expression, str):
        return expression
    with _as_template_error("evaluate", expression):
        return _expression(_strip_braces(expression))(context)


def _strip_braces(expression: str) -> str:
    text = expression.strip()
    if text.startswith("{{") and text.endswith("}}"):
        return text[2:-2]
    return text


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse(source: str, where: Where, expression: bool = False) -> nodes.Template:
    """Parse a template (or an expression) and raise `InputError` at `where` on bad syntax."""
    text = "{{ " + _strip_braces(source) + " }}" if expression else source
    try:
        ast = _TEXT.parse(text)
        # An unknown filter or test is only found when compiling; name it here, at its line.
        for node in ast.find_all((nodes.Filter, nodes.Test)):
            known = _TEXT.filters if isinstance(node, nodes.Filter) else _TEXT.tests
            if node.name not in known:
                kind = "filter" if isinstance(node, nodes.Filter) else "test"
                raise where.error(f"unknown {kind} '{node.name}' in '{_short(source)}'"
                                  f"{suggest(node.name, known)}")
        return ast
    except jinja2.TemplateSyntaxError as exc:
        raise where.error(f"template syntax error in '{_short(source)}': {exc.message}") from None
    except RecursionError:  # Jinja's parser recurses once per nesting level
        raise where.error(f"template nested too deeply in '{_short(source)}'") from None


def referenced_names(ast: nodes.Template) -> set[str]:
    """Top-level names a template reads (its own loop variables and Jinja globals excluded)."""
    return set(meta.find_undeclared_variables(ast)) - set(_TEXT.globals)


def referenced_facts(ast: nodes.Template) -> set[str]:
    """Names read as ``facts.NAME`` or ``facts['NAME']``."""
    found = set()
    for node in _facts_lookups(ast):
        if isinstance(node, nodes.Getattr):
            found.add(node.attr)
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            found.add(node.arg.value)
    return found


def _facts_lookups(ast: nodes.Template) -> Iterator[Union[nodes.Getattr, nodes.Getitem]]:
    """Every ``facts.X`` and ``facts[X]`` in a template."""
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        if isinstance(node, (nodes.Getattr, nodes.Getitem)) and \
                isinstance(node.node, nodes.Name) and node.node.name == "facts":
            yield node


def facts_read(source: Any, expression: bool = False) -> Optional[set[str]]:
    """Fact names a template reads; None when it uses `facts` other than by a constant name
    (``facts[x]``, ``facts | list``), so every fact is needed. Unparsable: an empty set (the
    static checks report the syntax)."""
    if not isinstance(source, str) or (not expression and not is_template(source)):
        return set()
    text = "{{ " + _strip_braces(source) + " }}" if expression else source
    try:
        ast = _TEXT.parse(text)
    except jinja2.TemplateSyntaxError:
        return set()
    names = [n for n in ast.find_all(nodes.Name) if n.name == "facts"]
    found = referenced_facts(ast)
    constant = [n for n in _facts_lookups(ast)
                if isinstance(n, nodes.Getattr) or isinstance(n.arg, nodes.Const)]
    return found if len(constant) == len(names) else None


def check_template(source: Any, where: Where, known: Iterable[str], fact_names: Iterable[str],
                   expression: bool = False, shell: bool = False) -> set[str]:
    """Statically check one template: syntax, names, fact names; return the names it reads.

    `known` are the names defined for the host(s) in question; unknown names are an error here,
    not a surprise on the 40th host.
    """
    if not isinstance(source, str) or (not expression and not is_template(source)):
        return set()
    if shell and _SELF_QUOTED.search(source):
        raise where.error(
            f"do not put quotes around {{{{ }}}} in '{_short(source)}': values in shell commands "
            "are quoted for you")
    ast = parse(source, where, expression)
    names = referenced_names(ast)
    missing = sorted(names - set(known) - BUILTIN_NAMES)
    if missing:
        raise where.error(f"undefined variable '{missing[0]}' in '{_short(source)}' "
                          "(define it under vars: in the recipe or inventory, or pass --var)")
    unknown_facts = sorted(referenced_facts(ast) - set(fact_names))
    if unknown_facts:
        raise where.error(f"unknown fact 'facts.{unknown_facts[0]}' in '{_short(source)}' "
                          f"(facts: {', '.join(sorted(fact_names))})")
    return names


def var_order(raw: Mapping[str, Any], where_of_var: Mapping[str, Where]) -> list[str]:
    """Var names in an order where each comes after the vars it refers to; a cycle is an
    input error at the var's position."""
    deps = {name: _names_in_value(value, where_of_var.get(name)) & set(raw)
            for name, value in raw.items()}
    order: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            cycle = " -> ".join(visiting[visiting.index(name):] + [name])
            where = where_of_var.get(name) or Where("<vars>", 0)
            raise where.error(f"variables refer to each other in a cycle: {cycle}")
        visiting.append(name)
        for dep in sorted(deps[name]):
            visit(dep)
        visiting.pop()
        order.append(name)

    for name in raw:
        visit(name)
    return order


def check_vars(raw: Mapping[str, Any], where_of_var: Mapping[str, Where],
               fact_names: Iterable[str]) -> None:
    """Static check of one host's vars: syntax, undefined names, cycles."""
    var_order(raw, where_of_var)
    for name, value in raw.items():
        where = where_of_var.get(name) or Where("<vars>", 0)
        _check_value(value, where, set(raw), fact_names)


def _check_value(value: Any, where: Where, known: set[str], fact_names: Iterable[str]) -> None:
    if isinstance(value, str):
        check_template(value, where, known, fact_names)
    elif isinstance(value, dict):
        for item in value.values():
            _check_value(item, where, known, fact_names)
    elif isinstance(value, list):
        for item in value:
            _check_value(item, where, known, fact_names)


def resolve_vars(raw: Mapping[str, Any], context: dict[str, Any],
                 where_of_var: Mapping[str, Where]) -> dict[str, Any]:
    """Render vars that refer to other vars, in dependency order.

    `context` holds `host` and `facts`; the result maps every name to its rendered value.
    """
    resolved: dict[str, Any] = {}
    for name in var_order(raw, where_of_var):
        ctx = dict(context)
        ctx.update(resolved)
        ctx["vars"] = resolved
        resolved[name] = render_value(raw[name], ctx)
    return {name: resolved[name] for name in raw}


def names_in(value: Any, expression: bool = False) -> set[str]:
    """Top-level names the templates inside a loaded value read (an expression: `when` and
    the like). The value has passed the static checks, so it parses."""
    if expression and isinstance(value, str):
        return set(_names_in_source("{{ " + _strip_braces(value) + " }}"))
    return _names_in_value(value, None)


def fact_dependent_vars(raw: Mapping[str, Any]) -> set[str]:
    """Names of the vars whose values read facts, directly or through other vars (or `vars`)."""
    reads = {name: _names_in_value(value, None) for name, value in raw.items()}
    dependent = {name for name, names in reads.items() if names & {"facts", "vars"}}
    grew = True
    while grew:
        grew = False
        for name, names in reads.items():
            if name not in dependent and names & dependent:
                dependent.add(name)
                grew = True
    return dependent


@functools.lru_cache(maxsize=4096)
def _names_in_source(source: str) -> frozenset[str]:
    # Every host's vars and steps hold the same templates: parse each once per run.
    return frozenset(referenced_names(parse(source, Where("<template>", 0))))


def _names_in_value(value: Any, where: Where | None) -> set[str]:
    if isinstance(value, str):
        if not is_template(value):
            return set()
        try:
            return set(_names_in_source(value))
        except InputError:
            parse(value, where or Where("<vars>", 0))  # raises at the value's own position
            raise
    if isinstance(value, dict):
        return set().union(*(_names_in_value(v, where) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_names_in_value(v, where) for v in value)) if value else set()
    return set()
