"""What a step kind needs to know of the fleet cache: where one host's downloads go.

The engine works it out per host (remote/engine/cache.py); the kinds that download read it in
`Kind.through_cache`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

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

    @property
    def wheels(self) -> str:
        return self.root + "/wheels"

    def apt_options(self) -> str:
        """apt-get options that read the bundle's repository and nothing else: its one
        deb822 source (`sources.d/`), its own package lists; no other source is read
        (Dir::Etc::sourcelist, Dir::Etc::sourceparts: apt.conf(5),
        https://man.archlinux.org/man/apt.conf.5.en; the lists' folder, apt-get(8) FILES:
        "/var/lib/apt/lists/ ... Configuration Item: Dir::State::Lists")."""
        return (f" -o Dir::Etc::sourcelist={self.root}/sources.d/none.list"
                f" -o Dir::Etc::sourceparts={self.root}/sources.d"
                f" -o Dir::State::Lists={self.root}/lists")
