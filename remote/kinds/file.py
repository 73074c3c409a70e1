"""The `file` step kind."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..config.schema import Arg
from ..ground.errors import PlanError, Where
from .base import Args, Command, Kind, q

MODE = re.compile(r"0?[0-7]{3,4}")  # used with fullmatch: `$` would pass a final newline
OCTAL = re.compile(r"[0-7]{1,4}")  # a mode as `stat -c %a` prints it

# Answers "absent", "dangling", "directory MODE OWNER GROUP" or "file MODE OWNER GROUP" and the
# content's sha256 on the next line ("HASH  -"). Two commands per file and no subshells: on a
# converged host these run for every file step, so every process counts.
FILE_PROBE = """P={path}
if [ -L "$P" ] && [ ! -e "$P" ]; then echo dangling
elif [ -d "$P" ]; then printf 'directory '; stat -c '%a %U %G' -- "$P"
elif [ -e "$P" ]; then printf 'file '; stat -c '%a %U %G' -- "$P"; sha256sum < "$P"
else echo absent; fi"""


@dataclass
class FileState:
    """What the file probe says of a path: `what` is absent, dangling (a symbolic link to
    nothing), directory or file; mode (octal digits), owner and group when it exists; the
    content's sha256 for a file."""

    what: str
    mode: Optional[str] = None
    owner: Optional[str] = None
    group: Optional[str] = None
    sha256: Optional[str] = None


def parse_file_state(out: str) -> FileState:
    words = out.split()
    if not words or words[0] not in ("directory", "file"):
        return FileState(words[0] if words else "absent")
    mode, owner, group = (words[1:4] + [None, None, None])[:3]
    if mode is not None and not OCTAL.fullmatch(mode):
        mode = None  # not what stat prints: read as unknown, so a wanted mode is set again
    return FileState(words[0], mode, owner, group, words[4] if len(words) > 4 else None)


# What the file and template kinds share: where the file goes and who owns it.
FILE_SPEC = {
    "mode": Arg((str, int)),
    "owner": Arg((str,)),
    "group": Arg((str,)),
}


class File(Kind[FileState]):
    """A file (with content), a directory, or nothing, with mode and owner; changed only on a
    difference."""

    name = "file"
    spec = {
        "path": Arg((str,), required=True),
        "content": Arg((str,)),
        **FILE_SPEC,
        "state": Arg((str,), "file", choices=("file", "directory", "absent")),
    }
    probe_fields = ("path",)

    def check(self, args: Args, where: Where, base_dir: Path) -> None:
        check_mode(args, where)
        if args["state"] != "file" and args["content"] is not None:
            raise where.error(f"'{self.name}': content goes only with state: file")

    def probe(self, args: Args) -> str:
        return FILE_PROBE.format(path=q(args["path"]))

    def parse(self, out: str) -> FileState:
        return parse_file_state(out)

    def plan(self, args: Args, fact: FileState) -> list[Command]:
        return plan_file(args["path"], args["content"], args["mode"], args["owner"],
                         args["group"], args["state"], fact)

    def diff_target(self, args: Args, fact: FileState) -> Optional[tuple[str, str, bool]]:
        if args["state"] != "file" or args["content"] is None:
            return None
        return content_change(args["path"], args["content"], fact)


def content_change(path: str, content: str, fact: FileState) -> Optional[tuple[str, str, bool]]:
    """(path, content, exists) when `content` differs from what the probe saw at `path`."""
    if fact.what == "file" and fact.sha256 == hashlib.sha256(content.encode()).hexdigest():
        return None
    return path, content, fact.what == "file"


def check_mode(args: Args, where: Where) -> None:
    mode = args["mode"]
    if mode is None:
        return
    if isinstance(mode, int):
        raise where.error("write mode as a quoted string such as '0644' (an unquoted number is "
                          "read as decimal or octal depending on the leading zero)")
    if not MODE.fullmatch(mode):
        raise where.error(f"mode {mode!r} is not an octal mode such as '0644'")


def plan_file(path: str, content: Optional[str], mode: Optional[str], owner: Optional[str],
              group: Optional[str], state: str, fact: FileState) -> list[Command]:
    """Commands that bring `path` to the wanted state, given what the file probe says."""
    current = fact.what
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
        return cmds + _attr_commands(P, mode, owner, group, fact, force=current == "absent")
    if current == "directory":
        raise PlanError(f"{path} is a directory, not a file")
    if content is None:
        cmds = [Command(f"touch -- {P}")] if current == "absent" else []
        return cmds + _attr_commands(P, mode, owner, group, fact, force=current == "absent")
    data = content.encode()
    digest = hashlib.sha256(data).hexdigest()
    if current == "file" and fact.sha256 == digest:
        return _attr_commands(P, mode, owner, group, fact, force=False)
    # Write to a temporary file beside the target, then rename: never a half-written file.
    keep = "" if mode else f'[ -e {P} ] && chmod --reference={P} "$t" || chmod 0644 "$t"\n'
    own = ""
    if owner or group:
        own = f'chown {q((owner or "") + (":" + group if group else ""))} "$t" || {{ rm -f "$t"; exit 1; }}\n'
    elif current == "file":
        own = f'chown --reference={P} "$t" 2>/dev/null\n'
    chmod = f'chmod {q(mode)} "$t" || {{ rm -f "$t"; exit 1; }}\n' if mode else keep
    script = (f't=$(mktemp "$(dirname -- {P})/.gpuprov.XXXXXX") || exit 1\n'
              f'cat > "$t" || {{ rm -f "$t"; exit 1; }}\n{chmod}{own}mv -f -- "$t" {P}')
    return [Command(script, stdin=data, display=f"write {path} ({len(data)} bytes, sha256 {digest[:12]})")]


def _attr_commands(P: str, mode: Optional[str], owner: Optional[str], group: Optional[str],
                   have: FileState, force: bool) -> list[Command]:
    """chmod/chown/chgrp where `have` differs from what is wanted (all of them when `force`)."""
    cmds = []
    if mode and (force or have.mode is None or int(have.mode, 8) != int(mode, 8)):
        cmds.append(Command(f"chmod {q(mode)} -- {P}"))
    if owner and (force or have.owner != owner):
        cmds.append(Command(f"chown {q(owner)} -- {P}"))
    if group and (force or have.group != group):
        cmds.append(Command(f"chgrp {q(group)} -- {P}"))
    return cmds
