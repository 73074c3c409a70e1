"""The `file` step kind."""
from __future__ import annotations

import hashlib
import re
from typing import Optional

from ..errors import PlanError, Where
from ..config.schema import suggest
from .base import Command, Kind, Probe, q


MODE = re.compile(r"^0?[0-7]{3,4}$")

# Answers "absent", "dangling", "directory MODE OWNER GROUP" or "file MODE OWNER GROUP" and the
# content's sha256 on the next line ("HASH  -"). Two commands per file and no subshells: on a
# converged host these run for every file step, so every process counts.
FILE_PROBE = """P={path}
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
        check_mode(args, where)
        state = args.get("state", "file")
        if state not in self.states:
            raise where.error(f"'{self.name}.state' must be one of {', '.join(self.states)}"
                              f"{suggest(str(state), self.states)}")
        if state != "file" and "content" in args:
            raise where.error(f"'{self.name}': content goes only with state: file")

    def probe(self, args):
        return FILE_PROBE.format(path=q(args["path"]))

    def plan(self, args, probe):
        return plan_file(args["path"], args.get("content"), args.get("mode"), args.get("owner"),
                         args.get("group"), args.get("state", "file"), probe)


def check_mode(args: dict, where: Where) -> None:
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
