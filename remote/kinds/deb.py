"""The `deb` step kind."""
from __future__ import annotations

import re

from ..errors import PlanError
from .base import Command, Kind, q
from .apt import dpkg_installed


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
        if dpkg_installed(status) and (not wanted or version.strip() == wanted):
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
