"""`gpuprov bundle --apt-repo REPO`: the .debs of the row's apt lock, from a signed STAND-IN of
NVIDIA's repository (tests/standin_repo.py, as tests/test_cache_https_apt.py builds one, served on
127.0.0.1). NVIDIA's own repository (developer.download.nvidia.com) cannot be reached from here,
so the packages are the stand-in's tiny ones under NVIDIA's names; the lock is made from its
index by the real `gpuprov lock --apt`. The wheels come from an index the test serves on
127.0.0.1 (two small wheels it builds, in the places of the row's and uv's); `--no-debs`, so no
Debian package of this machine's apt is fetched (tests/test_bundle_sandbox.py covers those).

Real parts: the stand-in's .debs built with dpkg-deb and its index signed with gpg; pip
download; dpkg-deb reading the fetched .debs; gpg signing the bundle's repository and gpgv
checking that signature with the bundle's key."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from remote.bundle import read_bundle
from remote.config.aptlock import read_apt_lock
from tests.conftest import invoke
from tests.http_stub import serve
from tests.standin_repo import StandinRepo
from tests.test_bundle import PAYLOAD, UV, _lock, _wheel

REPO_PATH = "debian12/x86_64"
APT_LOCK = "apt-debian12-x86_64-cuda-13.0.txt"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standin():
    with StandinRepo(REPO_PATH) as repo:
        yield repo


@pytest.fixture
def site(standin, tmp_path):
    """Locks (the row's and uv's over the test's wheels, the apt lock from the stand-in's index)
    and a simple index serving the wheels."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    payload = _wheel(wheels / PAYLOAD, "gpuprov_standin_payload", "1.0")
    uv = _wheel(wheels / UV, "uv", "0.13.8")
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "cuda-13.0-wheels.txt").write_text(_lock({"gpuprov-standin-payload==1.0": payload}))
    (locks / "uv.txt").write_text(_lock({"uv==0.13.8": uv}))
    made = invoke("lock", "--apt", "--cuda", "13.0", "--apt-repo", REPO_PATH, "--apt-base", standin.url,
                  "--out", str(locks), cwd=tmp_path)
    assert made.rc == 0, made.out + made.err
    files = {PAYLOAD: payload, UV: uv}

    def answer(path, headers):
        if path.startswith("/files/") and path[7:] in files:
            return 200, "application/octet-stream", files[path[7:]]
        project = path.strip("/").split("/")[-1].replace("_", "-")
        links = "".join(f'<a href="/files/{n}#sha256={hashlib.sha256(d).hexdigest()}">{n}</a>\n'
                        for n, d in files.items() if n.split("-")[0].replace("_", "-") == project)
        return (200, "text/html", f"<html><body>{links}</body></html>".encode()) if links else \
            (404, "text/plain", b"no such project")
    server = serve(answer)
    try:
        yield tmp_path, locks, f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def _bundle(work: Path, locks: Path, index: str, base: str, out: Path):
    return invoke("bundle", "--cuda", "13.0", "--out", str(out), "--no-debs", "--distro", "debian12",
                  "--locks", str(locks), "--index-url", index, "--apt-repo", REPO_PATH,
                  "--apt-base", base, cwd=work, timeout=600)


def test_the_apt_lock_s_debs_come_into_the_bundle_s_signed_repository(standin, site):
    work, locks, index = site
    out = work / "site.bundle.tar"
    result = _bundle(work, locks, index, standin.url, out)
    assert result.rc == 0, result.out + result.err
    assert f".debs of {APT_LOCK} from {standin.url}/{REPO_PATH}" in result.out

    lock = read_apt_lock(locks / APT_LOCK)
    checked = read_bundle(out, locks_dir=locks)
    files = checked.files
    debs = {f["sha256"]: f for p, f in files.items() if p.endswith(".deb")}
    # every pin of the lock (its closure inside NVIDIA's index included) is there, that very file
    assert len(lock.pins) >= 5 and len(debs) == len(lock.pins)
    for pin in lock.pins.values():
        entry = debs[pin.sha256]
        assert entry["path"].startswith(f"apt/{pin.name}_") and entry["origin"].startswith(standin.url)
        assert checked.manifest["debs"][pin.name] == pin.version
    assert f"locks/{APT_LOCK}" in files
    # apt on the host installs the locked versions from the bundle (the apt kind's check)
    assert {"cuda-toolkit-13-0", "cudnn9-cuda-13"} <= checked.route().debs
    with tarfile.open(out) as tar:
        packages = tar.extractfile("apt/Packages").read().decode()
        inrelease = tar.extractfile("apt/InRelease").read()
        key = tar.extractfile("apt/bundle-key.gpg").read()
    toolkit = lock.pins["cuda-toolkit-13-0"]
    stanza = next(s for s in packages.split("\n\n") if s.startswith("Package: cuda-toolkit-13-0\n"))
    assert f"Version: {toolkit.version}" in stanza and f"SHA256: {toolkit.sha256}" in stanza
    assert re.search(r"^Filename: \./cuda-toolkit-13-0_[^/\n]+\.deb$", stanza, re.M), stanza
    assert "STAND-IN" in stanza        # its own control file: the stand-in says what it is
    (work / "key.gpg").write_bytes(key)
    (work / "InRelease").write_bytes(inrelease)
    verified = subprocess.run(["gpgv", "--keyring", str(work / "key.gpg"), str(work / "InRelease")],
                              capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stderr
    assert hashlib.sha256(packages.encode()).hexdigest() in inrelease.decode()


def test_a_deb_the_repository_changed_after_the_lock_is_refused_naming_it(standin, site):
    """The stand-in serves another file under a locked name: no bundle, one line naming it."""
    work, locks, index = site
    lock = read_apt_lock(locks / APT_LOCK)
    pin = lock.pins["cudnn9-cuda-13"]
    served = next(standin.repo_dir.glob(f"cudnn9-cuda-13_{pin.version}_*.deb"))
    original = served.read_bytes()
    served.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    try:
        out = work / "out" / "site.bundle.tar"
        result = _bundle(work, locks, index, standin.url, out)
    finally:
        served.write_bytes(original)
    assert result.rc == 2, result.out + result.err
    assert result.err.startswith(f"bundle: {served.name}: sha256 ") and len(result.err.strip().splitlines()) == 1
    assert f"is not the one {APT_LOCK} locks for cudnn9-cuda-13={pin.version}" in result.err
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_a_bundle_missing_a_deb_its_apt_lock_pins_is_refused(standin, site):
    """A manifest rewritten without one of the apt lock's .debs no longer matches its locks."""
    from remote.bundle import BundleError
    from remote.bundle.archive import sums_text
    from tests.test_bundle import _rewrite

    work, locks, index = site
    out = work / "site.bundle.tar"
    assert _bundle(work, locks, index, standin.url, out).rc == 0
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    gone = next(f["path"] for f in manifest["files"] if f["path"].startswith("apt/cuda-toolkit-13-0_"))
    manifest["files"] = [f for f in manifest["files"] if f["path"] != gone]
    new = {"manifest.json": json.dumps(manifest).encode(), "SHA256SUMS": sums_text(manifest["files"]).encode()}
    bad = _rewrite(out, work / "bad.tar", lambda m, d: None if m.name == gone else (m, new.get(m.name, d)))
    with pytest.raises(BundleError, match=re.escape(f"locks/{APT_LOCK}: cuda-toolkit-13-0=")):
        read_bundle(bad)
