"""The fleet cache end to end on sandbox hosts: playbooks/cache.yaml installs the real
apt-cacher-ng and devpi-server on sandbox1; sandbox2's wheels then come from the cache (directly,
then through gpuprov's SSH forward), and with the cache down from the origin, with a warning.

The origin is a STAND-IN PyPI index served on 127.0.0.1 by this test (one wheel of 1 MiB that
the test builds), so the test can count who fetched the wheel from the origin: devpi once, and
pip itself only when the cache is down. The inventory's cache ports are the ones cache.yaml
sets the cache up on."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, invoke, write_yaml
from tests.http_stub import serve
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

CACHE_RECIPE = str(REPO / "playbooks" / "cache.yaml")
PROJECT = "gpuprov-standin-payload"
WHEEL = "gpuprov_standin_payload-1.0-py3-none-any.whl"
# Not the default ports: nothing else a test runs may find (or collide with) this cache.
APT_PORT, PYPI_PORT = 3242, 3241


def _wheel(folder: Path) -> Path:
    """A pure-Python wheel holding 1 MiB of random bytes, with a correct RECORD."""
    files = {
        "gpuprov_standin_payload/__init__.py": b'"""STAND-IN built by gpuprov\'s tests."""\n',
        "gpuprov_standin_payload/payload.bin": os.urandom(1 << 20),
        "gpuprov_standin_payload-1.0.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: {PROJECT}\nVersion: 1.0\n".encode(),
        "gpuprov_standin_payload-1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: gpuprov-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n" for name, data in files.items())
    record += "gpuprov_standin_payload-1.0.dist-info/RECORD,,\n"
    path = folder / WHEEL
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("gpuprov_standin_payload-1.0.dist-info/RECORD", record)
    return path


class StandinIndex:
    """The stand-in origin: /simple/ pages and the wheel, with every request's path and
    User-Agent kept in `requests`."""

    def __init__(self, folder: Path):
        self.wheel = _wheel(folder).read_bytes()
        self.requests: list[tuple[str, str]] = []
        digest = hashlib.sha256(self.wheel).hexdigest()
        pages = {"/simple/": f'<a href="{PROJECT}/">{PROJECT}</a>',
                 f"/simple/{PROJECT}/": f'<a href="../../files/{WHEEL}#sha256={digest}">{WHEEL}</a>'}

        def answer(path, headers):
            self.requests.append((path, headers.get("User-Agent", "")))
            if path == f"/files/{WHEEL}":
                return 200, "application/octet-stream", self.wheel
            if path in pages:
                return 200, "text/html", f"<html><body>{pages[path]}</body></html>".encode()
            return 404, "text/html", b"<html>not found</html>"

        self.server = serve(answer)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def wheel_fetches(self) -> list[str]:
        """The User-Agent of each request for the wheel itself."""
        return [agent for path, agent in self.requests if path == f"/files/{WHEEL}"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def origin(tmp_path):
    index = StandinIndex(tmp_path)
    yield index
    index.close()


def _inventory(sandbox_hosts, work: Path, origin: StandinIndex, reach: str) -> Path:
    data = yaml.safe_load(sandbox_hosts.inventory.read_text())
    data["hosts"]["sandbox1"]["vars"] = {
        "cache_pypi_upstream": f"{origin.url}/simple/", "cache_mirrors": [],
        "cache_prefetch": [f"{PROJECT}==1.0"]}
    data["cache"] = {"host": "sandbox1", "reach": reach, "apt_port": APT_PORT,
                     "pypi_port": PYPI_PORT}
    return write_yaml(work / f"inventory-{reach}.yaml", data)


def _install(work: Path, inventory: Path, venv: str, origin: StandinIndex, name: str):
    recipe = write_yaml(work / f"{name}.yaml", {"name": name, "steps": [
        {"name": "the stand-in wheel", "pip": {"venv": venv, "packages": [f"{PROJECT}==1.0"],
                                               "index_url": f"{origin.url}/simple/",
                                               "extra_args": ["--no-cache-dir"]}}]})
    result = invoke("provision", "--host", "sandbox2", "--inventory", str(inventory),
                    "--recipe", str(recipe), "--no-validate", "--json", str(work / f"{name}.json"),
                    cwd=work, timeout=600)
    data = json.loads((work / f"{name}.json").read_text())["hosts"]["sandbox2"]
    return result, data


def test_the_second_install_comes_from_the_cache_and_a_dead_cache_from_the_origin(
        sandbox_hosts, work, origin):
    direct = _inventory(sandbox_hosts, work, origin, "auto")
    setup = invoke("provision", "--host", "sandbox1", "--inventory", str(direct), "--recipe",
                   CACHE_RECIPE, "--no-validate", cwd=work, timeout=900)
    assert setup.rc == 0, setup.out + setup.err
    # Converged: a second run changes nothing on the cache host.
    again = invoke("provision", "--host", "sandbox1", "--inventory", str(direct), "--recipe",
                   CACHE_RECIPE, "--no-validate", "--json", str(work / "again.json"), cwd=work,
                   timeout=300)
    assert again.rc == 0 and json.loads((work / "again.json").read_text())[
        "hosts"]["sandbox1"]["changed"] == 0, again.out
    # cache_prefetch: devpi fetched the wheel from the origin once, before any host asked.
    fetched = origin.wheel_fetches()
    assert len(fetched) == 1 and fetched[0].startswith("devpi-server"), origin.requests

    first, data = _install(work, direct, "/tmp/fleet-a", origin, "first")
    assert first.rc == 0 and data["cache"] == "direct", first.out + first.err
    assert len(origin.wheel_fetches()) == 1, origin.requests

    # Another install (another host, as far as the cache can tell: through the SSH forward,
    # from 127.0.0.1 on sandbox2) takes the wheel from the cache: the origin is not asked again.
    forward = _inventory(sandbox_hosts, work, origin, "forward")
    second, data = _install(work, forward, "/tmp/fleet-b", origin, "second")
    assert second.rc == 0 and data["cache"] == "SSH forward", second.out + second.err
    assert len(origin.wheel_fetches()) == 1, origin.requests
    rc, out, _ = sandbox_hosts.run("sandbox2", "/tmp/fleet-b/bin/python -c 'import "
                                   "gpuprov_standin_payload, os; print(os.path.getsize("
                                   "gpuprov_standin_payload.__path__[0] + \"/payload.bin\"))'")
    assert rc == 0 and out.strip() == str(1 << 20)

    # The cache host's services stop: the install still works, from the origin, with a warning.
    rc, _, err = sandbox_hosts.run("sandbox1", "kill $(cat /run/gpuprov-devpi.pid); "
                                   "pkill -x apt-cacher-ng; sleep 1", user="root")
    assert rc == 0, err
    third, data = _install(work, direct, "/tmp/fleet-c", origin, "third")
    assert third.rc == 0 and "cache" not in data, third.out + third.err
    assert "warning" in third.out and "fleet cache sandbox1 does not answer" in third.out
    assert data["warnings"] and "apt and pip go to the origin" in data["warnings"][0]
    fetched = origin.wheel_fetches()
    assert len(fetched) == 2 and fetched[1].startswith("pip/"), origin.requests
