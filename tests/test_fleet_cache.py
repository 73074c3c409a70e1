"""The fleet cache (issue 16) on the loopback sshd farm: how a host finds the cache (directly,
through an SSH port forward gpuprov opens, or not at all: the origin with a warning) and what
its apt and pip steps then run. The cache's two services are stood in for by small HTTP servers
on 127.0.0.1 that answer as the real ones do (devpi's `GET /root` is the answer a real
devpi-server 6.20.3 gave, kept in tests/fixtures/cache/); the real apt-cacher-ng and devpi-server
run in tests/test_fleet_cache_sandbox.py. SSH, the forward and the hosts are real."""
from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import pytest

from remote.engine.cache import parse_reach
from remote.kinds.route import CacheRoute
from tests.conftest import forwarding_refused_server, invoke, write_yaml
from tests.http_stub import serve

DEVPI_ROOT = (Path(__file__).parent / "fixtures" / "cache" / "devpi-6.20.3-root.json").read_text()
NOTHING_LISTENS = "127.0.0.9"  # no server of the tests binds this address: connections refused


def _cache_answer(paths: list[str]):
    """devpi's index list at /root; anything else gets apt-cacher-ng's kind of error page."""
    def answer(path, headers):
        paths.append(path)
        if path == "/root":
            return 200, "application/json", DEVPI_ROOT.encode()
        return 406, "text/html", b"<html>Usage Information</html>"
    return answer


@pytest.fixture
def cache_ports():
    """Two answering servers on 127.0.0.1 (apt, pypi): (apt port, pypi port, servers), each
    server's `paths` what it was asked for."""
    servers = []
    for _ in range(2):
        paths: list[str] = []
        server = _bound(lambda port, paths=paths: serve(_cache_answer(paths), port))
        server.paths = paths
        servers.append(server)
    yield servers[0].server_address[1], servers[1].server_address[1], servers
    for server in servers:
        server.shutdown()
        server.server_close()


def _bound(make):
    """`make(port)` for a free port below 32768, which a cache's apt port must be."""
    for port in random.sample(range(20000, 32768), 100):
        try:
            return make(port)
        except OSError:
            continue
    raise RuntimeError("no free port from 20000 to 32767")


def _free_port() -> int:
    """A port below 32768 that nothing listens on."""
    def probe(port):
        with socket.socket() as s:
            s.bind(("0.0.0.0", port))
        return port
    return _bound(probe)


def _recipe(work: Path) -> Path:
    return write_yaml(work / "fetch.yaml", {"name": "fetch", "steps": [
        {"name": "a package", "apt": {"packages": ["gpuprov-no-such-package"]}},
        {"name": "a wheel", "pip": {"venv": f"{work}/venv", "packages": ["six==1.16.0"]}},
    ]})


def test_direct_route_sends_apt_and_pip_through_the_cache(farm, work, inventory, provision,
                                                        cache_ports):
    apt_port, pypi_port, servers = cache_ports
    inv = inventory(cache={"host": "h1", "address": "127.0.0.1", "apt_port": apt_port,
                           "pypi_port": pypi_port})
    result = provision("h2", _recipe(work), inv, check=True)
    assert result.rc == 0, result.out + result.err
    assert result.host("h2")["cache"] == "direct"
    assert f"apt-get install gpuprov-no-such-package via http://127.0.0.1:{apt_port}" in result.out
    assert (f"--index-url http://127.0.0.1:{pypi_port}/root/pypi/+simple/ "
            f"--trusted-host 127.0.0.1:{pypi_port} six==1.16.0") in result.out
    # the probe asks apt-cacher-ng for its root and the HTTPS repositories it serves
    assert servers[1].paths == ["/root"]
    assert servers[0].paths == ["/", "/gpuprov-cache/https-origins", "/gpuprov-cache/http-hosts"]
    # The cache host itself downloads from the origin.
    own = provision("h1", _recipe(work), inv, check=True)
    assert "cache" not in own.host("h1") and " via http" not in own.out


def test_forward_when_the_host_cannot_reach_the_cache(farm, work, inventory, provision,
                                                      cache_ports):
    """`auto`: the address refuses, so gpuprov opens a port on each host's loopback over the
    host's SSH connection, carried to the cache host's 127.0.0.1 over one shared connection to
    the cache host."""
    apt_port, pypi_port, servers = cache_ports
    inv = inventory(cache={"host": "h1", "address": NOTHING_LISTENS, "apt_port": apt_port,
                           "pypi_port": pypi_port})
    result = provision("h2,h3,h4", _recipe(work), inv, check=True)
    assert result.rc == 0, result.out + result.err
    for name in ("h2", "h3", "h4"):
        assert result.host(name)["cache"] == "SSH forward"
        assert "warnings" not in result.host(name)
    proxies = {int(part.split()[0]) for part in
               result.out.split("gpuprov-no-such-package via http://127.0.0.1:")[1:]}
    indexes = {int(part.split("/")[0]) for part in result.out.split("--index-url http://127.0.0.1:")[1:]}
    assert len(proxies) == 3 and len(indexes) == 3, "each host its own forwarded ports"
    assert (proxies | indexes).isdisjoint({apt_port, pypi_port})
    assert servers[1].paths == ["/root"] * 3, "devpi's answers came through the forwards"
    log = next((work / "logs" / "h2").glob("*/provision.log")).read_text()
    assert "via SSH forward" in log and f"direct to {NOTHING_LISTENS}" not in result.out


def test_cache_down_warns_and_the_steps_go_to_the_origin(farm, work, inventory, provision):
    inv = inventory(cache={"host": "h1", "apt_port": _free_port(), "pypi_port": _free_port()})
    result = provision("h2", _recipe(work), inv, check=True)
    assert result.rc == 0, result.out + result.err
    warning = [line for line in result.out.splitlines() if " warning " in line]
    assert len(warning) == 1 and "fleet cache h1 does not answer" in warning[0]
    assert "apt and pip go to the origin" in warning[0] and "SSH forward" in warning[0]
    assert result.host("h2")["warnings"][0].startswith("fleet cache h1 does not answer")
    assert " via http" not in result.out and "--index-url" not in result.out
    assert "six==1.16.0" in result.out


def test_forward_refused_by_the_host_is_a_warning(farm, work, inventory, provision, cache_ports):
    """A host whose sshd says AllowTcpForwarding no, and no direct route: the origin."""
    apt_port, pypi_port, _ = cache_ports
    refusing = forwarding_refused_server(farm)
    hosts = {"h1": farm.host_entry(farm.addresses[0]), "locked": farm.host_entry(refusing)}
    inv = inventory(hosts, cache={"host": "h1", "address": NOTHING_LISTENS,
                                  "apt_port": apt_port, "pypi_port": pypi_port})
    result = provision("locked", _recipe(work), inv, check=True)
    assert result.rc == 0, result.out + result.err
    assert "SSH forward:" in result.host("locked")["warnings"][0]
    assert "--index-url" not in result.out


def test_a_real_devpi_answer_becomes_the_route():
    out = "@apt 406 \n@pypi 200\n" + DEVPI_ROOT
    route, why = parse_reach(out, "10.0.0.5", 3142, 3141, "direct")
    assert why == "" and route is not None
    assert route.apt_proxy == "http://10.0.0.5:3142" and route.trusted_host == "10.0.0.5:3141"
    assert route.index_for("") == "http://10.0.0.5:3141/root/pypi/+simple/"
    assert route.index_for("https://download.pytorch.org/whl/cu130/") == \
        "http://10.0.0.5:3141/root/download.pytorch.org-whl-cu130/+simple/"
    assert route.index_for("https://mirror.example/simple") is None


def test_what_the_host_sends_back_is_checked():
    """Index names that are not plain path parts, non-HTTP mirror URLs and junk are dropped."""
    hostile = json.dumps({"result": {"indexes": {
        "../../x": {"type": "mirror", "mirror_url": "https://pypi.org/simple/"},
        "ok": {"type": "mirror", "mirror_url": "file:///etc/passwd"},
        "spaces": {"type": "mirror", "mirror_url": "https://a b/"},
        "stage": {"type": "stage"},
        "good": {"type": "mirror", "mirror_url": "https://pypi.org/simple/"}}}})
    route, _ = parse_reach("@apt 0 refused\n@pypi 200\n" + hostile, "h", 1, 2, "direct")
    assert route == CacheRoute(apt_proxy="", trusted_host="h:2", via="direct",
                               indexes={"https://pypi.org/simple": "http://h:2/root/good/+simple/"})
    for junk in ("", "@nopython", "@apt 0 x\n@pypi 0\ntimed out", "@apt x\n@pypi 200\n[1]",
                 "@apt 0 no\n@pypi 200\n" + "{" * 10000):
        assert parse_reach(junk, "h", 1, 2, "direct")[0] is None


def test_the_https_repositories_the_cache_serves_are_checked():
    """The list apt-cacher-ng publishes (cache.yaml) becomes the route's `apt_https`; a line
    that is no plain https:// URL (sed or shell syntax, another scheme) is dropped, and lines
    that devpi's answer holds are never read as that list."""
    nvidia = "https://developer.download.nvidia.com/compute/cuda/repos"
    out = ("@apt 406 \n"
           f"@apthttps {nvidia}/\n"
           "@apthttps https://evil.example/x#y\n@apthttps https://a.example/$(id)\n"
           "@apthttps http://plain.example/debian\n@apthttps https://ok.example:8443/deb\n"
           "@pypi 200\n" + DEVPI_ROOT + "\n@apthttps https://from-devpi.example/x\n")
    route, _ = parse_reach(out, "10.0.0.5", 3142, 3141, "direct")
    assert route is not None
    assert route.apt_https == (nvidia, "https://ok.example:8443/deb")
    # apt-cacher-ng down: no HTTPS repository goes to it either.
    route, _ = parse_reach(f"@apt 0 refused\n@apthttps {nvidia}\n@pypi 200\n" + DEVPI_ROOT,
                           "h", 1, 2, "direct")
    assert route is not None and route.apt_proxy == "" and route.apt_https == ()


@pytest.mark.parametrize("cache, message", [
    ({"host": "nope"}, "cache.host must name a host of the inventory, not 'nope'"),
    ({"reach": "direct"}, "cache needs 'host:' (the host that runs the cache)"),
    ({"host": "h1", "reach": "sometimes"},
     "cache.reach must be one of auto, direct, forward, not 'sometimes'"),
    ({"host": "h1", "pypi_port": 70000}, "cache.pypi_port must be a number from 1 to 65535"),
    ({"host": "h1", "apt_port": 40000},
     "cache.apt_port must be a number from 1 to 32767 (apt-cacher-ng 3.7.4 cannot listen above it)"),
    ({"host": "h1", "spare": 1},
     "cache: unknown key 'spare'; allowed: address, apt_port, host, pypi_port, reach"),
])
def test_a_bad_cache_setting_is_one_line_with_its_place(farm, work, inventory, cache, message):
    inv = inventory(cache=cache)
    result = invoke("provision", "--host", "h1", "--inventory", str(inv), cwd=work)
    assert result.rc == 2 and result.out == "", result.out + result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {inv}:"), result.err
    assert lines[0].endswith(message)


def test_cache_host_unreachable_over_ssh_is_a_warning_for_each_host(farm, work, inventory,
                                                                    provision):
    hosts = {"cachebox": dict(farm.host_entry(farm.addresses[0]), address=NOTHING_LISTENS),
             "h2": farm.host_entry(farm.addresses[1]), "h3": farm.host_entry(farm.addresses[2])}
    inv = inventory(hosts, cache={"host": "cachebox", "reach": "forward",
                                  "apt_port": _free_port(), "pypi_port": _free_port()})
    result = provision("h2,h3", _recipe(work), inv, check=True)
    assert result.rc == 0, result.out + result.err
    for name in ("h2", "h3"):
        (warning,) = result.host(name)["warnings"]
        assert warning.startswith("fleet cache cachebox does not answer") and "SSH forward:" in warning


def test_half_a_cache_is_used_and_the_other_half_warned(farm, work, inventory, provision,
                                                      cache_ports):
    """devpi answers, apt-cacher-ng does not: pip goes through the cache, apt to the origin."""
    _, pypi_port, _ = cache_ports
    inv = inventory(cache={"host": "h1", "address": "127.0.0.1", "apt_port": _free_port(),
                           "pypi_port": pypi_port, "reach": "direct"})
    result = provision("h2", _recipe(work), inv, check=True)
    assert result.rc == 0, result.out + result.err
    assert result.host("h2")["warnings"] == [
        "fleet cache h1: apt-cacher-ng does not answer, apt goes to the origin"]
    assert f"--index-url http://127.0.0.1:{pypi_port}/root/pypi/+simple/" in result.out
    assert " via http" not in result.out


def test_a_cache_host_named_by_an_ssh_config_alias_is_reached_at_its_hostname(work):
    """`cache: cachebox` where cachebox is an ~/.ssh/config alias: the fleet's hosts do not read
    this machine's ssh_config, so the address they are given (the `cache_address` recipes
    see, where apt and pip are pointed) is the alias's HostName; an explicit `cache.address`
    still wins. The cache host is not contacted: the step fetches nothing."""
    from tests.test_cli import gpuprov

    home = work / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host cachebox\n  HostName 192.0.2.15\n")
    rec = write_yaml(work / "r.yaml", {"name": "where", "steps": [
        {"name": "cache address", "shell": "echo cache at {{ cache_address }}",
         "changed_when": False}]})
    for cache, shown in (("cachebox", "cache at 192.0.2.15"),
                         ({"host": "cachebox", "address": "10.1.2.3"}, "cache at 10.1.2.3")):
        inv = write_yaml(work / "inv.yaml", {
            "hosts": {"cachebox": {}, "here": {"connection": "local"}}, "cache": cache})
        result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--host", "here",
                         "-v", "--no-validate", cwd=work, home=home)
        assert result.rc == 0, result.out + result.err
        assert f"here | {shown}" in " ".join(result.out.split()), result.out
