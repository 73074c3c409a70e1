"""The base of every step kind: what a kind checks on a host and which commands it needs.

A kind splits its work the way pyinfra's operations do:
- `probe(args)`: a read-only sh snippet whose output describes the current state (or None);
  the runner sends the probes of many steps to a host as one script, one round trip.
- `plan(args, probe)`: the commands needed to reach the target state; empty when it already
  holds, so a converged host runs nothing that changes it.
Values are rendered before `probe`/`plan` see them (`render`), shell fields quoted.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import Where
from ..config.schema import check_keys, expect
from ..config.templating import render_shell, render_value


@dataclass
class Command:
    """One command for the host. `display` is what plans and logs show (defaults to script)."""

    script: str
    stdin: Optional[bytes] = None
    display: str = ""
    shell: str = "/bin/sh"

    def shown(self) -> str:
        return self.display or self.script


@dataclass
class Probe:
    rc: int
    out: str


q = shlex.quote


class Kind:
    """Base of every step kind."""

    name = ""
    fields: dict = {}          # field -> type or tuple of types
    required: tuple = ()
    scalar_field: Optional[str] = None  # `kind: VALUE` shorthand fills this field
    shell_fields: tuple = ()   # rendered with every value shell-quoted
    remote = True              # False: evaluated on the control side (assert)
    probe_fields: tuple = ()   # the arguments `probe` reads (see `render_for_probe`)

    def load(self, value: Any, where: Where, base_dir: Path) -> dict:
        """Check the step's arguments as written; return them normalised (still unrendered)."""
        if self.scalar_field and not isinstance(value, dict):
            value = {self.scalar_field: value}
            key_where = {self.scalar_field: where}
        else:
            expect(value, dict, where, f"'{self.name}'")
            check_keys(value, self.fields, f"'{self.name}'")
            key_where = {k: value.at(k) for k in value} if hasattr(value, "at") else {}
        args = dict(value)
        for name in self.required:
            if args.get(name) in (None, ""):
                raise where.error(f"'{self.name}' needs '{name}'")
        for name, val in args.items():
            kinds = self.fields[name] if isinstance(self.fields[name], tuple) else (self.fields[name],)
            if not any(_is(val, k) for k in kinds):
                expect(val, kinds[0], key_where.get(name, where), f"'{self.name}.{name}'")
        self.check(args, where, base_dir)
        return args

    def check(self, args: dict, where: Where, base_dir: Path) -> None:
        """Kind-specific checks at load time."""

    def templates(self, args: dict) -> list:
        """(value, is_shell) for every field that may hold a template."""
        return [(v, k in self.shell_fields) for k, v in args.items() if not k.startswith("_")]

    def expressions(self, args: dict) -> list:
        """Jinja expressions among the arguments (checked statically like `when`)."""
        return []

    def render(self, args: dict, context: dict) -> dict:
        out = {}
        for key, value in args.items():
            if key.startswith("_"):
                out[key] = value
            elif key in self.shell_fields and isinstance(value, str):
                out[key] = render_shell(value, context)
            else:
                out[key] = render_value(value, context)
        return out

    def render_for_probe(self, args: dict, context: dict) -> dict:
        """Only the arguments `probe` reads, rendered: enough to probe a step before the
        rest of its arguments (a template's content, say) can be rendered."""
        return Kind.render(self, {k: v for k, v in args.items() if k in self.probe_fields},
                           context)

    def probe(self, args: dict) -> Optional[str]:
        return None

    def plan(self, args: dict, probe: Optional[Probe]) -> list:
        raise NotImplementedError

    def run_local(self, args: dict, context: dict) -> tuple:
        raise NotImplementedError


def _listed(value: Any) -> list:
    """A packages field as a list: a rendered template may give a list or a spaced string."""
    if isinstance(value, str):
        return [] if "{{" in value else value.split()
    return list(value)


def _is(value: Any, kind: type) -> bool:
    if kind in (int, float) and isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


