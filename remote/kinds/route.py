"""What a step kind needs to know of where its downloads come from: the fleet cache (where one
host's downloads go) and the bundle (what `gpuprov bundle` must carry for a step, and where the
host finds it under `provision --bundle`).

The engine works the cache out per host (remote/engine/cache.py); the kinds that download read
it in `Kind.through_cache`. The bundle's build asks each step's kind what to carry
(`Kind.bundle_carries`, remote/bundle/build.py), and each kind finds its part on the host in
`Kind.through_bundle`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional

# What pip uses when no index is given (pip's --index-url default).
PYPI_SIMPLE = "https://pypi.org/simple"


def normalize_index(url: str) -> str:
    """An index URL as compared: no trailing slash, scheme and host in lower case."""
    url = url.strip().rstrip("/")
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*://[^/]*)(.*)", url)
    return (match.group(1).lower() + match.group(2)) if match else url


@dataclass(frozen=True)
class CacheRoute:
    """Where one host's downloads go. `apt_proxy`: apt's HTTP proxy ("" : apt goes to the
    origin); `apt_https`: the HTTPS repositories (URL prefixes, no trailing slash) that proxy
    fetches over HTTPS itself when apt asks it for the same URL with http://; `apt_direct`: the
    host names of the host's plain-HTTP apt sources that the proxy does not forward to (apt
    fetches those from the origin); `apt_hosts_listed`: whether the cache said which it
    forwards to (an older cache.yaml does not: all goes through it); `indexes`:
    normalized origin index URL -> the cache's index URL; `trusted_host`: the cache's
    host:port for pip (plain HTTP); `via`: how the host reaches it (for the log)."""

    apt_proxy: str = ""
    apt_https: tuple[str, ...] = ()
    apt_direct: tuple[str, ...] = ()
    apt_hosts_listed: bool = True
    indexes: dict[str, str] = field(default_factory=dict)
    trusted_host: str = ""
    via: str = ""

    def index_for(self, origin: str) -> Optional[str]:
        """The cache's URL for the origin index `origin` ("" means PyPI); None: not mirrored."""
        return self.indexes.get(normalize_index(origin or PYPI_SIMPLE))


@dataclass(frozen=True)
class BundleRoute:
    """Where one host's installs come from under `provision --bundle` (remote/bundle/): the
    bundle unpacked on the host at `root`, with its wheels in `root/wheels` and its signed apt
    repository in `root/apt`. `locks`: the lock file names it carries -> the sha256 of their
    text; `debs`: the Debian packages it carries; `uv_wheel`: uv's wheel (a path on the host);
    `rebuild`: the command that makes a bundle with what is missing; `validate`: the folder
    holding the bundle's validate/ package (validation runs it there, nothing pushed), "" when
    the bundle carries none; `wheel_files`: the names of its wheels; `files`: the sha256 of
    each of its files -> its path relative to `root` (a `deb` step's file is found by its
    sha256)."""

    id: str
    root: str
    locks: dict[str, str] = field(default_factory=dict)
    debs: frozenset[str] = frozenset()
    uv_wheel: str = ""
    rebuild: str = "gpuprov bundle"
    validate: str = ""
    wheel_files: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    # the bundle's folder as the bundle site serves it over HTTP (remote/bundle/site.py), ""
    # when it is unpacked on this host: its wheels are then read from there, and `root` holds
    # only the apt source, its lists and the bundle's key (apt reads the repository there too)
    site: str = ""

    @property
    def wheels(self) -> str:
        return self.site + "/wheels/" if self.site else self.root + "/wheels"

    def apt_options(self) -> str:
        """apt-get options that read the bundle's repository and nothing else: its one
        deb822 source (`sources.d/`), its own package lists; no other source is read
        (Dir::Etc::sourcelist, Dir::Etc::sourceparts: apt.conf(5),
        https://man.archlinux.org/man/apt.conf.5.en; the lists' folder, apt-get(8) FILES:
        "/var/lib/apt/lists/ ... Configuration Item: Dir::State::Lists")."""
        return (f" -o Dir::Etc::sourcelist={self.root}/sources.d/none.list"
                f" -o Dir::Etc::sourceparts={self.root}/sources.d"
                f" -o Dir::State::Lists={self.root}/lists")


class HostOnly(Exception):
    """A value renders only on the host: it reads what the bundle's target does not tell (a
    fact, the host's name, a var left to the inventory or --var); the message says what."""


@dataclass(frozen=True)
class BundleTarget:
    """What a kind is told of the hosts a bundle is built for: `distro` (as
    remote/bundle/build.py's DISTROS names it) and `arch`; `render` renders a step's values as
    provision would on such a host (a list in, the rendered list out), or raises HostOnly."""

    distro: str
    arch: str
    render: Callable[[list[Any]], list[Any]]


@dataclass(frozen=True)
class CarriedFile:
    """A file a bundle carries for a step: downloaded from `url` when the bundle is built,
    checked against `sha256`, kept at `path` in the bundle, where the kind finds it by that
    sha256 on the host (`BundleRoute.files`); with `why`, left out, and why. A kind subclasses
    it to say its name (`kind`, in the build's lines) and where its files go (`folder`, one of
    the bundle's folders, and the name's `suffix`)."""

    kind: ClassVar[str] = ""
    folder: ClassVar[str] = "apt"
    suffix: ClassVar[str] = ""

    name: str
    url: str
    sha256: str
    why: str = ""

    @property
    def file_name(self) -> str:
        return self.sha256 + self.suffix

    @property
    def path(self) -> str:
        return f"{self.folder}/{self.file_name}"


@dataclass(frozen=True)
class BundleNeeds:
    """What a bundle must carry for one step (`Kind.bundle_carries`): `packages`, Debian
    packages of the target's archive (their dependencies come with them), and `files`."""

    packages: tuple[str, ...] = ()
    files: tuple[CarriedFile, ...] = ()
