"""The base of every step kind: what a kind's arguments are, what it reads on a host and which
commands it needs.

A kind splits its work the way pyinfra's operations and facts do:
- `spec`: its arguments, each with types, default, choices, required (`remote.config.schema.Arg`),
  checked once at load by `load`, which fills in the defaults;
- a fact: `probe(args)` is a read-only sh snippet whose output describes the current state (or
  None: nothing to read), and `parse(output)` turns that output into a typed value. The engine
  sends the probes of many steps to a host as one script, one round trip;
- `plan(args, fact)`: only decides. The commands needed to reach the target state from what
  the fact says; empty when it already holds, so a converged host runs nothing that changes it.
  Commands are typed (`commands`: a shell command, a reboot-and-wait, a local action): the
  engine runs the types and never knows the kinds.
Values are rendered before `probe`/`plan` see them (`render`), shell fields quoted.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Mapping, Optional, Sequence, TypeVar

from ..config.schema import Arg, check_args, expect
from ..config.templating import render_shell, render_value
from ..ground.errors import Where
from .commands import Command as Command  # noqa: F401  (re-exported: the kinds import it from here)
from .commands import Planned
from .route import BundleNeeds

if TYPE_CHECKING:
    from .route import BundleRoute, BundleTarget, CacheRoute

Args = dict[str, Any]
FactT = TypeVar("FactT")


@dataclass
class Probe:
    """A probe's answer as it came back: exit status and output."""

    rc: int
    out: str


q = shlex.quote


def with_env(script: str, env: Mapping[str, str], *, display: str,
             shell: str = "/bin/sh", script_on_stdin: bool = False,
             then: Optional[bytes] = None) -> Command:
    """A command that runs `script` with `env` exported, the values sent on stdin (and the
    script itself with `script_on_stdin`), followed by `then`, the script's own stdin.

    A value written into the script would sit in the `sh -c SCRIPT` argument on the host, and
    any local user there reads every process's arguments (`ps`, /proc/PID/cmdline); the
    environment of a process (/proc/PID/environ) only its own user and root can read (proc(5)).
    So the script starts by reading exactly the bytes of the `export` lines from stdin (`dd`
    with bs=1 reads one byte at a time, so nothing meant for the command is taken) and `eval`s
    them: the values never touch the command line or the host's disk. With `script_on_stdin`
    the script travels the same way, so what a user wrote into it (a token in a `cmd`) is not
    on the command line either; only the `eval` line is. What the script then reads from
    stdin is `then` (a lock's text), or end of file. Names must be valid (the caller checks)."""
    if not env and not script_on_stdin:
        return Command(script, stdin=then, display=display, shell=shell)
    block = "".join(f"export {name}={q(value)}\n" for name, value in env.items())
    if script_on_stdin:
        block, script = block + script + "\n", ""
    data = block.encode()
    prelude = f'eval "$(dd bs=1 count={len(data)} 2>/dev/null)"' + ("\n" if script else "")
    return Command(prelude + script, stdin=data + (then or b""), display=display, shell=shell)


def redacted_url(url: str) -> str:
    """`url` for plans and logs: the password of its user part shown as ***, as pip shows it
    ("Looking in indexes: https://user:****@host/simple"); a lone user part (a token) as ***
    too."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")  # a password may hold an `@` of its own
    if not sep or not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user + ':***' if colon else '***'}@{host}{slash}{path}"


class Kind(Generic[FactT]):
    """Base of every step kind; `FactT` is the type of what its probe's output says."""

    name = ""
    spec: dict[str, Arg] = {}
    scalar_field: Optional[str] = None  # `kind: VALUE` shorthand fills this field
    shell_fields: tuple[str, ...] = ()  # rendered with every value shell-quoted
    # True: plans only `LocalAction`s, run on the control side (assert); the recipe loader
    # refuses creates/unless on it. The engine never reads it.
    control_side = False
    probe_fields: tuple[str, ...] = ()  # the arguments `probe` reads (see `render_for_probe`)
    fetches = False                     # downloads packages: a fleet cache can serve them

    def load(self, value: Any, where: Where, base_dir: Path) -> Args:
        """Check the step's arguments as written; return them with defaults (still unrendered)."""
        if self.scalar_field and not isinstance(value, dict):
            value = {self.scalar_field: value}
        else:
            expect(value, dict, where, f"'{self.name}'")
        args = check_args(value, self.spec, where, self.name)
        self.check(args, where, base_dir)
        return args

    def check(self, args: Args, where: Where, base_dir: Path) -> None:
        """Kind-specific checks at load time, beyond what the spec says."""

    def templates(self, args: Args) -> list[tuple[Any, bool]]:
        """(value, is_shell) for every field that may hold a template."""
        return [(v, k in self.shell_fields) for k, v in args.items() if not k.startswith("_")]

    def expressions(self, args: Args) -> list[str]:
        """Jinja expressions among the arguments (checked statically like `when`)."""
        return []

    def render(self, args: Args, context: dict[str, Any]) -> Args:
        out = {}
        for key, value in args.items():
            if key.startswith("_"):
                out[key] = value
            elif key in self.shell_fields and isinstance(value, str):
                out[key] = render_shell(value, context)
            else:
                out[key] = render_value(value, context)
        return out

    def render_for_probe(self, args: Args, context: dict[str, Any]) -> Args:
        """Only the arguments `probe` reads, rendered: enough to probe a step before the
        rest of its arguments (a template's content, say) can be rendered."""
        return Kind.render(self, {k: v for k, v in args.items() if k in self.probe_fields},
                           context)

    def probe(self, args: Args) -> Optional[str]:
        """The fact's command: a read-only sh snippet, or None when the kind reads nothing."""
        return None

    def parse(self, out: str) -> FactT:
        """The fact's parser: what the probe's output says, as a typed value."""
        raise NotImplementedError

    def fact(self, probe: Optional[Probe]) -> FactT:
        """The fact from the probe's answer (a kind without a probe parses nothing)."""
        return self.parse(probe.out if probe is not None else "")

    def plan(self, args: Args, fact: FactT) -> Sequence[Planned]:
        raise NotImplementedError

    def diff_target(self, args: Args, fact: FactT) -> Optional[tuple[str, str, bool]]:
        """For `--diff`: (path, new content, whether the file exists now) when the step would
        write a file's content; None for a kind, or a step, that writes none."""
        return None

    def fetches_with(self, args: Args) -> bool:
        """Whether this step, with its rendered `args`, downloads through a fleet cache."""
        return self.fetches

    def through_cache(self, args: Args, route: CacheRoute) -> Args:
        """`args` (rendered) with the downloads sent through the fleet cache `route`; a kind
        with `fetches` overrides it."""
        return args

    def bundle_carries(self, args: Args, target: BundleTarget) -> BundleNeeds:
        """What `gpuprov bundle` must carry for this step (its `args` as loaded, unrendered;
        `target.render` renders them for the bundle's target) so that `through_bundle` finds it
        on the host; nothing, for a kind that installs nothing from a bundle."""
        return BundleNeeds()

    def through_bundle(self, args: Args, bundle: BundleRoute) -> Args:
        """`args` (rendered) installing from the bundle unpacked on the host (`provision
        --bundle`) instead of the network; PlanError naming what the bundle lacks. A kind with
        `fetches` that can install from a bundle overrides it; others download as written."""
        return args


def listed(value: Any) -> list[Any]:
    """A packages field as a list: a rendered template may give a list or a spaced string."""
    if isinstance(value, str):
        return [] if "{{" in value else value.split()
    return list(value)
