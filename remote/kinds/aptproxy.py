"""apt's downloads through the fleet cache: the options and the shell lines that send one
apt-get run through an apt-cacher-ng, its HTTPS repositories too (the `apt` kind's steps and a
`shell` step's apt-get alike)."""
from __future__ import annotations

from typing import Optional, Sequence

from ..ground.errors import PlanError
from .base import q, redacted_url

# apt sends HTTPS through Acquire::http::Proxy as well when Acquire::https::Proxy is unset (seen
# with apt 2.6 on Debian 12: an https source then fails with "Could not connect to" the proxy),
# and apt-cacher-ng refuses CONNECT tunnels unless told otherwise (its PassThroughPattern). So
# HTTPS keeps what the host had: its own https proxy, else its own http proxy, else none.
HTTPS_AS_BEFORE = ('eval "$(apt-config shell apt_https Acquire::https::Proxy '
                   'apt_http Acquire::http::Proxy)"\n'
                   'apt_https=${apt_https:-${apt_http:-DIRECT}}\n')


# How a fleet cache serves an HTTPS repository (apt-cacher-ng 3.7 manual, 8.2 "Access to SSL/TLS
# remotes", its "backend configuration method"): the client asks the cache, as its HTTP proxy,
# for the same URL with http://, and the cache fetches it from an https:// backend (a Remap-
# line of cache.yaml). apt still checks the repository's InRelease signature against the
# source's keyring (apt-secure(8)), so plain HTTP to the cache loses no integrity. For this
# apt-get run only, apt reads a copy of the host's sources with those URLs so written
# (Dir::Etc::sourcelist and sourceparts, apt.conf(5)); the host's files stay as they are, and
# the package lists are the same files either way (apt names them after the URL without its
# scheme).
def https_sources_prelude(origins: Sequence[str], folder: str) -> tuple[str, str]:
    """(shell lines that copy the host's apt sources into the folder named by the variable
    `folder`, each of `origins` (https:// URL prefixes) written as http://; apt-get options
    that read the copy)."""
    if not origins:
        return "", ""
    # The origins are checked URLs (engine/cache.py HTTPS_ORIGIN): of sed's ERE specials only
    # `.` and `+` can occur in them.
    rewrite = " ".join(
        "-e " + q("s#" + url.replace(".", "\\.").replace("+", "\\+") + "([/[:space:]]|$)#"
                  + "http://" + url[len("https://"):] + "\\1#g")
        for url in origins)
    lines = (
        'eval "$(apt-config shell apt_list Dir::Etc::sourcelist/f apt_parts Dir::Etc::sourceparts/d)"\n'
        f'mkdir -p "${folder}/parts" || exit 1\n'
        f'if [ -f "$apt_list" ]; then sed -E {rewrite} "$apt_list" > "${folder}/sources.list" || exit 1; fi\n'
        'for f in "$apt_parts"*.list "$apt_parts"*.sources; do\n'
        '  [ -f "$f" ] || continue\n'
        f'  sed -E {rewrite} "$f" > "${folder}/parts/${{f##*/}}" || exit 1\n'
        "done\n")
    return lines, (f' -o "Dir::Etc::sourcelist=${folder}/sources.list"'
                   f' -o "Dir::Etc::sourceparts=${folder}/parts"')


# A plain-HTTP source on a host the fleet cache does not forward to (another region's mirror, a
# company mirror) would get 403 from it (ForceManaged, cache.yaml): apt fetches from such a
# host directly. apt-transport-http(1), "Proxy Configuration" (apt 2.7.14, manpages.ubuntu.com
# noble): "Proxies which should be used only for certain hosts can be specified via
# Acquire::http::Proxy::host", and "the special value DIRECT meaning that no proxy should be
# used". The names are checked host names (engine/cache.py APT_HOST).
#
# The proxy itself may carry a password (a company proxy, `proxy: http://user:pw@host:3128`),
# and every user of the host reads every process's arguments (/proc/PID/cmdline). So apt reads
# it from a configuration file made for this run in a folder only the step's user reads
# (mktemp -d: 0700), written by the shell's printf (a builtin: no process, no argument list):
# `-c FILE`, read after the host's own configuration files, as `-o` is (apt.conf(5): "the
# command line options are applied to override the configuration directives or to load even
# more configuration files"; apt-get(8): "-c, --config-file ... read after the default
# configuration file"). The script that writes it travels on stdin (`with_env`).
def proxy_options(proxy: Optional[str], https_origins: Sequence[str] = (),
                  direct: Sequence[str] = ()) -> tuple[str, str]:
    """(shell lines to run first, apt-get options) that send apt's plain-HTTP downloads through
    `proxy` (an apt-cacher-ng: it caches what TLS does not hide from it), except those from
    the hosts `direct` (the proxy does not forward to them), and the HTTPS repositories
    `https_origins` too (the proxy fetches them over HTTPS itself)."""
    if not proxy:
        return "", ""
    # A quoted value ends at the next `"` (apt 2.6's apt-config reads `;`, `{}`, `#`, `//` and
    # `\\` inside quotes as themselves): one line, no quote.
    if '"' in proxy or any(ord(c) < 0x20 or ord(c) == 0x7f for c in proxy):
        raise PlanError(f"apt: proxy {redacted_url(proxy)!r} holds a quote or a control "
                        "character, which apt's configuration cannot hold")
    setting = f'Acquire::http::Proxy "{proxy}";'
    prelude = (HTTPS_AS_BEFORE + "apt_tmp=$(mktemp -d) || exit 1\n"
               "trap 'rm -rf \"$apt_tmp\"' EXIT\n"
               f"printf '%s\\n' {q(setting)} > \"$apt_tmp/proxy.conf\" || exit 1\n")
    opts = ' -c "$apt_tmp/proxy.conf" -o "Acquire::https::Proxy=$apt_https"'
    opts += "".join(f" -o {q(f'Acquire::http::Proxy::{host}=DIRECT')}" for host in direct)
    if https_origins:
        lines, source_opts = https_sources_prelude(https_origins, "apt_tmp")
        prelude += lines
        opts += source_opts
    return prelude, opts


def proxy_shown(proxy: Optional[str], direct: Sequence[str] = ()) -> str:
    """How a command's line in the plan and the run log says where apt downloads from (a
    password in the proxy's URL as ***)."""
    if not proxy:
        return ""
    return f" via {redacted_url(proxy)}" + (f" (direct: {' '.join(direct)})" if direct else "")
