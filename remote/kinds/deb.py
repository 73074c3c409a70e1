"""The `deb` step kind."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.schema import Arg
from ..ground.errors import PlanError, Where
from .apt import dpkg_installed
from .base import Args, Command, Kind, q, redacted_url, with_env
from .route import BundleNeeds, CarriedFile, HostOnly

if TYPE_CHECKING:
    from .route import BundleRoute, BundleTarget

SHA256 = re.compile(r"[0-9a-f]{64}")  # used with fullmatch: `$` would pass a final newline


@dataclass
class DebState:
    """What dpkg says of one package: installed or not, and at which version."""

    installed: bool
    version: str


class DebFile(CarriedFile):
    """A `deb` step's file in a bundle: apt/SHA256.deb."""

    kind = "deb"
    suffix = ".deb"


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
    fetches = True   # its download: under `provision --bundle`, the bundle's copy instead

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

    def bundle_carries(self, args: Args, target: BundleTarget) -> BundleNeeds:
        """The step's file, its url and sha256 rendered for the target; or, where they read
        what only the host knows or the sha256 is not one, named and left out (a host that
        needs it is told so by `_from_bundle`)."""
        name = str(args["name"])
        try:
            url, sha = (str(v) for v in target.render([args["url"], args["sha256"]]))
        except HostOnly as exc:
            return BundleNeeds(files=(DebFile(name, args["url"], args["sha256"],
                                              f"its url or sha256 reads {exc}, known only on the host"),))
        if not SHA256.fullmatch(sha):
            return BundleNeeds(files=(DebFile(name, url, sha, f"its sha256 renders to {sha!r} for "
                                                              f"{target.distro} {target.arch}, not 64 hex digits"),))
        return BundleNeeds(files=(DebFile(name, url, sha),))

    def through_bundle(self, args: Args, bundle: BundleRoute) -> Args:
        """The .deb from the bundle unpacked on the host (`provision --bundle`), found by its
        sha256 among the bundle's files (`gpuprov bundle` carries a recipe's literal `deb`
        steps); `plan` names it when the bundle lacks it."""
        found = bundle.files.get(str(args["sha256"]))
        return dict(args, _bundle_file=f"{bundle.root}/{found}" if found else "",
                    _bundle_rebuild=bundle.rebuild)

    def plan(self, args: Args, fact: DebState) -> list[Command]:
        wanted = args["version"]
        if fact.installed and (not wanted or fact.version == wanted):
            return []
        if not SHA256.fullmatch(args["sha256"]):
            raise PlanError(f"deb {args['name']}: sha256 {args['sha256']!r} is not 64 hex digits")
        if "_bundle_rebuild" in args:
            return [self._from_bundle(args)]
        url = str(args["url"])
        if any(ord(c) < 0x20 or ord(c) == 0x7f for c in url):  # one line of curl's config
            raise PlanError(f"deb {args['name']}: the url holds a control character")
        # The URL may carry a token or a password, and every local user of the host reads
        # every process's arguments (/proc/PID/cmdline). So the script travels on stdin
        # (`with_env`) and the downloaders read the URL from their stdin, written there by the
        # shell's own printf (a builtin: no process, no argument list): curl's `-K -` reads
        # its options, `url = "..."` among them, from stdin (curl(1), --config: "Specify the
        # filename to -K, --config as '-' to make curl read the file from stdin"; within
        # double quotes `\\` and `\"` are escapes); wget's `-i -` its URLs (wget(1),
        # --input-file: "If - is specified as file, URLs are read from the standard input").
        curl_config = 'url = "' + url.replace("\\", "\\\\").replace('"', '\\"') + '"'
        script = (
            't=$(mktemp --suffix=.deb) || exit 1\ntrap \'rm -f "$t"\' EXIT\n'
            'if command -v curl >/dev/null 2>&1; then '
            f"printf '%s\\n' {q(curl_config)} | curl -fsSL --retry 3 -o \"$t\" -K -\n"
            'elif command -v wget >/dev/null 2>&1; then '
            f"printf '%s\\n' {q(url)} | wget -q -O \"$t\" -i -\n"
            'else echo "neither curl nor wget is installed" >&2; exit 1; fi || exit 1\n'
            f'echo {q(args["sha256"])}"  $t" | sha256sum -c --quiet - >/dev/null 2>&1 || '
            f"{{ printf 'checksum mismatch for %s: got %s\\n' {q(redacted_url(url))} "
            '"$(sha256sum "$t" | cut -c1-64)" >&2; exit 1; }\n'
            'DEBIAN_FRONTEND=noninteractive dpkg -i "$t"')
        return [with_env(script, {}, script_on_stdin=True,
                         display=f"download {redacted_url(url)}, verify sha256 "
                                 f"{args['sha256'][:12]}..., dpkg -i")]

    @staticmethod
    def _from_bundle(args: Args) -> Command:
        """dpkg -i of the bundle's copy, checked against the step's sha256 again on the host;
        PlanError naming the file and the command that carries it when the bundle lacks it."""
        path = args["_bundle_file"]
        if not path:
            raise PlanError(f"deb {args['name']}: {redacted_url(str(args['url']))} (sha256 "
                            f"{args['sha256'][:12]}...) is not in the bundle: make it again with "
                            f"`{args['_bundle_rebuild']}`, which carries the recipe's deb steps "
                            "(one whose url or sha256 reads a fact or var only the host knows is not: "
                            "write it out)")
        script = (f"echo {q(args['sha256'])}'  '{q(path)} | sha256sum -c --quiet - >/dev/null 2>&1 || "
                  f"{{ printf 'checksum mismatch for %s\\n' {q(path)} >&2; exit 1; }}\n"
                  f"DEBIAN_FRONTEND=noninteractive dpkg -i {q(path)}")
        return Command(script, display=f"verify sha256 {args['sha256'][:12]}..., dpkg -i {path} "
                                       "(the bundle's)")
