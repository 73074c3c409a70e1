"""The fleet cache lets apt fetch directly from the http hosts it does not forward to.

Tables, data in -> data out: a host's apt sources -> the repositories the shared parser
(playbooks/files/apt_sources.py, run by cache.yaml and on each fleet host) reads; what a fleet
host prints when gpuprov asks it for its route -> `CacheRoute.apt_direct`; those hosts -> apt's
options. The reach script itself runs here against a stub cache on 127.0.0.1. The real apt on a
sandbox host: tests/test_cache_https_apt.py."""
from __future__ import annotations

import importlib.util
import subprocess

import pytest

from remote.engine.cache import APT_SOURCES_SCRIPT, apt_route_line, parse_reach, reach_script
from remote.kinds.aptproxy import proxy_options
from remote.kinds.route import CacheRoute
from tests.http_stub import serve

_spec = importlib.util.spec_from_file_location("apt_sources", APT_SOURCES_SCRIPT)
assert _spec is not None and _spec.loader is not None
apt_sources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(apt_sources)

EC2_EU = "eu-west-1.ec2.archive.ubuntu.com"


@pytest.mark.parametrize("files, urls", [
    ({"sources.list": "deb http://deb.debian.org/debian bookworm main\n"
                      "# deb http://commented.example/debian bookworm main\n"
                      "deb-src http://deb.debian.org/debian bookworm main\n"
                      "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example.com/ubuntu jammy main\n"
                      "deb cdrom:[Debian 12]/ bookworm main\n"
                      "\n   \nnonsense line\n"},
     ["http://deb.debian.org/debian", "http://deb.debian.org/debian",
      "http://mirror.example.com/ubuntu", "cdrom:"]),
    ({"sources.list.d/ec2.sources": f"Types: deb\nURIs: http://{EC2_EU}/ubuntu/ "
                                    "http://security.ubuntu.com/ubuntu\nSuites: noble\n",
      "sources.list.d/nvidia.list": "deb [signed-by=/k] https://developer.download.nvidia.com/x/ /\n",
      "sources.list.d/old.list.disabled": "deb http://disabled.example/ x main\n"},
     ["https://developer.download.nvidia.com/x/", f"http://{EC2_EU}/ubuntu/",
      "http://security.ubuntu.com/ubuntu"]),
    ({}, []),
], ids=["one-line", "deb822-and-parts", "no-sources"])
def test_the_host_apt_sources_are_read_as_apt_reads_them(tmp_path, files, urls):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert apt_sources.apt_source_urls(str(tmp_path)) == urls


@pytest.mark.parametrize("url, host", [
    (f"http://{EC2_EU}/ubuntu/", EC2_EU),
    ("http://User:pw@Mirror.Example.com:8080/debian", "mirror.example.com"),
    ("ftp.de.debian.org/debian/", "ftp.de.debian.org"),
    ("http://[2001:db8::1]/debian", "[2001:db8::1]"),
])
def test_a_source_host_name(url, host):
    assert apt_sources.host_name(url) == host


NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos"


@pytest.mark.parametrize("printed, direct, listed", [
    # the cache published its list: the hosts the fleet host printed go direct
    (f"@apthosts 200\n@aptdirect {EC2_EU}\n@aptdirect mirror.example.com\n",
     (EC2_EU, "mirror.example.com"), True),
    ("@apthosts 200\n", (), True),
    # a cache.yaml older than the list: everything through the cache, as before
    (f"@apthosts 404\n@aptdirect {EC2_EU}\n", (), False),
    ("", (), False),
    # untrusted: option or shell syntax, upper case, IPv6, empty labels are dropped
    ("@apthosts 200\n@aptdirect a.example=DIRECT\n@aptdirect $(id)\n@aptdirect -oFoo\n"
     "@aptdirect UPPER.example\n@aptdirect [2001:db8::1]\n@aptdirect a..example\n"
     "@aptdirect 10.1.2.3\n", ("10.1.2.3",), True),
    # one of the cache's HTTPS repositories' hosts stays on the cache (its rewritten sources)
    ("@apthosts 200\n@aptdirect developer.download.nvidia.com\n", (), True),
    # at most 32
    ("@apthosts 200\n" + "".join(f"@aptdirect h{i:02}.example\n" for i in range(40)),
     tuple(f"h{i:02}.example" for i in range(32)), True),
], ids=["listed", "none-direct", "old-cache", "no-line", "hostile", "https-host", "capped"])
def test_the_hosts_a_fleet_host_names_become_the_route(printed, direct, listed):
    out = f"@apt 406 \n@apthttps {NVIDIA}\n{printed}@pypi 0\nrefused"
    route, why = parse_reach(out, "10.0.0.5", 3142, 3141, "direct")
    assert why == "" and route is not None
    assert (route.apt_direct, route.apt_hosts_listed) == (direct, listed)


def test_lines_after_devpi_answer_are_not_read_as_hosts():
    out = "@apt 406 \n@apthosts 200\n@pypi 0\n@aptdirect from-devpi.example\n"
    route, _ = parse_reach(out, "10.0.0.5", 3142, 3141, "direct")
    assert route is not None and route.apt_direct == ()


@pytest.mark.parametrize("direct, options", [
    ((), ' -c "$apt_tmp/proxy.conf" -o "Acquire::https::Proxy=$apt_https"'),
    ((EC2_EU, "10.1.2.3"),
     ' -c "$apt_tmp/proxy.conf" -o "Acquire::https::Proxy=$apt_https"'
     f" -o Acquire::http::Proxy::{EC2_EU}=DIRECT -o Acquire::http::Proxy::10.1.2.3=DIRECT"),
])
def test_hosts_not_forwarded_get_a_direct_proxy_option(direct, options):
    assert proxy_options("http://c:3142", (), direct)[1] == options
    assert proxy_options("", (), direct) == ("", "")


@pytest.mark.parametrize("route, line", [
    (CacheRoute(apt_proxy="http://c:3142", apt_direct=(EC2_EU,)),
     f"apt: via cache; direct for {EC2_EU} (not forwarded by the cache)"),
    (CacheRoute(apt_proxy="http://c:3142"),
     "apt: via cache; it forwards to every http source of the host"),
    (CacheRoute(apt_proxy="http://c:3142", apt_hosts_listed=False),
     "apt: via cache; the cache does not say which hosts it forwards to (a cache.yaml older "
     "than its http-hosts list): every http source goes through it"),
])
def test_the_run_log_says_where_apt_goes(route, line):
    assert apt_route_line(route) == line


@pytest.mark.parametrize("published, listed", [(True, True), (False, False)])
def test_the_reach_script_asks_the_cache_for_its_host_list(published, listed):
    """The script as a host runs it (this machine's python3 and apt sources), against a stub
    apt-cacher-ng: it asks for the list, and a 404 (an older cache) keeps the old route."""
    paths: list[str] = []

    def answer(path, headers):
        paths.append(path)
        if path == "/gpuprov-cache/http-hosts" and published:
            return 200, "text/plain", b"deb.debian.org\n"
        return (404, "text/plain", b"") if path.startswith("/gpuprov-cache/") else \
            (406, "text/html", b"Usage Information")

    server = serve(answer)
    try:
        port = server.server_address[1]
        out = subprocess.run(["sh", "-c", reach_script("python3", "127.0.0.1", port, 9)],
                             capture_output=True, text=True, timeout=60).stdout
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in out and "@aptsources" not in out, out
    assert paths == ["/", "/gpuprov-cache/https-origins", "/gpuprov-cache/http-hosts"]
    route, _ = parse_reach(out, "127.0.0.1", port, 9, "direct")
    assert route is not None and route.apt_hosts_listed is listed
    assert "deb.debian.org" not in route.apt_direct
