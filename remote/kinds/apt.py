"""The `apt` step kind."""
from __future__ import annotations

import fnmatch
import re

from ..errors import PlanError
from .base import Command, Kind, _listed, q


APT_SPEC = re.compile(r"^([a-z0-9][a-z0-9+.-]*)(?::[a-z0-9]+)?(?:=([A-Za-z0-9.+:~*?_-]+))?$")
APT_STAMP = "/var/lib/apt/lists/.gpuprov-updated"
APT_OPTS = ("-y -q -o DPkg::Lock::Timeout={lock} -o Dpkg::Options::=--force-confdef "
            "-o Dpkg::Options::=--force-confold")


def dpkg_installed(abbrev: str) -> bool:
    """True for an installed package, from dpkg's ${db:Status-Abbrev}: the second letter is the
    package's state (`ii ` installed; `hi ` installed and held, as after `apt-mark hold`)."""
    return len(abbrev) >= 2 and abbrev[1] == "i"


def apt_update_command(lock_timeout: int = 600) -> Command:
    """`apt-get update` that fails on any fetch error (plain apt-get exits 0 on network errors)."""
    script = (
        f"export DEBIAN_FRONTEND=noninteractive\n"
        f"out=$(apt-get update -q -o DPkg::Lock::Timeout={lock_timeout} 2>&1); rc=$?\n"
        "printf '%s\\n' \"$out\"\n"
        "if [ $rc -ne 0 ] || printf '%s\\n' \"$out\" | grep -qE "
        "'^(E:|Err:|W: (Failed to fetch|Some index files failed))'; then\n"
        "  echo 'apt-get update reported errors (see above)' >&2; exit 1\nfi\n"
        f"touch {APT_STAMP}")
    return Command(script, display="apt-get update")


class Apt(Kind):
    """Debian packages present or absent, with version pins (globs allowed: `pkg=550.*`), an
    optional hold, and a cache refresh only when something must be installed and the cache is
    older than `cache_valid_time`. Waits for the dpkg lock (cloud-init, unattended-upgrades)."""

    name = "apt"
    fields = {"packages": (list, str), "state": str, "update_cache": bool,
              "cache_valid_time": int, "hold": bool, "install_recommends": bool,
              "lock_timeout": int, "purge": bool}
    required = ("packages",)
    probe_fields = ("packages", "hold", "state")

    def check(self, args, where, base_dir):
        if isinstance(args["packages"], str) and "{{" not in args["packages"]:
            args["packages"] = args["packages"].split()
        for spec in _listed(args["packages"]):
            if "{{" not in str(spec) and not APT_SPEC.match(str(spec)):
                raise where.error(f"apt: {spec!r} is not a package name (pin as name=version)")
        if args.get("state", "present") not in ("present", "absent"):
            raise where.error("apt.state must be present or absent")

    @staticmethod
    def _specs(args) -> list:
        specs = []
        for spec in _listed(args["packages"]):
            match = APT_SPEC.match(str(spec))
            if not match:
                raise PlanError(f"apt: {spec!r} is not a package name")
            specs.append((match.group(1), match.group(2)))
        return specs

    def probe(self, args):
        names = " ".join(q(n) for n, _ in self._specs(args))
        return ("dpkg-query -W -f='${Package}\\t${db:Status-Abbrev}\\t${Version}\\n' -- "
                f"{names} 2>/dev/null\n"
                'echo "@now $(date +%s)"\n'
                f"s=0; for f in /var/lib/apt/periodic/update-success-stamp {APT_STAMP}; do "
                '[ -e "$f" ] && t=$(stat -c %Y "$f") && [ "$t" -gt "$s" ] && s=$t; done\n'
                'echo "@updated $s"'
                # apt-mark is slow (it loads the cache): ask only when holds matter.
                + ("\napt-mark showhold 2>/dev/null | sed 's/^/@held /'"
                   if args.get("hold") or args.get("state") == "absent" else ""))

    def plan(self, args, probe):
        installed, held, now, updated = {}, set(), 0, 0
        for line in probe.out.splitlines():
            if line.startswith("@now "):
                now = int(line.split()[1] or 0)
            elif line.startswith("@updated "):
                updated = int(line.split()[1] or 0)
            elif line.startswith("@held "):
                held.add(line.split()[1].split(":")[0])
            else:
                parts = line.split("\t")
                if len(parts) == 3 and dpkg_installed(parts[1]):
                    installed[parts[0]] = parts[2]
        specs = self._specs(args)
        lock = int(args.get("lock_timeout", 600))
        opts = APT_OPTS.format(lock=lock)
        cmds = []
        if args.get("state", "present") == "absent":
            present = [n for n, _ in specs if n in installed]
            if present:
                unhold = [n for n in present if n in held]
                if unhold:
                    cmds.append(Command("apt-mark unhold " + " ".join(map(q, unhold))))
                action = "purge" if args.get("purge") else "remove"
                cmds.append(Command(f"DEBIAN_FRONTEND=noninteractive apt-get {opts} {action} "
                                    + " ".join(map(q, present))))
            return cmds
        todo = [(n, pin) for n, pin in specs
                if n not in installed or (pin and not fnmatch.fnmatchcase(installed[n], pin))]
        if todo:
            stale = now - updated > int(args.get("cache_valid_time", 3600))
            if args.get("update_cache") and stale:
                cmds.append(apt_update_command(lock))
            cmds.append(self._install(todo, args, opts))
        if args.get("hold"):
            # apt-get install drops an existing hold of what it installs (a pinned downgrade
            # or upgrade of a held package): hold those again too.
            touched = {n for n, _ in todo}
            unheld = [n for n, _ in specs if n not in held or n in touched]
            if unheld:
                cmds.append(Command("apt-mark hold " + " ".join(map(q, unheld))))
        return cmds

    @staticmethod
    def _install(todo: list, args: dict, opts: str) -> Command:
        lines = ["export DEBIAN_FRONTEND=noninteractive"]
        words = []
        for i, (name, pin) in enumerate(todo):
            if pin and any(c in pin for c in "*?"):
                # apt wants an exact version: pick the newest available one matching the glob.
                lines.append(
                    f"v{i}=$(apt-cache madison {q(name)} | awk -F'|' '{{gsub(/ /, \"\", $2); print $2}}' "
                    f"| while read -r v; do case \"$v\" in {pin}) echo \"$v\"; break;; esac; done)")
                lines.append(f'[ -n "$v{i}" ] || {{ echo "apt: no version of {name} matches '
                             f'{pin}" >&2; exit 100; }}')
                words.append(f'{q(name)}="$v{i}"')
            else:
                words.append(q(f"{name}={pin}" if pin else name))
        flags = ""
        if args.get("install_recommends") is False:
            flags += " --no-install-recommends"
        if args.get("hold") or any(pin for _, pin in todo):
            flags += " --allow-downgrades --allow-change-held-packages"
        lines.append(f"apt-get {opts}{flags} install " + " ".join(words))
        return Command("\n".join(lines), display="apt-get install " + " ".join(
            f"{n}={p}" if p else n for n, p in todo))
