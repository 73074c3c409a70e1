"""Step kinds: what each kind of step checks on a host and which commands it needs.

A kind splits its work the way pyinfra's operations do:
- `probe(args)`: a read-only sh snippet whose output describes the current state (or None);
  the runner sends the probes of many steps to a host as one script, one round trip.
- `plan(args, probe)`: the commands needed to reach the target state; empty when it already
  holds, so a converged host runs nothing that changes it.
Values are rendered before `probe`/`plan` see them (`render`), shell fields quoted.
"""
from __future__ import annotations

import fnmatch
import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .errors import Where
from .schema import check_keys, expect, suggest
from .templating import evaluate, parse, render_shell, render_text, render_value


class PlanError(Exception):
    """The host is in a state the step cannot reach from (message says why)."""


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


# --------------------------------------------------------------------------- shell
class Shell(Kind):
    """Run a command. `creates`/`unless` (common keys) make it idempotent."""

    name = "shell"
    fields = {"cmd": str, "chdir": str, "env": dict, "executable": str}
    required = ("cmd",)
    scalar_field = "cmd"
    shell_fields = ("cmd",)

    def plan(self, args, probe):
        parts = []
        if args.get("chdir"):
            parts.append(f"cd {q(args['chdir'])} || exit 1")
        for key, value in (args.get("env") or {}).items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(key)):
                raise PlanError(f"env name {key!r} is not a valid variable name")
            parts.append(f"export {key}={q(str(value))}")
        parts.append(args["cmd"])
        return [Command("\n".join(parts), display=args["cmd"],
                        shell=args.get("executable") or "/bin/sh")]


# --------------------------------------------------------------------------- file
MODE = re.compile(r"^0?[0-7]{3,4}$")

# Answers "absent", "dangling", "directory MODE OWNER GROUP" or "file MODE OWNER GROUP" and the
# content's sha256 on the next line ("HASH  -"). Two commands per file and no subshells: on a
# converged host these run for every file step, so every process counts.
_FILE_PROBE = """P={path}
if [ -L "$P" ] && [ ! -e "$P" ]; then echo dangling
elif [ -d "$P" ]; then printf 'directory '; stat -c '%a %U %G' -- "$P"
elif [ -e "$P" ]; then printf 'file '; stat -c '%a %U %G' -- "$P"; sha256sum < "$P"
else echo absent; fi"""


class File(Kind):
    """A file (with content), a directory, or nothing, with mode and owner; changed only on a
    difference."""

    name = "file"
    fields = {"path": str, "content": str, "mode": (str, int), "owner": str, "group": str,
              "state": str}
    required = ("path",)
    states = ("file", "directory", "absent")
    probe_fields = ("path",)

    def check(self, args, where, base_dir):
        _check_mode(args, where)
        state = args.get("state", "file")
        if state not in self.states:
            raise where.error(f"'{self.name}.state' must be one of {', '.join(self.states)}"
                              f"{suggest(str(state), self.states)}")
        if state != "file" and "content" in args:
            raise where.error(f"'{self.name}': content goes only with state: file")

    def probe(self, args):
        return _FILE_PROBE.format(path=q(args["path"]))

    def plan(self, args, probe):
        return plan_file(args["path"], args.get("content"), args.get("mode"), args.get("owner"),
                         args.get("group"), args.get("state", "file"), probe)


def _check_mode(args: dict, where: Where) -> None:
    mode = args.get("mode")
    if mode is None:
        return
    if isinstance(mode, int):
        raise where.error("write mode as a quoted string such as '0644' (an unquoted number is "
                          "read as decimal or octal depending on the leading zero)")
    if not MODE.match(mode):
        raise where.error(f"mode {mode!r} is not an octal mode such as '0644'")


def plan_file(path: str, content: Optional[str], mode: Optional[str], owner: Optional[str],
              group: Optional[str], state: str, probe: Probe) -> list:
    """Commands that bring `path` to the wanted state, given the file probe's answer."""
    words = probe.out.split()
    current = words[0] if words else "absent"
    P = q(path)
    if state == "absent":
        if current == "absent":
            return []
        flag = "-rf" if current == "directory" else "-f"
        return [Command(f"rm {flag} -- {P}")]
    if current == "dangling":
        raise PlanError(f"{path} is a dangling symbolic link")
    if state == "directory":
        if current == "file":
            raise PlanError(f"{path} is a file, not a directory")
        cmds = [] if current == "directory" else [Command(f"mkdir -p -- {P}")]
        have = words[1:4] if current == "directory" else [None, None, None]
        return cmds + _attr_commands(P, mode, owner, group, have, force=current == "absent")
    if current == "directory":
        raise PlanError(f"{path} is a directory, not a file")
    have = words[1:4] if current == "file" else [None, None, None]
    if content is None:
        cmds = [Command(f"touch -- {P}")] if current == "absent" else []
        return cmds + _attr_commands(P, mode, owner, group, have, force=current == "absent")
    data = content.encode()
    digest = hashlib.sha256(data).hexdigest()
    if current == "file" and len(words) > 4 and words[4] == digest:
        return _attr_commands(P, mode, owner, group, have, force=False)
    # Write to a temporary file beside the target, then rename: never a half-written file.
    keep = "" if mode else f'[ -e {P} ] && chmod --reference={P} "$t" || chmod 0644 "$t"\n'
    own = ""
    if owner or group:
        own = f'chown {q((owner or "") + (":" + group if group else ""))} "$t" || {{ rm -f "$t"; exit 1; }}\n'
    elif current == "file":
        own = f'chown --reference={P} "$t" 2>/dev/null\n'
    chmod = f'chmod {mode} "$t" || {{ rm -f "$t"; exit 1; }}\n' if mode else keep
    script = (f't=$(mktemp "$(dirname -- {P})/.gpuprov.XXXXXX") || exit 1\n'
              f'cat > "$t" || {{ rm -f "$t"; exit 1; }}\n{chmod}{own}mv -f -- "$t" {P}')
    return [Command(script, stdin=data, display=f"write {path} ({len(data)} bytes, sha256 {digest[:12]})")]


def _attr_commands(P, mode, owner, group, have, force) -> list:
    cmds = []
    have_mode, have_owner, have_group = have
    if mode and (force or have_mode is None or int(have_mode, 8) != int(mode, 8)):
        cmds.append(Command(f"chmod {mode} -- {P}"))
    if owner and (force or have_owner != owner):
        cmds.append(Command(f"chown {q(owner)} -- {P}"))
    if group and (force or have_group != group):
        cmds.append(Command(f"chgrp {q(group)} -- {P}"))
    return cmds


# --------------------------------------------------------------------------- template
class Template(Kind):
    """A Jinja2 file (relative to the recipe) rendered with the host's vars and facts to `dest`."""

    name = "template"
    fields = {"src": str, "dest": str, "mode": (str, int), "owner": str, "group": str}
    required = ("src", "dest")
    probe_fields = ("dest",)

    def check(self, args, where, base_dir):
        _check_mode(args, where)
        src = Path(args["src"])
        path = src if src.is_absolute() else base_dir / src
        try:
            args["_source"] = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise where.error(f"template source {path} cannot be read: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
        args["_source_path"] = str(path)
        parse(args["_source"], Where(str(path), 1))

    def templates(self, args):
        return [(args["dest"], False), (args["_source"], False)]

    def render(self, args, context):
        out = super().render({k: v for k, v in args.items() if k != "_source"}, context)
        out["content"] = render_text(args["_source"], context)
        return out

    def probe(self, args):
        return _FILE_PROBE.format(path=q(args["dest"]))

    def plan(self, args, probe):
        return plan_file(args["dest"], args["content"], args.get("mode"), args.get("owner"),
                         args.get("group"), "file", probe)


# --------------------------------------------------------------------------- pip
_PIP_PROBE = """PY={python}
if [ ! -x "$PY" ] && ! command -v "$PY" >/dev/null 2>&1; then echo @missing; exit 0; fi
"$PY" - {names} <<'EOF'
import sys
try:
    from importlib import metadata
except ImportError:
    metadata = None
for name in sys.argv[1:]:
    try:
        print(name + "=" + metadata.version(name))
    except Exception:
        print(name + "=")
EOF"""


class Pip(Kind):
    """Python packages in a virtual environment (created when missing), from an index or mirror;
    satisfied when the installed versions already match."""

    name = "pip"
    fields = {"packages": (list, str), "venv": str, "python": str, "index_url": str,
              "extra_index_url": (list, str), "state": str, "extra_args": list}
    required = ("packages",)
    probe_fields = ("packages", "venv", "python")

    def check(self, args, where, base_dir):
        from packaging.requirements import InvalidRequirement, Requirement

        if isinstance(args["packages"], str) and "{{" not in args["packages"]:
            args["packages"] = args["packages"].split()
        for spec in _listed(args["packages"]):
            if "{{" in str(spec):
                continue
            try:
                req = Requirement(str(spec))
            except InvalidRequirement as exc:
                raise where.error(f"pip: {spec!r} is not a requirement: {exc}") from None
            if req.url:
                raise where.error(f"pip: {spec!r}: URL requirements cannot be checked for "
                                  "idempotence; use a shell step with creates:")
        if args.get("state", "present") not in ("present", "absent"):
            raise where.error("pip.state must be present or absent")

    def _python(self, args) -> str:
        if args.get("venv"):
            return args["venv"].rstrip("/") + "/bin/python"
        return args.get("python") or "python3"

    def probe(self, args):
        from packaging.requirements import Requirement

        names = " ".join(q(Requirement(str(s)).name) for s in _listed(args["packages"]))
        return _PIP_PROBE.format(python=q(self._python(args)), names=names)

    def plan(self, args, probe):
        from packaging.requirements import Requirement

        reqs = [Requirement(str(s)) for s in _listed(args["packages"])]
        missing_env = probe.out.strip() == "@missing"
        installed = {}
        for line in probe.out.splitlines():
            name, _, version = line.partition("=")
            installed[name] = version
        py = q(self._python(args))
        cmds = []
        if args.get("state", "present") == "absent":
            present = [r.name for r in reqs if installed.get(r.name)]
            if present and not missing_env:
                cmds.append(Command(f"{py} -m pip uninstall -y -q " + " ".join(map(q, present))))
            return cmds
        todo = [r for r in reqs if not installed.get(r.name)
                or not r.specifier.contains(installed[r.name], prereleases=True)]
        if not todo:
            return []
        if missing_env:
            if not args.get("venv"):
                raise PlanError(f"python {self._python(args)} not found on the host")
            base = q(args.get("python") or "python3")
            cmds.append(Command(f"{base} -m venv {q(args['venv'])}"))
        opts = ["--disable-pip-version-check", "--no-input", "-q"]
        if args.get("index_url"):
            opts += ["--index-url", q(args["index_url"])]
        extra = args.get("extra_index_url") or []
        for url in [extra] if isinstance(extra, str) else extra:
            opts += ["--extra-index-url", q(url)]
        opts += [q(str(a)) for a in args.get("extra_args") or []]
        cmds.append(Command(f"{py} -m pip install {' '.join(opts)} " +
                            " ".join(q(str(r)) for r in todo)))
        return cmds


# --------------------------------------------------------------------------- apt
APT_SPEC = re.compile(r"^([a-z0-9][a-z0-9+.-]*)(?::[a-z0-9]+)?(?:=([A-Za-z0-9.+:~*?_-]+))?$")
APT_STAMP = "/var/lib/apt/lists/.gpuprov-updated"
APT_OPTS = ("-y -q -o DPkg::Lock::Timeout={lock} -o Dpkg::Options::=--force-confdef "
            "-o Dpkg::Options::=--force-confold")


def _dpkg_installed(abbrev: str) -> bool:
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
                if len(parts) == 3 and _dpkg_installed(parts[1]):
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


# --------------------------------------------------------------------------- deb
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class Deb(Kind):
    """A .deb downloaded from `url`, verified against `sha256`, installed with dpkg; satisfied
    when package `name` is installed (at `version`, when given)."""

    name = "deb"
    fields = {"name": str, "url": str, "sha256": str, "version": str}
    required = ("name", "url", "sha256")
    probe_fields = ("name",)

    def check(self, args, where, base_dir):
        sha = args["sha256"]
        if "{{" not in sha and not SHA256.match(sha):
            raise where.error("deb.sha256 must be 64 lowercase hex digits")

    def probe(self, args):
        return (f"dpkg-query -W -f='${{db:Status-Abbrev}}\t${{Version}}\n' -- {q(args['name'])} "
                "2>/dev/null")

    def plan(self, args, probe):
        status, _, version = probe.out.partition("\t")
        wanted = args.get("version")
        if _dpkg_installed(status) and (not wanted or version.strip() == wanted):
            return []
        if not SHA256.match(args["sha256"]):
            raise PlanError(f"deb {args['name']}: sha256 {args['sha256']!r} is not 64 hex digits")
        url = q(args["url"])
        script = (
            't=$(mktemp --suffix=.deb) || exit 1\ntrap \'rm -f "$t"\' EXIT\n'
            f'if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 3 -o "$t" {url}\n'
            f'elif command -v wget >/dev/null 2>&1; then wget -q -O "$t" {url}\n'
            'else echo "neither curl nor wget is installed" >&2; exit 1; fi || exit 1\n'
            f'echo "{args["sha256"]}  $t" | sha256sum -c --quiet - >/dev/null 2>&1 || '
            f'{{ echo "checksum mismatch for {args["url"]}: got $(sha256sum "$t" | cut -c1-64)" >&2; exit 1; }}\n'
            'DEBIAN_FRONTEND=noninteractive dpkg -i "$t"')
        return [Command(script, display=f"download {args['url']}, verify sha256 "
                                        f"{args['sha256'][:12]}..., dpkg -i")]


# --------------------------------------------------------------------------- reboot
class Reboot(Kind):
    """Reboot the host and wait until it is back with a new boot_id (refused on the local
    connection: that would reboot the control machine)."""

    name = "reboot"
    fields = {"timeout": (int, float, str), "msg": str}
    scalar_field = "msg"

    def plan(self, args, probe):
        return [Command("reboot", display=f"reboot and wait up to {self.timeout(args):g} s for a "
                                          "new boot_id")]

    @staticmethod
    def timeout(args) -> float:
        try:
            return float(args.get("timeout", 900))
        except (TypeError, ValueError):
            raise PlanError(f"reboot.timeout {args.get('timeout')!r} is not a number") from None

    def run_on_host(self, host_run, args) -> tuple:
        """(status, message). Called by the runner instead of running the plan's command."""
        return host_run.reboot(self.timeout(args))


# --------------------------------------------------------------------------- assert
class Assert(Kind):
    """Conditions over facts and vars, checked on the control side; fails with `msg`."""

    name = "assert"
    fields = {"that": (list, str), "msg": str}
    required = ("that",)
    scalar_field = "that"
    remote = False

    def check(self, args, where, base_dir):
        if isinstance(args["that"], str):
            args["that"] = [args["that"]]
        for expr in args["that"]:
            if not isinstance(expr, (str, bool)):
                raise where.error("assert.that must hold expressions (strings)")

    def templates(self, args):
        return [(args.get("msg", ""), False)]

    def expressions(self, args):
        return [e for e in args["that"] if isinstance(e, str)]

    def render(self, args, context):
        return args  # expressions are evaluated in run_local, msg rendered there

    def run_local(self, args, context) -> tuple:
        for expr in args["that"]:
            if not evaluate(expr, context):
                msg = render_text(args.get("msg") or "", context)
                return False, msg or f"assertion failed: {expr}"
        return True, ""


KINDS = {kind.name: kind for kind in (Shell(), File(), Template(), Pip(), Apt(), Deb(), Reboot(),
                                      Assert())}
