"""The `deb` step kind."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..config.schema import Arg
from ..errors import PlanError, Where
from .apt import dpkg_installed
from .base import Args, Command, Kind, q

SHA256 = re.compile(r"[0-9a-f]{64}")  # used with fullmatch: `$` would pass a final newline


@dataclass
class DebState:
    """What dpkg says of one package: installed or not, and at which version."""

    installed: bool
    version: str


class Deb(Kind[DebState]):
    """A .deb downloaded from `url`, verified against `sha256`, installed with dpkg; satisfied
    when package `name` is installed (at `version`, when given)."""

    name = "deb"
    spec = {
        "name": Arg((str,), required=True),
        "url": Arg((str,), required=True),
        "sha256": Arg((str,), required=True),
        "version": Arg((str,), None),
    }
    probe_fields = ("name",)

    def check(self, args: Args, where: Where, base_dir: Path) -> None:
        sha = args["sha256"]
        if "{{" not in sha and not SHA256.fullmatch(sha):
            raise where.error("deb.sha256 must be 64 lowercase hex digits")

    def probe(self, args: Args) -> str:
        return (f"dpkg-query -W -f='${{db:Status-Abbrev}}\t${{Version}}\n' -- {q(args['name'])} "
                "2>/dev/null")

    def parse(self, out: str) -> DebState:
        status, _, version = out.partition("\n")[0].partition("\t")
        return DebState(dpkg_installed(status), version.strip())

    def plan(self, args: Args, fact: DebState) -> list[Command]:
        wanted = args["version"]
        if fact.installed and (not wanted or fact.version == wanted):
            return []
        if not SHA256.fullmatch(args["sha256"]):
            raise PlanError(f"deb {args['name']}: sha256 {args['sha256']!r} is not 64 hex digits")
        url = q(args["url"])
        script = (
            't=$(mktemp --suffix=.deb) || exit 1\ntrap \'rm -f "$t"\' EXIT\n'
            f'if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 3 -o "$t" -- {url}\n'
            f'elif command -v wget >/dev/null 2>&1; then wget -q -O "$t" -- {url}\n'
            'else echo "neither curl nor wget is installed" >&2; exit 1; fi || exit 1\n'
            f'echo {q(args["sha256"])}"  $t" | sha256sum -c --quiet - >/dev/null 2>&1 || '
            f"{{ printf 'checksum mismatch for %s: got %s\\n' {url} "
            '"$(sha256sum "$t" | cut -c1-64)" >&2; exit 1; }\n'
            'DEBIAN_FRONTEND=noninteractive dpkg -i "$t"')
        return [Command(script, display=f"download {args['url']}, verify sha256 "
                                        f"{args['sha256'][:12]}..., dpkg -i")]
