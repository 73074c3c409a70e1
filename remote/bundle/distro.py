"""A private apt configuration for another distribution's packages: what `gpuprov bundle
--distro X` reads the .debs of X from when this machine is not X (or `--mirror` names a mirror,
or `--arch` another architecture).

One scratch folder holds it all: its own sources (the target's archive, deb822), its own
Dir::State (package lists, an empty dpkg status), Dir::Cache and Dir::Etc, so neither this
machine's sources, its apt.conf.d nor its package lists are read or changed, and no root is
needed. apt reads it through APT_CONFIG, the file it reads first; Dir::Etc then points the
parts and main configuration at the scratch folder (apt.conf(5), "the file specified by the
APT_CONFIG environment variable (if any)" comes first, then "all files in Dir::Etc::Parts", then
"the main configuration file specified by Dir::Etc::main";
https://manpages.debian.org/bookworm/apt/apt.conf.5.en.html). The archive is trusted through
its own key as Signed-By (sources.list(5)), read from the keyring package's file on this
machine, never `[trusted=yes]`; `apt-get update` then checks the Release files against it and
the .debs are checked against that index's SHA256 (build.fetch_debs), as for this machine's own
sources.

What is taken from this machine: its apt proxy settings (Acquire::http::Proxy,
Acquire::https::Proxy and their per-host forms, as `apt-config dump` shows them; apt reads the
http_proxy variable itself) and its mirror credentials (Dir::Etc::netrc, auth.conf(5)), so a
site's company mirror and proxy work as they do for this machine's apt.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..ground.errors import InputError

# The archives' defaults are debootstrap's (debootstrap 1.0.128, /usr/share/debootstrap/scripts/
# on Debian 12: `sid` (trixie and bookworm link to it) line 5 "keyring
# /usr/share/keyrings/debian-archive-keyring.gpg", its mirror http://deb.debian.org/debian
# (debootstrap(8), "MIRROR ... defaults to http://deb.debian.org/debian"); `gutsy` (jammy and
# noble link to it) line 30 "keyring /usr/share/keyrings/ubuntu-archive-keyring.gpg", lines 8
# and 18 "default_mirror http://archive.ubuntu.com/ubuntu" for amd64 and i386 and
# "http://ports.ubuntu.com/ubuntu-ports" for the other architectures). The security archives:
# Debian's http://deb.debian.org/debian-security with suite CODENAME-security
# (https://wiki.debian.org/SourcesList, "Example sources.list"; remote/sandbox/rootfs.py uses the
# same), Ubuntu's http://security.ubuntu.com/ubuntu (ports.ubuntu.com for other architectures)
# with CODENAME-security, as Ubuntu's installed /etc/apt/sources.list writes them (unsourced
# here: Ubuntu's archive cannot be reached from this project's machines).
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY = "http://deb.debian.org/debian-security"
UBUNTU_MIRROR = "http://archive.ubuntu.com/ubuntu"
UBUNTU_SECURITY = "http://security.ubuntu.com/ubuntu"
UBUNTU_PORTS = "http://ports.ubuntu.com/ubuntu-ports"


@dataclass(frozen=True)
class Archive:
    """Where a distribution's packages come from: its codename, components, the keyring file
    its Release files are signed with (and the package that installs that file)."""

    codename: str
    components: tuple[str, ...]
    keyring: str
    keyring_package: str


_DEBIAN = ("main",)
_UBUNTU = ("main", "universe")   # g++ and python3-venv are in main; a recipe's extra packages
                                 # are often in universe
ARCHIVES = {
    "debian12": Archive("bookworm", _DEBIAN, "/usr/share/keyrings/debian-archive-keyring.gpg",
                        "debian-archive-keyring"),
    "debian13": Archive("trixie", _DEBIAN, "/usr/share/keyrings/debian-archive-keyring.gpg",
                        "debian-archive-keyring"),
    "ubuntu2204": Archive("jammy", _UBUNTU, "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
                          "ubuntu-keyring"),
    "ubuntu2404": Archive("noble", _UBUNTU, "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
                          "ubuntu-keyring"),
}


def default_mirrors(distro_name: str, arch: str) -> tuple[str, str]:
    """(archive, security archive) of `distro_name` for Debian architecture `arch`."""
    if distro_name.startswith("ubuntu"):
        if arch in ("amd64", "i386"):
            return UBUNTU_MIRROR, UBUNTU_SECURITY
        return UBUNTU_PORTS, UBUNTU_PORTS
    return DEBIAN_MIRROR, DEBIAN_SECURITY


def sources(distro_name: str, arch: str, mirror: str = "", security: str = "") -> str:
    """The deb822 sources of `distro_name` for `arch`: the archive's CODENAME and
    CODENAME-updates, and CODENAME-security from the security archive, each Signed-By the
    archive's keyring. `mirror` replaces the archive; `security` the security archive (default:
    the distribution's own, or `mirror` for Ubuntu, whose mirrors carry -security too)."""
    archive = ARCHIVES[distro_name]
    main, sec = default_mirrors(distro_name, arch)
    if mirror and distro_name.startswith("ubuntu"):
        sec = mirror
    main, sec = mirror or main, security or sec
    common = (f"Components: {' '.join(archive.components)}\nArchitectures: {arch}\n"
              f"Signed-By: {archive.keyring}\n")
    return (f"Types: deb\nURIs: {main}\nSuites: {archive.codename} {archive.codename}-updates\n"
            f"{common}\n"
            f"Types: deb\nURIs: {sec}\nSuites: {archive.codename}-security\n{common}")


def host_proxy_lines() -> list[str]:
    """This machine's apt proxy settings as apt.conf lines (`apt-config dump`: its
    configuration as apt reads it, Acquire::http::Proxy "..."; and per-host forms); none when
    apt-config is missing."""
    env = {k: v for k, v in os.environ.items() if k != "APT_CONFIG"}
    try:
        out = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, env=env,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in out.splitlines()
            if line.split(" ", 1)[0].lower().startswith(("acquire::http::proxy",
                                                         "acquire::https::proxy"))]


def _quoted(value: str) -> str:
    if any(c in value for c in '"\n;{}'):
        raise InputError(f"{value!r}: not usable in an apt configuration (quote, brace or "
                         "semicolon)")
    return f'"{value}"'


def check(distro_name: str, mirror: str = "", security: str = "") -> None:
    """InputError (one line) when the private configuration of `distro_name` cannot be made:
    its archive's keyring is not on this machine, or a mirror is not a URL apt reads."""
    archive = ARCHIVES[distro_name]
    if not Path(archive.keyring).is_file():
        raise InputError(f"--distro {distro_name}: {archive.keyring}, the key {distro_name}'s "
                         f"archive is signed with, is not on this machine (install the package "
                         f"{archive.keyring_package})")
    for option, url in (("--mirror", mirror), ("--security-mirror", security)):
        if url and not url.startswith(("http://", "https://", "file:/")):
            raise InputError(f"{option} {url}: not an http://, https:// or file: URL")
        if url:
            _quoted(url)


def private_apt(root: Path, distro_name: str, arch: str, mirror: str = "",
                security: str = "") -> dict[str, str]:
    """Write the private apt configuration for `distro_name` on `arch` into `root` (a new,
    empty folder of this build) and return the environment that makes apt-get and apt-cache
    read it (APT_CONFIG). InputError when the archive's keyring is not on this machine."""
    check(distro_name, mirror, security)
    etc, state, cache = root / "etc", root / "state", root / "cache"
    for folder in (etc / "apt.conf.d", etc / "preferences.d", etc / "sources.list.d",
                   etc / "trusted.gpg.d", state / "lists" / "partial",
                   cache / "archives" / "partial"):
        folder.mkdir(parents=True)
    (etc / "sources.list.d" / f"{distro_name}.sources").write_text(
        sources(distro_name, arch, mirror, security))
    (state / "status").write_text("")   # nothing installed: the closure is the whole of it
    lines = [f"Dir::Etc {_quoted(str(etc))};",
             'Dir::Etc::main "apt.conf";',          # in etc/, absent: nothing more is read
             'Dir::Etc::netrc "/etc/apt/auth.conf";',
             'Dir::Etc::netrcparts "/etc/apt/auth.conf.d";',
             f"Dir::State {_quoted(str(state))};",
             f"Dir::State::status {_quoted(str(state / 'status'))};",
             f"Dir::Cache {_quoted(str(cache))};",
             f"APT::Architecture {_quoted(arch)};",
             f"APT::Architectures {{ {_quoted(arch)}; }};",
             'Acquire::Languages { "none"; };',      # no Translation files: only Packages
             *(line if line.endswith(";") else line + ";" for line in host_proxy_lines())]
    config = root / "apt.conf"
    config.write_text("\n".join(lines) + "\n")
    return dict(os.environ, APT_CONFIG=str(config), LC_ALL="C")
