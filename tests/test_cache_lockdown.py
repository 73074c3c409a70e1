"""The fleet cache against the people who can reach it (issue 21, point 1): another local user
of the cache host, and any client of its ports (every fleet host, through gpuprov's SSH forward
too). playbooks/cache.yaml sets the real apt-cacher-ng and devpi-server up on sandbox1 as plain
processes (no systemd there); the attacks are the ones that took the cache over before:

- `nobody` on the cache host reads every process's command line (what ps shows) while the cache
  is set up: devpi's root password must never be there, nor in gpuprov's output or logs.
- A client creates a devpi user, then a mirror index of a URL of its choosing, and asks for a
  page of it: the cache host would fetch that URL (a loopback witness stands in for a cloud's
  metadata service). Refused, and the witness is never asked.
- The services answer on an address of this machine that the inventory did not name.
- A client uses apt-cacher-ng as a proxy to an HTTP origin that is no repository of the recipes
  (a loopback witness on port 80, the one port apt-cacher-ng lets clients name): refused, and
  the witness is never asked; Debian's archive still comes through.
- An inventory that gives the cache an address its host does not have fails cache.yaml with
  the reason, before anything on the host is changed.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import time

import pytest
import yaml

from tests.conftest import invoke, write_yaml
from tests.http_stub import serve
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401 - the fixture
from tests.test_fleet_cache_sandbox import APT_PORT, CACHE_RECIPE, PYPI_PORT, StandinIndex

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

NOT_NAMED = "127.0.0.9"       # an address of this machine that the inventory gives no one
NOT_OURS = "192.0.2.10"       # TEST-NET-1 (RFC 5737): no interface of this machine has it
APT_WITNESS = "127.0.0.81"    # where the origin apt-cacher-ng must not be a proxy to listens
PASSWORD_FILE = "/var/cache/gpuprov-cache/devpi-root-password"

# Run as `nobody` on the cache host: what ps reads (/proc/PID/cmdline of every process),
# over and over until told to stop, each distinct command line kept once.
WATCHER = r"""
import os, sys, time
stop, out = sys.argv[1], sys.argv[2]
seen, scans, deadline = set(), 0, time.time() + 1500
while not os.path.exists(stop) and time.time() < deadline:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    seen.add(f.read().replace(b"\0", b" ").decode("utf-8", "replace"))
            except OSError:
                pass
    scans += 1
    time.sleep(0.01)
with open(out + ".part", "w") as f:
    f.write("%d\n%s" % (scans, "\n".join(sorted(seen))))
os.rename(out + ".part", out)
"""


class Witness:
    """An HTTP origin on `address`:`port` that only records who asked it for what."""

    def __init__(self, address: str = "127.0.0.1", port: int = 0):
        self.requests: list[str] = []

        def answer(path, headers):
            self.requests.append(path)
            return 200, "text/plain", b"Origin: gpuprov witness\nSuite: stable\n"

        self.server = serve(answer, port, address)
        self.url = f"http://{address}:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def origin(tmp_path):
    index = StandinIndex(tmp_path)
    yield index
    index.close()


def _devpi(method: str, path: str, body=None, auth: str = "") -> tuple[int, dict]:
    """One request to the cache's devpi-server as any client of its port would send it."""
    conn = http.client.HTTPConnection("127.0.0.1", PYPI_PORT, timeout=60)
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    if auth:
        headers["X-Devpi-Auth"] = auth
    conn.request(method, path, None if body is None else json.dumps(body), headers)
    answer = conn.getresponse()
    raw = answer.read()
    conn.close()
    try:
        return answer.status, json.loads(raw)
    except ValueError:
        return answer.status, {"text": raw.decode("utf-8", "replace")[:200]}


def _through_apt_cacher(url: str) -> int:
    """GET `url` with apt-cacher-ng as the HTTP proxy, as apt does; the answer's status."""
    conn = http.client.HTTPConnection("127.0.0.1", APT_PORT, timeout=120)
    conn.request("GET", url, headers={"User-Agent": "Debian APT-HTTP/1.3 (2.6.1)"})
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer.status


def _refused(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def _watch_processes(sandbox_hosts, folder: str) -> None:
    rc, _, err = sandbox_hosts.run("sandbox1", (
        f"rm -rf {folder} && mkdir {folder} && chown nobody {folder} && "
        f"cat > {folder}/watch.py <<'EOF'\n{WATCHER}\nEOF\n"
        f"setsid runuser -u nobody -- python3 {folder}/watch.py {folder}/stop {folder}/seen "
        "</dev/null >/dev/null 2>&1 &"), user="root")
    assert rc == 0, err


def _what_nobody_saw(sandbox_hosts, folder: str) -> tuple[int, str]:
    """(scans, every command line seen) once the watcher has stopped."""
    sandbox_hosts.run("sandbox1", f"touch {folder}/stop", user="root")
    for _ in range(100):
        rc, out, _ = sandbox_hosts.run("sandbox1", f"cat {folder}/seen")
        if rc == 0:
            scans, _, lines = out.partition("\n")
            return int(scans), lines
        time.sleep(0.2)
    raise AssertionError("the process watcher on sandbox1 did not stop")


def test_no_one_but_the_cache_admin_can_change_or_misuse_the_cache(sandbox_hosts, work, origin):
    data = yaml.safe_load(sandbox_hosts.inventory.read_text())
    data["hosts"]["sandbox1"]["vars"] = {"cache_pypi_upstream": f"{origin.url}/simple/",
                                         "cache_mirrors": []}
    data["cache"] = {"host": "sandbox1", "apt_port": APT_PORT, "pypi_port": PYPI_PORT}
    inventory = write_yaml(work / "inventory.yaml", data)
    cache_address = data["hosts"]["sandbox1"]["address"]

    # A cache host set up for the first time: devpi-init runs (a cache left by another test
    # of this session is taken down first).
    rc, _, err = sandbox_hosts.run("sandbox1", "if [ -f /run/gpuprov-devpi.pid ]; then kill "
                                   "$(cat /run/gpuprov-devpi.pid) || true; sleep 2; fi; "
                                   "rm -rf /var/cache/gpuprov-cache /run/gpuprov-devpi.*",
                                   user="root")
    assert rc == 0, err
    watch = "/tmp/gpuprov-watch"
    _watch_processes(sandbox_hosts, watch)
    setup = invoke("provision", "--host", "sandbox1", "--inventory", str(inventory), "--recipe",
                   CACHE_RECIPE, "--no-validate", cwd=work, timeout=900)
    scans, seen = _what_nobody_saw(sandbox_hosts, watch)
    assert setup.rc == 0, setup.out + setup.err
    again = invoke("provision", "--host", "sandbox1", "--inventory", str(inventory), "--recipe",
                   CACHE_RECIPE, "--no-validate", "--json", str(work / "again.json"), cwd=work,
                   timeout=300)
    assert again.rc == 0 and json.loads((work / "again.json").read_text())[
        "hosts"]["sandbox1"]["changed"] == 0, again.out

    # The local user saw the cache's processes (so it would have seen the password)...
    assert scans > 100 and "devpi-server" in seen and "devpi-init" in seen, (scans, seen[:2000])
    rc, password, _ = sandbox_hosts.run("sandbox1", f"cat {PASSWORD_FILE}", user="root")
    password = password.strip()
    assert rc == 0 and len(password) >= 24
    # ...and never the password: not on a command line, not in gpuprov's output or logs.
    assert password not in seen
    assert password not in setup.out + setup.err + again.out + again.err
    for log in (work / "logs").rglob("*"):
        assert not log.is_file() or password.encode() not in log.read_bytes(), log
    rc, _, _ = sandbox_hosts.run("sandbox1", f"runuser -u nobody -- cat {PASSWORD_FILE}",
                                 user="root")
    assert rc != 0, "another local user reads devpi's root password"

    # A client creates a user, then a mirror index of its own URL, and asks a page of it.
    witness = Witness()
    try:
        created, answer = _devpi("PUT", "/intruder", {"password": "intruder-pass"})
        assert created == 403, (created, answer)
        status, answer = _devpi("POST", "/+login", {"user": "intruder", "password": "intruder-pass"})
        auth = ""
        if status == 200:
            auth = base64.b64encode(f"intruder:{answer['result']['password']}".encode()).decode()
        for path in ("/intruder/ssrf", "/root/ssrf"):
            status, answer = _devpi("PUT", path, {"type": "mirror",
                                                  "mirror_url": f"{witness.url}/simple/"}, auth)
            assert status in (401, 403, 404), (path, status, answer)
            _devpi("GET", f"{path}/+simple/anything/")
        status, answer = _devpi("PATCH", "/root/pypi", [f"mirror_url={witness.url}/simple/"], auth)
        assert status in (401, 403), (status, answer)
        assert witness.requests == [], "the cache host fetched a URL a client chose"
    finally:
        witness.close()
    # devpi holds root and the indexes the recipe names, nothing else.
    status, answer = _devpi("GET", "/")
    assert status == 200 and sorted(answer["result"]) == ["root"], answer
    mirrors = {name: spec.get("mirror_url")
               for name, spec in answer["result"]["root"]["indexes"].items()}
    assert mirrors == {"pypi": f"{origin.url}/simple/"}

    # Both services answer where the fleet reaches them, and nowhere else.
    for port in (APT_PORT, PYPI_PORT):
        assert not _refused(cache_address, port) and not _refused("127.0.0.1", port)
        assert _refused(NOT_NAMED, port), f"port {port} answers on {NOT_NAMED}"

    # apt-cacher-ng is no proxy to an origin the recipes do not use.
    witness = Witness(APT_WITNESS, 80)
    try:
        status = _through_apt_cacher(f"http://{APT_WITNESS}/private/dists/stable/InRelease")
        assert status >= 400 and witness.requests == [], (status, witness.requests)
    finally:
        witness.close()
    assert _through_apt_cacher("http://deb.debian.org/debian/dists/bookworm/InRelease") == 200

    # An address the cache host does not have: cache.yaml says so before changing anything.
    rc, before, _ = sandbox_hosts.run("sandbox1", "cat /etc/apt-cacher-ng/zz-gpuprov.conf")
    data["cache"]["address"] = NOT_OURS
    elsewhere = invoke("provision", "--host", "sandbox1", "--inventory",
                       str(write_yaml(work / "elsewhere.yaml", data)), "--recipe", CACHE_RECIPE,
                       "--no-validate", cwd=work, timeout=300)
    assert elsewhere.rc == 1, elsewhere.out + elsewhere.err
    assert f"the fleet cache cannot listen on {NOT_OURS}" in elsewhere.out, elsewhere.out
    assert "cache.reach: forward" in elsewhere.out
    rc, after, _ = sandbox_hosts.run("sandbox1", "cat /etc/apt-cacher-ng/zz-gpuprov.conf")
    assert rc == 0 and after == before and not _refused(cache_address, PYPI_PORT)
