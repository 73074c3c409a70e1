"""The repositories a host's apt sources name, read the way apt reads them: one-line `deb` and
`deb-src` entries of /etc/apt/sources.list and sources.list.d/*.list (sources.list(5), its
`[options]` skipped), and the `URIs:` fields of deb822 sources.list.d/*.sources.

One parser for both ends of the fleet cache: cache.yaml runs it on the cache host (which
repositories apt-cacher-ng forwards to) and gpuprov runs it on each fleet host when it asks the
cache for its route (remote/engine/cache.py: which of the host's plain-HTTP repositories the
cache does not forward to, so apt fetches those directly). Standard library only, for any
python3 a host has; cache.yaml installs it with a `template` step, so it holds no Jinja markup.
"""
import glob
import os
import re


def apt_source_urls(etc="/etc/apt"):
    """Every repository URL of the host's apt sources, as written."""
    urls = []
    for path in [etc + "/sources.list"] + sorted(glob.glob(etc + "/sources.list.d/*.list")):
        for line in _lines(path):
            words = re.sub(r"\[[^]]*\]", " ", line.split("#")[0]).split()
            urls += words[1:2] if words[:1] in (["deb"], ["deb-src"]) else []
    for path in sorted(glob.glob(etc + "/sources.list.d/*.sources")):
        for line in _lines(path):
            urls += line.split()[1:] if line.lower().startswith("uris:") else []
    return urls


def origin(url):
    """A repository as apt-cacher-ng's Remap- lines and mirror lists name it: host/path."""
    return url.strip().split("://")[-1].rstrip("/")


def host_name(url):
    """The host name of a URL (or of an origin, host/path), lower case, with no user or port."""
    authority = origin(url).split("/")[0].rsplit("@", 1)[-1]
    return (authority if authority.startswith("[") else authority.split(":")[0]).lower()


def _lines(path):
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as source:
        return source.read(1 << 20).splitlines()
