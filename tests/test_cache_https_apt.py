"""An HTTPS apt repository through the fleet cache (issue 24, point 4), on sandbox hosts:
playbooks/cache.yaml sets the real apt-cacher-ng up on sandbox1 to fetch `nvidia_repo_base`
(https://, as NVIDIA's is) over HTTPS; sandbox2 installs from that repository with an `apt`
step, then again as another host would (through gpuprov's SSH forward), then with `apt-get`
run by a `shell` step.

The origin is a STAND-IN signed flat apt repository (the shape of NVIDIA's: InRelease,
Packages and the .debs in one folder) that this test builds and serves over HTTPS on
127.0.0.83:443 with a self-signed certificate. Only sandbox1 (the cache) trusts it: sandbox2
cannot fetch from it itself, so every install that works came through the cache, and the
origin's request log shows how often each file left it. apt on sandbox2 still checks the
repository's signature (its source's signed-by key).

sandbox2 also has a plain-HTTP source on a host the cache does not forward to (a stand-in for
another region's cloud mirror: the same key, one more package, on 127.0.0.84:80): apt-cacher-ng
would answer 403 for it, so gpuprov's apt fetches from it directly (the origin sees apt's own
requests), while the rest still comes through the cache."""
from __future__ import annotations

import base64
import email.utils
import hashlib
import json
import os
import ssl
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import invoke, write_yaml
from tests.http_stub import serve
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401 - the fixture
from tests.test_fleet_cache_sandbox import APT_PORT, CACHE_RECIPE, PYPI_PORT, StandinIndex

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

ORIGIN = "127.0.0.83"          # where the stand-in HTTPS repository listens (port 443)
REPO_URL = f"https://{ORIGIN}/nvidia"
PACKAGES = ("gpuprov-standin-a", "gpuprov-standin-b")
# The plain-HTTP mirror the cache does not forward to, and the package only it has.
PLAIN_ORIGIN = "127.0.0.84"
PLAIN_URL = f"http://{PLAIN_ORIGIN}/mirror"
PLAIN_PACKAGE = "gpuprov-standin-c"
# apt-cacher-ng checks certificates against OpenSSL's CApath, /etc/ssl/certs (its acng.conf:
# "CApath: /etc/ssl/certs"), which finds a CA by its subject hash link. The test adds the
# certificate and its link there and takes them away after; update-ca-certificates is not run:
# it would rebuild the CA bundle the sandbox copied from this machine.
CA_FILE = "/etc/ssl/certs/gpuprov-standin-origin.pem"
SOURCE = "/etc/apt/sources.list.d/gpuprov-standin.list"
KEYRING = "/etc/apt/keyrings/gpuprov-standin.gpg"
SOURCE_LINE = f"deb [signed-by={KEYRING}] {REPO_URL}/ /\n"
PLAIN_SOURCE = "/etc/apt/sources.list.d/gpuprov-standin-mirror.list"


def _run(*argv: str, **kwargs) -> None:
    subprocess.run(argv, check=True, capture_output=True, **kwargs)


def _deb(folder: Path, name: str) -> Path:
    """A package holding 256 KiB of random bytes under /usr/share/<name>/."""
    root = folder / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: gpuprov tests <tests@example.invalid>\n"
        "Description: STAND-IN package built by gpuprov's tests\n")
    (root / "usr" / "share" / name).mkdir(parents=True)
    (root / "usr" / "share" / name / "payload.bin").write_bytes(os.urandom(256 * 1024))
    deb = folder / f"{name}_1.0_all.deb"
    _run("dpkg-deb", "--root-owner-group", "--build", str(root), str(deb))
    return deb


def _flat_repository(folder: Path, names: tuple[str, ...], gpg_env: dict) -> dict[str, bytes]:
    """The files of a signed flat apt repository holding the packages `names`: name -> bytes."""
    files: dict[str, bytes] = {}
    stanzas = []
    for name in names:
        deb = _deb(folder, name)
        data = deb.read_bytes()
        files[deb.name] = data
        stanzas.append(
            f"Package: {name}\nVersion: 1.0\nArchitecture: all\n"
            "Maintainer: gpuprov tests <tests@example.invalid>\n"
            f"Filename: ./{deb.name}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
            "Description: STAND-IN package built by gpuprov's tests\n")
    packages = "\n".join(stanzas).encode()
    files["Packages"] = packages
    release = folder / f"Release-{names[0]}"
    release.write_text(
        "Origin: gpuprov-standin\nLabel: gpuprov-standin\n"
        f"Date: {email.utils.formatdate(usegmt=True)}\nSHA256:\n"
        f" {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n")
    signed = folder / f"InRelease-{names[0]}"
    _run("gpg", "--batch", "--yes", "--clearsign", "-o", str(signed), str(release), env=gpg_env)
    files["InRelease"] = signed.read_bytes()
    return files


class StandinAptRepository:
    """A signed flat apt repository served over HTTPS, and a plain-HTTP one (the mirror the
    cache does not forward to) signed by the same key; `requests` and `plain_requests` keep
    every path asked, `plain_agents` the User-Agent of each request to the plain one."""

    def __init__(self, folder: Path):
        self.requests: list[str] = []
        self.plain_requests: list[str] = []
        self.plain_agents: list[str] = []
        gnupg = folder / "gnupg"
        gnupg.mkdir(mode=0o700)
        self.gpg_env = dict(os.environ, GNUPGHOME=str(gnupg))
        _run("gpg", "--batch", "--passphrase", "", "--quick-gen-key",
             "gpuprov standin <tests@example.invalid>", "ed25519", "sign", "1d", env=self.gpg_env)
        self.keyring = subprocess.run(["gpg", "--export"], check=True, capture_output=True,
                                      env=self.gpg_env).stdout
        files = _flat_repository(folder, PACKAGES, self.gpg_env)
        plain_files = _flat_repository(folder, (PLAIN_PACKAGE,), self.gpg_env)
        # A certificate for the origin's address, trusted by the cache host only.
        key, self.cert = folder / "origin.key", folder / "origin.crt"
        _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", f"/CN={ORIGIN}", "-addext", f"subjectAltName=IP:{ORIGIN}",
             "-keyout", str(key), "-out", str(self.cert))
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(str(self.cert), str(key))

        def answer(path, headers):
            self.requests.append(path)
            name = path.rsplit("/", 1)[-1]
            if path.startswith("/nvidia/") and name in files:
                return 200, "application/octet-stream", files[name]
            return 404, "text/plain", b"not found"

        def answer_plain(path, headers):
            self.plain_requests.append(path)
            self.plain_agents.append(headers.get("User-Agent", ""))
            name = path.rsplit("/", 1)[-1]
            if path.startswith("/mirror/") and name in plain_files:
                return 200, "application/octet-stream", plain_files[name]
            return 404, "text/plain", b"not found"

        self.server = serve(answer, 443, ORIGIN, tls)
        self.plain_server = serve(answer_plain, 80, PLAIN_ORIGIN)

    def fetches(self, name: str) -> int:
        return sum(1 for path in self.requests if path.rsplit("/", 1)[-1] == name)

    def plain_fetches(self, name: str) -> int:
        return sum(1 for path in self.plain_requests if path.rsplit("/", 1)[-1] == name)

    def close(self) -> None:
        for server in (self.server, self.plain_server):
            server.shutdown()
            server.server_close()
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=self.gpg_env, check=False)


@pytest.fixture
def apt_origin(tmp_path):
    repository = StandinAptRepository(tmp_path)
    yield repository
    repository.close()


@pytest.fixture
def index(tmp_path):
    standin = StandinIndex(tmp_path)
    yield standin
    standin.close()


def _inventory(sandbox_hosts, work: Path, index: StandinIndex, reach: str) -> Path:
    data = yaml.safe_load(sandbox_hosts.inventory.read_text())
    data["hosts"]["sandbox1"]["vars"] = {
        "cache_pypi_upstream": f"{index.url}/simple/", "cache_mirrors": [],
        "nvidia_repo_base": REPO_URL}
    data["cache"] = {"host": "sandbox1", "reach": reach, "apt_port": APT_PORT,
                     "pypi_port": PYPI_PORT}
    return write_yaml(work / f"inventory-{reach}.yaml", data)


def _provision(work: Path, inventory: Path, name: str, step: dict):
    recipe = write_yaml(work / f"{name}.yaml", {"name": name, "steps": [step]})
    result = invoke("provision", "--host", "sandbox2", "--inventory", str(inventory),
                    "--recipe", str(recipe), "--no-validate", "--json", str(work / f"{name}.json"),
                    cwd=work, timeout=600)
    return result, json.loads((work / f"{name}.json").read_text())["hosts"]["sandbox2"]


def _cached_on_the_cache_host(sandbox_hosts, deb: str) -> bool:
    rc, out, _ = sandbox_hosts.run("sandbox1", f"find /var/cache/apt-cacher-ng -name {deb}",
                                   user="root")
    return rc == 0 and deb in out


def test_an_https_repository_comes_through_the_cache_for_apt_and_shell_steps(
        sandbox_hosts, work, apt_origin, index):
    cert = apt_origin.cert.read_text()
    link = "/etc/ssl/certs/" + subprocess.run(
        ["openssl", "x509", "-hash", "-noout", "-in", str(apt_origin.cert)], check=True,
        capture_output=True, text=True).stdout.strip() + ".0"
    keyring = base64.b64encode(apt_origin.keyring).decode()
    try:
        rc, _, err = sandbox_hosts.run("sandbox1", (
            f"cat > {CA_FILE} <<'EOF'\n{cert}EOF\nln -sf {CA_FILE} {link}"), user="root")
        assert rc == 0, err
        rc, _, err = sandbox_hosts.run("sandbox2", (
            f"mkdir -p /etc/apt/keyrings && printf '%s' {keyring} | base64 -d > {KEYRING} && "
            f"printf '%s' '{SOURCE_LINE}' > {SOURCE} && "
            f"echo 'deb [signed-by={KEYRING}] {PLAIN_URL}/ /' > {PLAIN_SOURCE}"), user="root")
        assert rc == 0, err

        direct = _inventory(sandbox_hosts, work, index, "auto")
        setup = invoke("provision", "--host", "sandbox1", "--inventory", str(direct), "--recipe",
                       CACHE_RECIPE, "--no-validate", cwd=work, timeout=900)
        assert setup.rc == 0, setup.out + setup.err

        # An apt step: the package comes from the HTTPS origin through the cache, once; the
        # mirror the cache does not forward to is fetched from directly (by apt itself, not
        # apt-cacher-ng), where the cache would have failed the update with 403.
        deb_a = f"{PACKAGES[0]}_1.0_all.deb"
        deb_c = f"{PLAIN_PACKAGE}_1.0_all.deb"
        first, data = _provision(work, direct, "first", {
            "name": "the stand-in packages", "become": True,
            "apt": {"packages": [PACKAGES[0], PLAIN_PACKAGE], "update_cache": True}})
        run_log = next((work / "logs" / "sandbox2").glob("*/provision.log")).read_text()
        assert first.rc == 0 and data["cache"] == "direct", first.out + first.err + run_log
        assert apt_origin.fetches(deb_a) == 1 and apt_origin.fetches("InRelease") >= 1, \
            apt_origin.requests
        assert _cached_on_the_cache_host(sandbox_hosts, deb_a)
        assert apt_origin.plain_fetches("InRelease") >= 1 and apt_origin.plain_fetches(deb_c) == 1, \
            apt_origin.plain_requests
        assert all("APT-HTTP" in agent for agent in apt_origin.plain_agents), apt_origin.plain_agents
        assert not _cached_on_the_cache_host(sandbox_hosts, deb_c)
        assert f"apt: via cache; direct for {PLAIN_ORIGIN} (not forwarded by the cache)" in run_log
        step = {"name": "the stand-in package", "become": True,
                "apt": {"packages": [PACKAGES[0]], "update_cache": True}}
        # The host's own source is as it was: https://, no proxy written anywhere.
        rc, out, _ = sandbox_hosts.run("sandbox2", f"cat {SOURCE}; apt-config dump | "
                                       "grep -ci 'Acquire::http::Proxy' || true")
        assert out.splitlines() == [SOURCE_LINE.strip(), "0"], out

        # Another host (as the cache sees it: through the SSH forward) installs it too: the
        # origin is not asked for the package again.
        rc, _, err = sandbox_hosts.run("sandbox2", f"apt-get purge -y -q {PACKAGES[0]} && "
                                       "apt-get clean", user="root")
        assert rc == 0, err
        forward = _inventory(sandbox_hosts, work, index, "forward")
        second, data = _provision(work, forward, "second", step)
        assert second.rc == 0 and data["cache"] == "SSH forward", second.out + second.err
        assert apt_origin.fetches(deb_a) == 1, apt_origin.requests

        # apt-get run by a shell step goes through the cache as well.
        deb_b = f"{PACKAGES[1]}_1.0_all.deb"
        shell, data = _provision(work, direct, "shell", {
            "name": "apt-get in a shell step", "become": True,
            "shell": f"apt-get update -q && apt-get install -y -q {PACKAGES[1]}"})
        assert shell.rc == 0, shell.out + shell.err
        assert apt_origin.fetches(deb_b) == 1 and _cached_on_the_cache_host(sandbox_hosts, deb_b)
        rc, out, _ = sandbox_hosts.run("sandbox2", f"dpkg-query -W -f '${{Status}}\\n' {PACKAGES[1]}")
        assert out.strip() == "install ok installed", out
    finally:
        sandbox_hosts.run("sandbox2", f"apt-get purge -y -q {' '.join(PACKAGES)} {PLAIN_PACKAGE}; "
                          f"rm -f {SOURCE} {PLAIN_SOURCE} {KEYRING}; apt-get clean", user="root")
        sandbox_hosts.run("sandbox1", f"rm -f {CA_FILE} {link}", user="root")
