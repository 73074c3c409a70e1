"""The fleet cache as one host sees it: does it answer, and where do that host's apt and pip go.

The cache host runs apt-cacher-ng and devpi-server (playbooks/cache.yaml). Before a host's first
step that downloads packages, the session runs `reach_script` there: it asks apt-cacher-ng for
any HTTP answer, then for the HTTPS repositories it fetches for the fleet (`HTTPS_LIST`) and
the hosts it forwards plain HTTP to (`HTTP_HOSTS_LIST`; the host prints those of its own http
apt sources that are not among them: apt fetches from them directly), and devpi for its list
of indexes (`GET /root` as JSON: each mirror index with the `mirror_url` it
mirrors). `parse_reach` turns that answer (untrusted: it is what the host
printed) into a `CacheRoute`: apt's proxy, and for each mirrored index URL the cache's index URL.
The kinds that download (`Kind.fetches`) rewrite their arguments with it
(`Kind.through_cache`), so recipes need no change, and a cache that does not answer leaves them
as written: the origin. `HostCache` is one host's view (its route, its forwards); `CacheLink`
the one connection to the cache host that a run's forwards share.
"""
from __future__ import annotations

import functools
import json
import re
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from ..ground.errors import HostError
from ..ground.paths import RECIPES_DIR
from ..kinds.base import Kind, q
from ..kinds.route import CacheRoute, normalize_index
from ..transport.connection import RemoteForwards, SSHException, ssh_transport

if TYPE_CHECKING:
    from ..config.inventory import Host, Inventory
    from ..output.runlog import RunLog
    from ..transport.connection import BaseConnection
    from .options import RunOptions
    from .results import HostResult

REACH_TIMEOUT_S = 5
# devpi index names are user/index path parts; refuse anything else the host sends back.
INDEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_ANSWER = 64 * 1024
# Where cache.yaml publishes, through apt-cacher-ng (its LocalDirs), the HTTPS repositories it
# fetches over HTTPS for a client that asks for them with http:// (one URL a line).
HTTPS_LIST = "gpuprov-cache/https-origins"
# An HTTPS repository as the host may pass it on to apt and sed: no quotes, spaces, `#` or `|`.
HTTPS_ORIGIN = re.compile(r"https://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%+-]+)*")
MAX_HTTPS_ORIGINS = 32

# Where cache.yaml publishes the host names apt-cacher-ng forwards plain-HTTP requests to (its
# Remap- lines: the package's mirror lists, the cache host's own http sources and
# cache_apt_origins; one name a line). A fleet host's http source on any other host would get
# 403 from the cache (ForceManaged): apt fetches those directly.
HTTP_HOSTS_LIST = "gpuprov-cache/http-hosts"
# A host name as the host may pass it on to apt (`Acquire::http::Proxy::HOST`): DNS letters,
# digits, dots and hyphens only (an IPv4 address too), no option or shell syntax.
APT_HOST = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?")
MAX_APT_DIRECT = 32
# The published host list holds Debian's and Ubuntu's mirror lists (about 1,000 names).
MAX_HTTP_HOSTS_LIST = 1 << 20
# The apt sources parser cache.yaml runs on the cache host; the same file runs on each fleet host.
APT_SOURCES_SCRIPT = RECIPES_DIR / "files" / "apt_sources.py"

_REACH = """{python} - {apt} {pypi} <<'EOF' 2>&1 || echo "@nopython"
{apt_sources}
import sys, urllib.error, urllib.request
def get(url, accept, limit={limit}):
    request = urllib.request.Request(url, headers={{"Accept": accept}})
    try:
        with urllib.request.urlopen(request, timeout={timeout}) as answer:
            return answer.status, answer.read(limit)
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except Exception as exc:
        return 0, str(exc).encode()
status, body = get(sys.argv[1], "*/*")
print("@apt", status, body.decode("utf-8", "replace").replace("\\n", " ")[:200] if not status else "")
if status:
    https_status, listed = get(sys.argv[1] + "{https_list}", "text/plain")
    for line in listed.decode("utf-8", "replace").splitlines() if https_status == 200 else []:
        print("@apthttps", line.strip())
    hosts_status, listed = get(sys.argv[1] + "{hosts_list}", "text/plain", {hosts_limit})
    print("@apthosts", hosts_status)
    if hosts_status == 200:
        try:
            sources = {{host_name(url) for url in apt_source_urls() if url.startswith("http://")}}
        except Exception as exc:
            sources = set()
            print("@aptsources", str(exc)[:200].replace("\\n", " "))
        forwarded = set(listed.decode("utf-8", "replace").lower().split())
        for name in sorted(sources - forwarded):
            print("@aptdirect", name)
status, body = get(sys.argv[2], "application/json")
print("@pypi", status)
sys.stdout.write(body.decode("utf-8", "replace"))
EOF"""


@functools.lru_cache(maxsize=1)
def _apt_sources_code() -> str:
    return APT_SOURCES_SCRIPT.read_text()


def reach_script(python: str, address: str, apt_port: int, pypi_port: int) -> str:
    """A read-only command for the host: can it reach the cache at `address`, what it mirrors,
    and which of the host's plain-HTTP apt sources it does not forward to."""
    host = f"[{address}]" if ":" in address else address
    return _REACH.format(python=q(python), apt=q(f"http://{host}:{apt_port}/"),
                         pypi=q(f"http://{host}:{pypi_port}/root"), timeout=REACH_TIMEOUT_S,
                         limit=MAX_ANSWER, https_list=HTTPS_LIST, hosts_list=HTTP_HOSTS_LIST,
                         hosts_limit=MAX_HTTP_HOSTS_LIST, apt_sources=_apt_sources_code())


def parse_reach(out: str, address: str, apt_port: int, pypi_port: int,
                via: str) -> tuple[Optional[CacheRoute], str]:
    """(route, "") when apt-cacher-ng or devpi answered; (None, why) when neither did."""
    if "@nopython" in out and "@apt" not in out:
        return None, "no python on the host to ask the cache with"
    host = f"[{address}]" if ":" in address else address
    apt_up, apt_why = _apt_answer(out)
    pypi_line = re.search(r"^@pypi (\d+)$", out, re.M)
    indexes, pypi_why = _pypi_answer(out, pypi_line, f"http://{host}:{pypi_port}")
    if not apt_up and not indexes:
        return None, f"apt-cacher-ng: {apt_why}; devpi: {pypi_why or 'no mirror index'}"
    route = CacheRoute(indexes=indexes, trusted_host=f"{address}:{pypi_port}" if indexes else "",
                       via=via)
    if not apt_up:
        return route, ""
    apt_part = out[:pypi_line.start()] if pypi_line else out
    listed = re.findall(r"^@apthttps (\S+)$", apt_part, re.M)
    apt_https = tuple(sorted({url.rstrip("/") for url in listed
                              if HTTPS_ORIGIN.fullmatch(url.rstrip("/"))}))[:MAX_HTTPS_ORIGINS]
    apt_direct, hosts_listed = _apt_direct(apt_part, apt_https)
    return replace(route, apt_proxy=f"http://{host}:{apt_port}", apt_https=apt_https,
                   apt_direct=apt_direct, apt_hosts_listed=hosts_listed), ""


def _apt_answer(out: str) -> tuple[bool, str]:
    """(whether apt-cacher-ng answered at all (any HTTP status), why not)."""
    apt_line = re.search(r"^@apt (\d+) ?(.*)$", out, re.M)
    if apt_line and 100 <= int(apt_line.group(1)) < 600:
        return True, ""
    return False, (apt_line.group(2).strip() if apt_line else "") or "no answer"


def _pypi_answer(out: str, pypi_line: Optional[re.Match[str]], base: str) -> tuple[dict[str, str], str]:
    """(devpi's mirror indexes, normalized origin -> its index URL under `base`; why none)."""
    body = out[pypi_line.end():] if pypi_line else ""
    indexes, why = _mirrors(body, base)
    if pypi_line and pypi_line.group(1) == "0":  # no HTTP answer: the body is the error
        why = " ".join(body.split())[:200] or "no answer"
    elif pypi_line and pypi_line.group(1) != "200":
        why = f"devpi answered HTTP {pypi_line.group(1)}"
    return indexes, why


def apt_route_line(route: CacheRoute) -> str:
    """The run log's line on where apt's plain-HTTP downloads go."""
    if not route.apt_hosts_listed:
        return ("apt: via cache; the cache does not say which hosts it forwards to (a cache.yaml "
                "older than its http-hosts list): every http source goes through it")
    if route.apt_direct:
        return (f"apt: via cache; direct for {', '.join(route.apt_direct)} "
                "(not forwarded by the cache)")
    return "apt: via cache; it forwards to every http source of the host"


def _apt_direct(apt_part: str, apt_https: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
    """(the host names of the host's plain-HTTP apt sources that the cache does not forward to,
    whether the cache published the list of those it does). A host that is also one of the
    cache's HTTPS repositories stays on the cache: its rewritten sources go through it."""
    hosts_line = re.search(r"^@apthosts (\d+)$", apt_part, re.M)
    if not hosts_line or hosts_line.group(1) != "200":
        return (), False
    https_hosts = {url.split("/")[2].split(":")[0].lower() for url in apt_https}
    named = re.findall(r"^@aptdirect (\S+)$", apt_part, re.M)
    direct = sorted({name for name in named if APT_HOST.fullmatch(name) and ".." not in name}
                    - https_hosts)
    return tuple(direct[:MAX_APT_DIRECT]), True


def _mirrors(body: str, base: str) -> tuple[dict[str, str], str]:
    """devpi's `GET /root` JSON -> {normalized mirror_url: cache index URL}; or ({}, why)."""
    try:
        doc: Any = json.loads(body[:MAX_ANSWER])
        listed = doc["result"]["indexes"]
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: 64 KiB of "["
        return {}, "no devpi index list in its answer"
    if not isinstance(listed, dict):
        return {}, "no devpi index list in its answer"
    out = {}
    for name, spec in listed.items():
        if not (isinstance(name, str) and INDEX_NAME.fullmatch(name) and isinstance(spec, dict)
                and spec.get("type") == "mirror"):
            continue
        origin = spec.get("mirror_url")
        if isinstance(origin, str) and re.match(r"https?://[^\s/]+", origin) and \
                len(origin) < 2048 and not any(c.isspace() for c in origin):
            out[normalize_index(origin)] = f"{base}/root/{name}/+simple/"
    return out, "" if out else "no mirror index"


class CacheLink:
    """One SSH connection to the cache host for a whole run, opened when the first host needs a
    forward and shared by all of them: sshd's MaxStartups (10 by default) would drop some of 64
    hosts opening their own at once."""

    def __init__(self, connect: Callable[[Host], BaseConnection]):
        self._connect = connect
        self._conn: Optional[BaseConnection] = None
        self._failed: Optional[Exception] = None
        self._lock = threading.Lock()

    def conn(self, host: Host) -> BaseConnection:
        """The open connection to the cache host `host` (opened again if it was lost). A
        failure to connect is kept and raised again: the hosts asking one after another would
        otherwise each wait out the connect timeout."""
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if self._conn is not None:
                try:
                    ssh_transport(self._conn)
                    return self._conn
                except OSError:  # lost since: open it again
                    self._conn.close()
            try:
                self._conn = self._connect(host)
            except HostError as exc:
                self._failed = exc
                raise
            return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class CacheUser(Protocol):
    """What `HostCache` needs of a host's session (engine/session.py `HostSession`)."""

    host: Host
    inventory: Inventory
    log: RunLog
    result: HostResult
    options: RunOptions

    @property
    def conn(self) -> BaseConnection: ...

    def warn(self, text: str) -> None: ...


class HostCache:
    """The fleet cache as one host reaches it: worked out before the host's first step that
    downloads, again after its connection is reopened (a reboot ends the forwards)."""

    def __init__(self, session: CacheUser, link: CacheLink):
        self.session = session
        self.link = link
        self._route: Optional[CacheRoute] = None
        self._route_known = False
        self._forwards: Optional[RemoteForwards] = None

    def through(self, kind: Kind[Any], args: dict[str, Any]) -> dict[str, Any]:
        """A downloading step's rendered `args`, sent through the fleet cache when the
        inventory names one and it answers; as written otherwise (the origin)."""
        if not kind.fetches_with(args):
            return args
        bundle = self.session.options.bundle
        if bundle is not None:   # `provision --bundle`: the bundle only, no cache, no origin
            return kind.through_bundle(args, bundle)
        if self.session.inventory.cache is None:
            return args
        if not self._route_known:
            self._route = self._find()
            self._route_known = True
        return kind.through_cache(args, self._route) if self._route is not None else args

    def forget(self) -> None:
        """Close the forwards and forget the route (the host's connection is closing)."""
        if self._forwards is not None:
            self._forwards.close()
            if self._forwards.refused:
                self.session.log.event(f"fleet cache forward: {self._forwards.refused} "
                                       "connection(s) from the host refused over the limit")
            self._forwards = None
        self._route, self._route_known = None, False

    def _find(self) -> Optional[CacheRoute]:
        """Ask the cache from the host directly, then over an SSH forward (as `reach` allows);
        say which way it answered, or warn that the downloads go to the origin."""
        cache = self.session.inventory.cache
        if cache is None or cache.host == self.session.host.name:
            return None
        tried = []
        route: Optional[CacheRoute] = None
        if cache.reach != "forward":
            route, why = self._ask(cache.address, cache.apt_port, cache.pypi_port, "direct")
            if route is None:
                tried.append(f"direct to {cache.address}: {why}")
        if route is None and cache.reach != "direct":
            try:
                ports = self._forward()
            except (HostError, OSError, EOFError, SSHException) as exc:
                tried.append(f"SSH forward: {exc or type(exc).__name__}")
            else:
                route, why = self._ask("127.0.0.1", *ports, "SSH forward")
                if route is None:
                    tried.append(f"SSH forward: {why}")
        if route is None:
            self.session.warn(f"fleet cache {cache.host} does not answer, apt and pip go to the origin "
                       f"({'; '.join(tried)})")
        elif not route.apt_proxy or not route.indexes:
            self.session.warn(f"fleet cache {cache.host}: "
                       + ("apt-cacher-ng does not answer, apt goes" if not route.apt_proxy
                          else "devpi mirrors no index, pip goes") + " to the origin")
        return route

    def _ask(self, address: str, apt_port: int, pypi_port: int,
                   via: str) -> tuple[Optional[CacheRoute], str]:
        result = self.session.conn.run(reach_script(self.session.host.python, address, apt_port, pypi_port),
                               timeout=60)
        route, why = parse_reach(result.out, address, apt_port, pypi_port, via)
        if route is not None:
            served = ", ".join(filter(None, ["apt" if route.apt_proxy else "",
                                             f"{len(route.indexes)} pip index(es)"
                                             if route.indexes else ""]))
            self.session.log.event(f"fleet cache: {served} via {via}: "
                           + " ".join(filter(None, [route.apt_proxy, *route.indexes.values()]))
                           + (f" (apt HTTPS through it: {' '.join(route.apt_https)})"
                              if route.apt_https else ""))
            if route.apt_proxy:
                self.session.log.event(apt_route_line(route))
            self.session.result.cache = via
        return route, why

    def _forward(self) -> tuple[int, int]:
        """Ports on the host's loopback that lead to the cache host's two services."""
        cache = self.session.inventory.cache
        assert cache is not None
        if self._forwards is None:
            target = self.link.conn(self.session.inventory.hosts[cache.host])
            self._forwards = RemoteForwards(self.session.conn, target,
                                            on_refused=self.session.warn)
        return self._forwards.add(cache.apt_port), self._forwards.add(cache.pypi_port)
