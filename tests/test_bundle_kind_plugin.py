"""A kind says what a bundle must carry for it: `gpuprov bundle` asks each step's kind
(`Kind.bundle_carries`), so a kind the bundle has never heard of, registered at test time (one
row in `remote.kinds.KINDS`, as tests/test_scheduler_plugin.py does for schedulers), has its
file carried without an edit anywhere else, and finds it on the host by its sha256
(`through_bundle`).

The kind here installs an apt keyring file from a URL, checked against its sha256. Real parts:
the bundle's build as `gpuprov bundle` runs it (real `pip download` of two stand-in wheels from
a PEP 503 index served on 127.0.0.1, the keyring's bytes from the same server), the recipe
loader, the archive's own writer and reader."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from remote.bundle import read_bundle
from remote.bundle.build import DISTROS, BundleOptions, build_bundle, this_distro
from remote.config.schema import Arg
from remote.kinds import KINDS, Command, Kind
from remote.kinds.base import Args, q
from remote.kinds.route import BundleNeeds, BundleRoute, BundleTarget, CarriedFile
from tests.conftest import write_yaml
from tests.http_stub import serve
from tests.test_bundle import _lock, _wheel

KEYRING = b"STAND-IN bytes of a vendor's apt keyring (a .gpg keyring file)\n"
PAYLOAD = "gpuprov_standin_payload-1.0-py3-none-any.whl"
UV = "uv-0.13.8-py3-none-any.whl"


class KeyringFile(CarriedFile):
    """A keyring step's file in a bundle: apt/SHA256.gpg."""

    kind = "keyring"
    suffix = ".gpg"


class Keyring(Kind[str]):
    """`keyring: {url, sha256, dest}`: the file at `url`, checked against `sha256`, installed
    at `dest`; satisfied when `dest` has that sha256."""

    name = "keyring"
    spec = {"url": Arg((str,), required=True), "sha256": Arg((str,), required=True),
            "dest": Arg((str,), required=True)}
    probe_fields = ("dest",)
    fetches = True

    def probe(self, args: Args) -> str:
        return f"sha256sum {q(args['dest'])} 2>/dev/null | cut -c1-64"

    def parse(self, out: str) -> str:
        return out.strip()

    def bundle_carries(self, args: Args, target: BundleTarget) -> BundleNeeds:
        url, sha = (str(v) for v in target.render([args["url"], args["sha256"]]))
        return BundleNeeds(files=(KeyringFile(str(args["dest"]), url, sha),))

    def through_bundle(self, args: Args, bundle: BundleRoute) -> Args:
        found = bundle.files.get(str(args["sha256"]))
        return dict(args, _bundle_file=f"{bundle.root}/{found}" if found else "")

    def plan(self, args: Args, fact: str) -> list[Command]:
        if fact == args["sha256"]:
            return []
        return [Command(f"install -m 644 {q(args['_bundle_file'])} {q(args['dest'])}")]


@pytest.fixture
def server(tmp_path: Path):
    """A PEP 503 simple index of two stand-in wheels (the row's lock and uv's), and the
    keyring's bytes, on 127.0.0.1."""
    wheels = {PAYLOAD: _wheel(tmp_path / PAYLOAD, "gpuprov_standin_payload", "1.0"),
              UV: _wheel(tmp_path / UV, "uv", "0.13.8")}
    projects = {"gpuprov-standin-payload": PAYLOAD, "uv": UV}

    def answer(path: str, headers: Any) -> tuple[int, str, bytes]:
        project = path.removeprefix("/simple/").strip("/")
        if project in projects:
            name = projects[project]
            sha = hashlib.sha256(wheels[name]).hexdigest()
            return 200, "text/html", f'<a href="/files/{name}#sha256={sha}">{name}</a>\n'.encode()
        if path.startswith("/files/") and path[len("/files/"):] in wheels:
            return 200, "application/octet-stream", wheels[path[len("/files/"):]]
        if path == "/vendor/archive-keyring.gpg":
            return 200, "application/octet-stream", KEYRING
        return 404, "text/plain", b"no\n"

    server = serve(answer)
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "cuda-13.0-wheels.txt").write_text(_lock({"gpuprov-standin-payload==1.0": wheels[PAYLOAD]}))
    (locks / "uv.txt").write_text(_lock({"uv==0.13.8": wheels[UV]}))
    yield f"http://127.0.0.1:{server.server_address[1]}", locks
    server.shutdown()
    server.server_close()


@pytest.mark.slow
@pytest.mark.skipif(this_distro() not in DISTROS, reason="the build's target is this machine's "
                    "distribution: it must be a supported one")
def test_a_kind_registered_at_test_time_has_its_file_carried_and_found_by_its_sha256(
        tmp_path, server, monkeypatch):
    base, locks = server
    monkeypatch.setitem(KINDS, "keyring", Keyring())
    sha = hashlib.sha256(KEYRING).hexdigest()
    recipe = write_yaml(tmp_path / "site.yaml", {"name": "a vendor's keyring", "vars": {
        "vendor_base": f"{base}/vendor"}, "steps": [
            {"name": "vendor keyring", "keyring": {
                "url": "{{ vendor_base }}/archive-keyring.gpg", "sha256": sha,
                "dest": "/etc/apt/keyrings/vendor.gpg"}}]})
    out = tmp_path / "b.tar"
    lines: list[str] = []
    build_bundle(BundleOptions("13.0", str(out), recipe=str(recipe), locks=str(locks),
                               index_url=f"{base}/simple"), progress=lines.append)
    bundle = read_bundle(out, locks_dir=locks)
    entry = bundle.files[f"apt/{sha}.gpg"]
    assert entry["origin"] == f"{base}/vendor/archive-keyring.gpg (a recipe's keyring step)"
    route = bundle.route()
    assert route.files[sha] == f"apt/{sha}.gpg"
    (step,) = Keyring().plan(Keyring().through_bundle({"sha256": sha, "dest": "/etc/k.gpg"}, route), "")
    assert step.script == f"install -m 644 {route.root}/apt/{sha}.gpg /etc/k.gpg"
