"""The `shell` step kind."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Sequence

from ..config.schema import Arg
from ..ground.errors import PlanError
from .aptproxy import proxy_options
from .base import Args, Command, Kind, q, with_env

if TYPE_CHECKING:
    from .route import BundleRoute, CacheRoute

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # used with fullmatch: `$` would pass a final newline
# A command that runs apt-get or apt (by name: found on PATH) gets the fleet cache too.
RUNS_APT = re.compile(r"(?<![\w./-])apt(?:-get)?(?![\w.-])")
# The shells that read the lines put before the command (POSIX sh syntax).
POSIX_SHELLS = {"sh", "bash", "dash", "ash", "ksh", "zsh"}


def apt_through_cache(proxy: str, https_origins: list[str], direct: Sequence[str] = ()) -> str:
    """Shell lines that put `apt-get` and `apt` wrappers first on the step's PATH, for the
    step's duration: each call of either runs the real one with the fleet cache's options
    (remote/kinds/aptproxy.py proxy_options: the proxy, and the host's sources as read right then,
    its HTTPS repositories that the cache serves written as http://). The step's own command is
    left as written, so recipes do not change; a wrapper is one file in a temporary folder
    removed when the step ends."""
    prelude, opts = proxy_options(proxy, https_origins, direct)
    return _apt_wrappers(f"{prelude}\"$real\"{opts} \"$@\"\n", "through the fleet cache")


def apt_through_bundle(options: str, rebuild: str) -> str:
    """Shell lines that put `apt-get` and `apt` wrappers first on the step's PATH that read the
    bundle's repository alone (`options`: BundleRoute.apt_options), its lists read first (a
    local file, no network); a call that fails then says, on its last line, that the bundle
    carries the recipe's apt steps' packages and which command makes it again."""
    hint = ("gpuprov: this step's apt read the bundle's repository alone, which carries the "
            "packages of the recipe's apt steps (and their dependencies): install what it lacks "
            f"with an apt step and make the bundle again with `{rebuild}`")
    wrapper = f"\"$real\"{options} \"$@\" || {{ rc=$?; printf '%s\\n' {q(hint)} >&2; exit $rc; }}\n"
    return (_apt_wrappers(wrapper, "from the bundle")
            + "apt-get update -qq >/dev/null 2>&1 || true\n")


def _apt_wrappers(wrapper: str, what: str) -> str:
    """The step's `apt-get` and `apt`, each a script running `wrapper` (with `$real` the real
    tool), first on its PATH for the step's duration; one temporary folder removed at its end."""
    return (
        "gpuprov_apt=$(mktemp -d) || exit 1\n"
        "trap 'rm -rf \"$gpuprov_apt\"' EXIT\n"
        "for tool in apt-get apt; do\n"
        "  real=$(command -v \"$tool\") || continue\n"
        f"  {{ printf '#!/bin/sh\\n# gpuprov: %s {what} for this step\\nreal=%s\\n' "
        "\"$tool\" \"'$real'\"\n"
        "    cat <<'GPUPROV_APT'\n"
        f"{wrapper}"
        "GPUPROV_APT\n"
        "  } > \"$gpuprov_apt/$tool\" && chmod 755 \"$gpuprov_apt/$tool\" || exit 1\n"
        "done\n"
        'PATH="$gpuprov_apt:$PATH"; export PATH\n')


class Shell(Kind[None]):
    """Run a command. `creates`/`unless` (common keys) make it idempotent."""

    name = "shell"
    spec = {
        "cmd": Arg((str,), required=True),
        "chdir": Arg((str,)),
        "env": Arg((dict,)),
        "executable": Arg((str,), "/bin/sh"),
    }
    scalar_field = "cmd"
    shell_fields = ("cmd",)
    fetches = True  # its apt-get, when it runs one

    def fetches_with(self, args: Args) -> bool:
        return bool(RUNS_APT.search(str(args.get("cmd") or "")))

    def through_cache(self, args: Args, route: CacheRoute) -> Args:
        shell = str(args.get("executable") or "/bin/sh").rsplit("/", 1)[-1]
        if route.apt_proxy and shell in POSIX_SHELLS and self.fetches_with(args):
            cache: dict[str, Any] = {"proxy": route.apt_proxy, "https": list(route.apt_https),
                                     "direct": list(route.apt_direct)}
            args = dict(args, _apt_cache=cache)
        return args

    def through_bundle(self, args: Args, bundle: BundleRoute) -> Args:
        """Its apt-get and apt read the bundle's repository alone (`provision --bundle`): what
        the bundle carries installs, what it lacks fails naming the command that makes it."""
        shell = str(args.get("executable") or "/bin/sh").rsplit("/", 1)[-1]
        if shell not in POSIX_SHELLS:
            raise PlanError(f"shell: its apt-get cannot be sent to the bundle's repository "
                            f"under {shell} (a POSIX shell's can: {', '.join(sorted(POSIX_SHELLS))})")
        return dict(args, _apt_bundle={"options": bundle.apt_options(), "rebuild": bundle.rebuild})

    def parse(self, out: str) -> None:
        return None

    def plan(self, args: Args, fact: None) -> list[Command]:
        parts = []
        cache = args.get("_apt_cache")
        if cache:
            parts.append(apt_through_cache(cache["proxy"], cache["https"],
                                           cache.get("direct") or ()).rstrip("\n"))
        bundle = args.get("_apt_bundle")
        if bundle:
            parts.append(apt_through_bundle(bundle["options"], bundle["rebuild"]).rstrip("\n"))
        if args["chdir"]:
            parts.append(f"cd {q(args['chdir'])} || exit 1")
        env = {}
        for key, value in (args["env"] or {}).items():
            if not ENV_NAME.fullmatch(str(key)):
                raise PlanError(f"env name {key!r} is not a valid variable name")
            env[str(key)] = str(value)
        parts.append(args["cmd"])
        executable = args["executable"] or "/bin/sh"
        posix = executable.rsplit("/", 1)[-1] in POSIX_SHELLS
        if env and not posix:
            raise PlanError(f"env: is passed by shell lines, which {executable} does not read "
                            f"(a POSIX shell does: {', '.join(sorted(POSIX_SHELLS))})")
        # The values and the script travel on stdin, never on a command line on the host,
        # which any user there reads (a token written into `cmd` included). Another
        # interpreter gets its `-c` argument as before.
        return [with_env("\n".join(parts), env, display=args["cmd"], shell=executable,
                         script_on_stdin=posix)]
