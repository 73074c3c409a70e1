"""The `apt` step kind."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from ..config.aptlock import AptLock, read_apt_lock
from ..config.schema import Arg
from ..ground.errors import InputError, PlanError, Where
from .aptproxy import proxy_options, proxy_shown
from .base import Args, Command, Kind, listed, q, with_env
from .commands import LocalAction, Planned
from .route import BundleNeeds

if TYPE_CHECKING:
    from .route import BundleRoute, BundleTarget, CacheRoute


# Used with fullmatch: `$` would let a name end in a newline.
APT_PACKAGE = re.compile(r"([a-z0-9][a-z0-9+.-]*)(?::[a-z0-9]+)?(?:=([A-Za-z0-9.+:~*?_-]+))?")
APT_STAMP = "/var/lib/apt/lists/.gpuprov-updated"
# The apt locks shipped beside the recipes (`gpuprov lock --apt`), checked when a recipe with a
# locked apt step loads, so a bad line stops the run before any host is contacted.
SHIPPED_APT_LOCKS = "locks/apt-*.txt"
REFRESH = "gpuprov lock --apt"
UNLOCKED = ("unlocked: no apt lock {path} for this host's repository, so apt installs the newest "
            "versions: run gpuprov lock --apt on a machine that reaches NVIDIA's repository")
APT_OPTS = ("-y -q -o DPkg::Lock::Timeout={lock} -o Dpkg::Options::=--force-confdef "
            "-o Dpkg::Options::=--force-confold")


def dpkg_installed(abbrev: str) -> bool:
    """True for an installed package, from dpkg's ${db:Status-Abbrev}: the second letter is the
    package's state (`ii ` installed; `hi ` installed and held, as after `apt-mark hold`)."""
    return len(abbrev) >= 2 and abbrev[1] == "i"


def apt_update_command(lock_timeout: int = 600, proxy: Optional[str] = None,
                       https_origins: Sequence[str] = (), direct: Sequence[str] = (),
                       bundle: str = "") -> Command:
    """`apt-get update` that fails on any fetch error (plain apt-get exits 0 on network errors).
    `bundle`: apt options that read a bundle's repository alone (`BundleRoute.apt_options`):
    its lists are its own, so the host's update stamp is left as it was."""
    prelude, opts = proxy_options(proxy, https_origins, direct)
    script = (
        f"export DEBIAN_FRONTEND=noninteractive\n{prelude}"
        f"out=$(apt-get update -q -o DPkg::Lock::Timeout={lock_timeout}{opts}{bundle} 2>&1); rc=$?\n"
        "printf '%s\\n' \"$out\"\n"
        "if [ $rc -ne 0 ] || printf '%s\\n' \"$out\" | grep -qE "
        "'^(E:|Err:|W: (Failed to fetch|Some index files failed))'; then\n"
        "  echo 'apt-get update reported errors (see above)' >&2; exit 1\nfi\n"
        + ("" if bundle else f"touch {APT_STAMP}"))
    shown = " (the bundle's repository only)" if bundle else proxy_shown(proxy, direct)
    return _sent(script, proxy, display="apt-get update" + shown)


def _sent(script: str, proxy: Optional[str], display: str) -> Command:
    """The command for `script`: sent on stdin when it writes a proxy's URL (see
    `proxy_options`)."""
    if proxy:
        return with_env(script, {}, script_on_stdin=True, display=display)
    return Command(script, display=display)


def glob_pattern(pin: str) -> str:
    """A version glob as a `case` pattern: `*` and `?` stay wildcards, every other run of
    characters is quoted (`550.*` -> `'550.'*`)."""
    return "".join(part if part in ("*", "?") else q(part)
                   for part in re.split(r"([*?])", pin) if part)


@dataclass
class AptState:
    """What apt's probe says: installed packages (name -> version), held ones, the host's clock
    and when the package lists were last updated (seconds since the epoch, 0: never)."""

    installed: dict[str, str] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    now: int = 0
    updated: int = 0


def parse_apt_state(out: str) -> AptState:
    """Read dpkg-query's `NAME<tab>STATUS<tab>VERSION` lines and the probe's `@now`, `@updated`
    and `@held` lines."""
    state = AptState()
    for line in out.splitlines():
        if line.startswith("@now "):
            state.now = _seconds(line)
        elif line.startswith("@updated "):
            state.updated = _seconds(line)
        elif line.startswith("@held "):
            state.held.add(line.split()[1].split(":")[0])
        else:
            parts = line.split("\t")
            if len(parts) == 3 and dpkg_installed(parts[1]):
                state.installed[parts[0]] = parts[2]
    return state


def _seconds(line: str) -> int:
    """The number after an `@now`/`@updated` tag; 0 when the host printed none."""
    fields = line.split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


class Apt(Kind[AptState]):
    """Debian packages present or absent, with version pins (globs allowed: `pkg=550.*`), an
    optional hold, and a cache refresh only when something must be installed and the cache is
    older than `cache_valid_time`. Waits for the dpkg lock (cloud-init, unattended-upgrades)."""

    name = "apt"
    spec = {
        "packages": Arg((list, str), required=True),
        "state": Arg((str,), "present", choices=("present", "absent")),
        "update_cache": Arg((bool,), False),
        "cache_valid_time": Arg((int,), 3600),
        "hold": Arg((bool,), False),
        # None: apt's own setting; false adds --no-install-recommends.
        "install_recommends": Arg((bool,), None),
        "lock_timeout": Arg((int,), 600),
        "purge": Arg((bool,), False),
        # An HTTP proxy for apt-get (an apt-cacher-ng); the fleet cache fills it in.
        "proxy": Arg((str,), None),
        # HTTPS repositories (URL prefixes) that proxy fetches over HTTPS itself when apt asks
        # it with http://; the fleet cache fills it in.
        "proxy_https": Arg((list,), None),
        # Hosts of the host's http sources that proxy does not forward to: fetched directly.
        "proxy_direct": Arg((list,), None),
        # An apt lock (`gpuprov lock --apt`; relative to the recipe's folder): the packages, and
        # their dependencies the lock names `via` them, installed at its versions. A lock that
        # does not exist: installed unpinned, with a warning.
        "lock": Arg((str,), None),
    }
    probe_fields = ("packages", "hold", "state", "lock", "_base")
    fetches = True

    def check(self, args: Args, where: Where, base_dir: Path) -> None:
        if isinstance(args["packages"], str) and "{{" not in args["packages"]:
            args["packages"] = args["packages"].split()
        for package in listed(args["packages"]):
            if "{{" not in str(package) and not APT_PACKAGE.fullmatch(str(package)):
                raise where.error(f"apt: {package!r} is not a package name (pin as name=version)")
        if args["lock"]:
            args["_base"] = str(base_dir)
            # Which lock a host reads depends on its facts; every shipped one must be readable
            # (InputError: the lock's file and line, exit status 2).
            for path in sorted(base_dir.glob(SHIPPED_APT_LOCKS)):
                read_apt_lock(path)

    @staticmethod
    def _specs(args: Args) -> list[tuple[str, Optional[str]]]:
        specs = []
        for package in listed(args["packages"]):
            match = APT_PACKAGE.fullmatch(str(package))
            if not match:
                raise PlanError(f"apt: {package!r} is not a package name")
            specs.append((match.group(1), match.group(2)))
        return specs

    @staticmethod
    def _lock(args: Args) -> tuple[Optional[AptLock], Path]:
        """The step's apt lock (None: the file does not exist) and its path."""
        path = Path(str(args["lock"])).expanduser()
        if not path.is_absolute():
            path = Path(args.get("_base") or ".") / path
        if not path.exists():
            return None, path
        try:
            return read_apt_lock(path), path
        except InputError as exc:
            raise PlanError(f"apt: {exc}") from None

    def _locked_specs(self, args: Args) -> tuple[list[tuple[str, Optional[str]]], Optional[str]]:
        """The step's packages pinned to its lock's versions, then their locked dependencies;
        and a warning when the step names a lock that does not exist (installed unpinned)."""
        specs = self._specs(args)
        if not args.get("lock") or args["state"] == "absent":
            return specs, None
        lock, _ = self._lock(args)
        path = args["lock"]     # as the step names it (relative to the recipe's folder)
        if lock is None:
            return specs, UNLOCKED.format(path=path)
        names = [n for n, _ in specs]
        missing = lock.missing(names)
        if missing:
            raise PlanError(f"apt: {', '.join(missing)} not in the apt lock {path}: refresh it with "
                            f"`{lock.command or REFRESH}` on a machine that reaches the repository")
        for name, pin in specs:
            if pin and not fnmatch.fnmatchcase(lock.pins[name].version, pin):
                raise PlanError(f"apt: the apt lock {path} has {name}={lock.pins[name].version}, "
                                f"the step wants {pin}: refresh it with `{lock.command or REFRESH}`")
        return [(p.name, p.version) for p in lock.pins_for(names)], None

    def probe(self, args: Args) -> str:
        names = " ".join(q(n) for n, _ in self._locked_specs(args)[0])
        return ("dpkg-query -W -f='${Package}\\t${db:Status-Abbrev}\\t${Version}\\n' -- "
                f"{names} 2>/dev/null\n"
                'echo "@now $(date +%s)"\n'
                f"s=0; for f in /var/lib/apt/periodic/update-success-stamp {APT_STAMP}; do "
                '[ -e "$f" ] && t=$(stat -c %Y "$f") && [ "$t" -gt "$s" ] && s=$t; done\n'
                'echo "@updated $s"'
                # apt-mark is slow (it loads the cache): ask only when holds matter.
                + ("\napt-mark showhold 2>/dev/null | sed 's/^/@held /'"
                   if args["hold"] or args["state"] == "absent" else ""))

    def parse(self, out: str) -> AptState:
        return parse_apt_state(out)

    def through_cache(self, args: Args, route: CacheRoute) -> Args:
        if route.apt_proxy and not args.get("proxy"):
            args = dict(args, proxy=route.apt_proxy, proxy_https=list(route.apt_https),
                        proxy_direct=list(route.apt_direct))
        return args

    def bundle_carries(self, args: Args, target: BundleTarget) -> BundleNeeds:
        """The step's literal package names, when it installs them; a templated name is left
        out (it is the host's, known only there; cuda.yaml's cuda-toolkit-{{ cuda_pkg_suffix }}
        is NVIDIA's, which `gpuprov bundle --apt-repo` carries)."""
        if args.get("state", "present") != "present":
            return BundleNeeds()
        packages = args.get("packages")
        names = packages.split() if isinstance(packages, str) else packages or []
        return BundleNeeds(packages=tuple(str(n).split("=")[0] for n in names if "{{" not in str(n)))

    def through_bundle(self, args: Args, bundle: BundleRoute) -> Args:
        """apt reads the bundle's signed repository alone; the packages it lacks are named
        when the step plans to install them."""
        return dict(args, proxy=None, _bundle_apt=bundle.apt_options(), _bundle_debs=bundle.debs,
                    _bundle_rebuild=bundle.rebuild)

    def plan(self, args: Args, fact: AptState) -> list[Planned]:
        specs, warning = self._locked_specs(args)
        opts = APT_OPTS.format(lock=int(args["lock_timeout"]))
        cmds: list[Planned] = []
        if warning:
            cmds.append(LocalAction(lambda _context: (True, ""), warning, warning=warning))
        if args["state"] == "absent":
            return cmds + self._remove(specs, fact, args, opts)
        todo = [(n, pin) for n, pin in specs
                if n not in fact.installed or (pin and not fnmatch.fnmatchcase(fact.installed[n], pin))]
        if todo and args.get("_bundle_apt"):
            cmds += self._install_from_bundle(todo, args, opts)
        elif todo:
            cmds += self._install_from_sources(todo, args, fact, opts)
        if args["hold"]:
            cmds += self._hold(specs, todo, fact)
        return cmds

    @staticmethod
    def _hold(specs: list[tuple[str, Optional[str]]], todo: list[tuple[str, Optional[str]]],
              fact: AptState) -> list[Planned]:
        """`hold: true`: hold what is not held yet. apt-get install drops an existing hold of
        what it installs (a pinned downgrade or upgrade of a held package): those again too."""
        touched = {n for n, _ in todo}
        unheld = [n for n, _ in specs if n not in fact.held or n in touched]
        return [Command("apt-mark hold " + " ".join(map(q, unheld)))] if unheld else []

    @staticmethod
    def _remove(specs: list[tuple[str, Optional[str]]], fact: AptState, args: Args,
                opts: str) -> list[Planned]:
        """`state: absent`: the installed ones unheld, then removed (or purged)."""
        present = [n for n, _ in specs if n in fact.installed]
        if not present:
            return []
        cmds: list[Planned] = []
        unhold = [n for n in present if n in fact.held]
        if unhold:
            cmds.append(Command("apt-mark unhold " + " ".join(map(q, unhold))))
        action = "purge" if args["purge"] else "remove"
        cmds.append(Command(f"DEBIAN_FRONTEND=noninteractive apt-get {opts} {action} "
                            + " ".join(map(q, present))))
        return cmds

    def _install_from_bundle(self, todo: list[tuple[str, Optional[str]]], args: Args,
                             opts: str) -> list[Planned]:
        """`provision --bundle`: the bundle's own lists, read afresh (a local file, no
        network), then the install from its repository alone; PlanError naming what it lacks."""
        lacking = sorted(n for n, _ in todo if n not in args["_bundle_debs"])
        if lacking:
            raise PlanError(f"apt: {', '.join(lacking)} not in the bundle: add "
                            f"{'them' if len(lacking) > 1 else 'it'} with "
                            f"`{args['_bundle_rebuild']}` (the bundle carries the recipe's "
                            "packages and their dependencies)")
        bundle = args["_bundle_apt"]
        return [apt_update_command(int(args["lock_timeout"]), bundle=bundle),
                self._install(todo, args, opts + bundle)]

    def _install_from_sources(self, todo: list[tuple[str, Optional[str]]], args: Args,
                              fact: AptState, opts: str) -> list[Planned]:
        """The host's sources: their lists updated first when asked and older than
        `cache_valid_time`, then the install."""
        cmds: list[Planned] = []
        stale = fact.now - fact.updated > int(args["cache_valid_time"])
        if args["update_cache"] and stale:
            cmds.append(apt_update_command(int(args["lock_timeout"]), args.get("proxy"),
                                           args.get("proxy_https") or (), args.get("proxy_direct") or ()))
        cmds.append(self._install(todo, args, opts))
        return cmds

    @staticmethod
    def _install(todo: list[tuple[str, Optional[str]]], args: Args, opts: str) -> Command:
        prelude, proxy_opts = proxy_options(args.get("proxy"), args.get("proxy_https") or (),
                                            args.get("proxy_direct") or ())
        opts += proxy_opts
        lines = ["export DEBIAN_FRONTEND=noninteractive", *prelude.splitlines()]
        words = []
        for i, (name, pin) in enumerate(todo):
            if pin and any(c in pin for c in "*?"):
                # apt wants an exact version: pick the newest available one matching the glob.
                lines.append(
                    f"v{i}=$(apt-cache madison {q(name)} | awk -F'|' '{{gsub(/ /, \"\", $2); print $2}}' "
                    f"| while read -r v; do case \"$v\" in {glob_pattern(pin)}) echo \"$v\"; break;; "
                    "esac; done)")
                lines.append(f'[ -n "$v{i}" ] || {{ echo '
                             f'{q(f"apt: no version of {name} matches {pin}")} >&2; exit 100; }}')
                words.append(f'{q(name)}="$v{i}"')
            else:
                words.append(q(f"{name}={pin}" if pin else name))
        flags = ""
        if args["install_recommends"] is False:
            flags += " --no-install-recommends"
        if args["hold"] or any(pin for _, pin in todo):
            flags += " --allow-downgrades --allow-change-held-packages"
        lines.append(f"apt-get {opts}{flags} install " + " ".join(words))
        return _sent("\n".join(lines), args.get("proxy"), display="apt-get install " + " ".join(
            f"{n}={p}" if p else n for n, p in todo)
            + proxy_shown(args.get("proxy"), args.get("proxy_direct") or ()))
