"""A bundle's authenticity, which never travels with it (issue 41, attack 1): `provision
--bundle` takes its trust anchor from the command line or the inventory (the site key's
fingerprint with the keyring holding its public half, or the archive's sha256 given out of
band), and refuses a bundle it does not vouch for in one line naming the file, exit 2, before
any host is contacted.

Real parts: gpg and gpgv, with keys generated for each test in folders of their own (the "site
key" in one, the attacker's in another: neither is this machine's keyring); a real .deb with a
postinst built by dpkg-deb as the attacker's payload; the bundle's own writer and reader. The
bundles are the small ones tests/test_bundle.py writes (no network); the attack end to end,
with the real `gpuprov bundle` and apt/dpkg on offline sandbox hosts, is
tests/test_bundle_sandbox.py::test_a_re_signed_bundle_is_refused_and_the_honest_one_installs.
The host is at an address where nothing answers: a run that went on would make a run folder
and end unreachable; each refusal here leaves no run folder."""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from remote.bundle import read_bundle, trust
from remote.bundle.archive import SIGNATURE, sums_text, write_archive
from tests.conftest import write_yaml
from tests.test_bundle import DEB, _rewrite, stage_bundle

NOWHERE = {"address": "127.0.0.1", "port": 9, "user": "nobody"}   # nothing answers there


class Keyring:
    """An OpenPGP signing key in a GNUPGHOME of its own (short path: gpg-agent's socket)."""

    def __init__(self, name: str):
        self.home = Path(tempfile.mkdtemp(prefix="gk"))
        self.env = dict(os.environ, GNUPGHOME=str(self.home), LC_ALL="C")
        self.gpg(["--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
                  f"{name} <{name}@example.invalid>", "ed25519", "sign", "never"])
        listing = self.gpg(["--with-colons", "--list-secret-keys"])
        self.fingerprint = next(line.split(":")[9] for line in listing.splitlines()
                                if line.startswith("fpr:"))

    def gpg(self, args: list[str]) -> str:
        proc = subprocess.run(["gpg", "--batch", "--yes", *args], env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def export(self, path: Path, armor: bool = False) -> Path:
        self.gpg(["--output", str(path), *(["--armor"] if armor else []), "--export", self.fingerprint])
        return path

    def sign(self, data: bytes) -> bytes:
        """A detached signature of `data`, as `gpuprov bundle --sign-key` makes it."""
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "m").write_bytes(data)
            self.gpg(["--local-user", self.fingerprint, "--detach-sign", "--output",
                      str(Path(tmp) / "m.sig"), str(Path(tmp) / "m")])
            return (Path(tmp) / "m.sig").read_bytes()

    def close(self) -> None:
        subprocess.run(["gpgconf", "--kill", "all"], env=self.env, capture_output=True, timeout=30)
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="module")
def site_key():
    key = Keyring("site")
    yield key
    key.close()


@pytest.fixture(scope="module")
def attacker_key():
    key = Keyring("attacker")
    yield key
    key.close()


@pytest.fixture
def signed(tmp_path, site_key) -> Path:
    """The small bundle, its manifest signed by the site key."""
    stage, manifest = stage_bundle(tmp_path)
    out = tmp_path / "signed.tar"
    write_archive(stage, manifest, out, site_key.sign)
    return out


def postinst_deb(folder: Path, package: str = "g++", version: str = "12.2.0-3") -> Path:
    """The attacker's .deb: a postinst that runs as root wherever it is installed (dpkg-deb)."""
    root = folder / "payload"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: amd64\n"
        "Maintainer: attacker <a@example.invalid>\nDescription: not g++\n")
    (root / "DEBIAN" / "postinst").write_text("#!/bin/sh\nid -u > /root/pwned\n")
    (root / "DEBIAN" / "postinst").chmod(0o755)
    out = folder / f"{package}_{version}_amd64.deb"
    proc = subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return out


def re_signed(bundle: Path, out: Path, deb: Path, key: Keyring | None) -> Path:
    """The attack: `deb` in place of the bundle's .deb, manifest.json and SHA256SUMS rewritten
    to match, and the manifest signed with `key` (None: no signature at all)."""
    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    data = deb.read_bytes()
    for entry in manifest["files"]:
        if entry["path"] == f"apt/{DEB}":
            entry.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    raw = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n"
    new = {f"apt/{DEB}": data, "manifest.json": raw, "SHA256SUMS": sums_text(manifest["files"]).encode()}
    if key is not None:
        new[SIGNATURE] = key.sign(raw)
    out = _rewrite(bundle, out, lambda m, d: None if m.name == SIGNATURE else (m, new.get(m.name, d)))
    if key is not None:
        with tarfile.open(out, "a") as tar:
            info = tarfile.TarInfo(SIGNATURE)
            info.size = len(new[SIGNATURE])
            tar.addfile(info, io.BytesIO(new[SIGNATURE]))
    return out


def _provision(tmp_path: Path, bundle: Path, inventory: dict | None = None, **anchor):
    from remote.commands import provision as provision_cmd

    inv = write_yaml(tmp_path / "inventory.yaml", inventory or {"hosts": {"h1": dict(NOWHERE)}})
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "r", "steps": [{"apt": {"packages": ["g++"]}}]})
    return provision_cmd.run(host="all", recipe=str(recipe), inventory=str(inv), validate=False,
                         logs_dir=str(tmp_path / "logs"), bundle=str(bundle), **anchor)


def _refused(tmp_path: Path, capsys, rc: int, *says: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for text in says:
        assert text in err, err
    assert not (tmp_path / "logs").exists()    # no run folder: no host was contacted
    return err


def test_a_bundle_re_signed_by_its_carrier_is_refused_before_any_host(
        tmp_path, capsys, signed, site_key, attacker_key):
    """Attack 1 of issue 41: a .deb swapped for one with a postinst, the manifest and
    SHA256SUMS rewritten and re-signed with the carrier's own key: the bundle is consistent
    with itself, but not signed by the site key."""
    keyring = site_key.export(tmp_path / "site.gpg")
    bad = re_signed(signed, tmp_path / "bad.tar", postinst_deb(tmp_path), attacker_key)
    assert read_bundle(bad).id       # consistent with itself: read_bundle alone let it through
    rc = _provision(tmp_path, bad, bundle_key=site_key.fingerprint, bundle_keyring=str(keyring))
    _refused(tmp_path, capsys, rc, str(bad), f"{SIGNATURE}: made by key",
             f"not signed by the site key {site_key.fingerprint}")


def test_a_rewritten_manifest_under_the_honest_signature_is_refused(tmp_path, capsys, signed, site_key):
    keyring = site_key.export(tmp_path / "site.gpg")
    with tarfile.open(signed) as tar:
        honest = tar.extractfile(SIGNATURE).read()

    class Keep:        # the site's own signature, kept over the rewritten manifest
        def sign(self, data: bytes) -> bytes:
            return honest

    bad = re_signed(signed, tmp_path / "bad.tar", postinst_deb(tmp_path), Keep())  # type: ignore[arg-type]
    rc = _provision(tmp_path, bad, bundle_key=site_key.fingerprint, bundle_keyring=str(keyring))
    _refused(tmp_path, capsys, rc, str(bad), "a bad signature (the manifest was changed after it was signed)")


def test_an_unsigned_bundle_is_refused_when_the_site_key_is_the_anchor(tmp_path, capsys, signed, site_key):
    keyring = site_key.export(tmp_path / "site.gpg")
    bare = re_signed(signed, tmp_path / "bare.tar", postinst_deb(tmp_path), None)
    rc = _provision(tmp_path, bare, bundle_key=site_key.fingerprint, bundle_keyring=str(keyring))
    _refused(tmp_path, capsys, rc, str(bare), f"it is not signed (no {SIGNATURE})", "--sign-key")


def test_a_bundle_signed_by_a_key_the_site_does_not_trust_is_refused(tmp_path, capsys, signed, attacker_key):
    """The carrier gives their own keyring and the site's fingerprint: the signature is good,
    but its key is not the anchor."""
    keyring = attacker_key.export(tmp_path / "theirs.gpg")
    rc = _provision(tmp_path, signed, bundle_key="0" * 40, bundle_keyring=str(keyring))
    _refused(tmp_path, capsys, rc, str(signed), "made by key", "0" * 40)


def test_the_honest_signed_bundle_passes_with_the_site_anchor(tmp_path, site_key, signed):
    """Armored or binary, the exported key vouches for the bundle its key signed; the run's
    first line says which key."""
    for armor in (False, True):
        keyring = site_key.export(tmp_path / f"site-{armor}.key", armor=armor)
        anchor = trust.anchor(" ".join(site_key.fingerprint[i:i + 4] for i in range(0, 40, 4)), str(keyring))
        assert trust.check(read_bundle(signed), anchor) == f"signed by {site_key.fingerprint}"


def test_a_wrong_bundle_sha256_is_refused_and_the_right_one_passes(tmp_path, capsys, signed):
    rc = _provision(tmp_path, signed, bundle_sha256="ab" * 32)
    _refused(tmp_path, capsys, rc, str(signed), "its sha256 is", "not " + "ab" * 32,
             "as --bundle-sha256 says")
    digest = hashlib.sha256(signed.read_bytes()).hexdigest()
    assert trust.check(read_bundle(signed), trust.anchor(sha=digest.upper())).startswith("sha256 ")


@pytest.mark.parametrize("anchor, says", [
    ({}, "no trust anchor for this bundle: give its trust anchor: --bundle-key FINGERPRINT"),
    ({"bundle_key": "76613D3393FEBB98", "bundle_keyring": "/etc/hostname"},
     "--bundle-key '76613D3393FEBB98' is not a key's full fingerprint"),
    ({"bundle_key": "A" * 40}, "--bundle-key needs --bundle-keyring"),
    ({"bundle_key": "A" * 40, "bundle_keyring": "/nonexistent/site.gpg"},
     "--bundle-keyring /nonexistent/site.gpg: no such file"),
    ({"bundle_sha256": "xyz"}, "--bundle-sha256 'xyz' is not a sha256"),
])
def test_a_missing_or_malformed_anchor_is_one_line_exit_2(tmp_path, capsys, signed, anchor, says):
    rc = _provision(tmp_path, signed, **anchor)
    _refused(tmp_path, capsys, rc, says)


def test_the_inventory_gives_the_anchor_and_names_its_line_when_wrong(tmp_path, capsys, signed, site_key):
    """`bundle_key` and `bundle_keyring` (relative to the inventory) at the inventory's top
    level; the command line's anchor wins over them."""
    site_key.export(tmp_path / "site.gpg")
    inventory = {"bundle_key": site_key.fingerprint, "bundle_keyring": "site.gpg",
                 "hosts": {"h1": dict(NOWHERE)}}
    from remote.config.inventory import load_inventory

    inv = load_inventory(write_yaml(tmp_path / "inventory.yaml", inventory))
    anchor = trust.anchor(inventory=inv.bundle_trust)
    assert anchor.keyring == tmp_path / "site.gpg"
    assert trust.check(read_bundle(signed), anchor) == f"signed by {site_key.fingerprint}"
    rc = _provision(tmp_path, signed, dict(inventory, bundle_key="12345"))
    err = _refused(tmp_path, capsys, rc, "bundle_key '12345' is not a key's full fingerprint")
    assert err.startswith(f"error: {tmp_path / 'inventory.yaml'}:1: "), err
    rc = _provision(tmp_path, signed, dict(inventory, bundle_key="12345"), bundle_sha256="ab" * 32)
    _refused(tmp_path, capsys, rc, "as --bundle-sha256 says")


def test_a_deb_of_a_locked_package_that_is_not_the_lock_s_file_is_refused(tmp_path, site_key):
    """Where the bundle carries an apt lock, every .deb of a package it pins is the lock's file:
    another version beside the locked one (which apt could prefer) is refused."""
    stage, manifest = stage_bundle(tmp_path)
    locked = postinst_deb(tmp_path / "a", "cuda-toolkit-13-0", "13.0.2-1")
    other = postinst_deb(tmp_path / "b", "cuda-toolkit-13-0", "13.0.3-1")
    digest = hashlib.sha256(locked.read_bytes()).hexdigest()
    (stage / "locks" / "apt-debian12-x86_64-cuda-13.0.txt").write_text(
        f"cuda-toolkit-13-0=13.0.2-1  # sha256:{digest}\n")
    for deb in (locked, other):
        shutil.copyfile(deb, stage / "apt" / deb.name)
    manifest["files"] = [{"path": p.relative_to(stage).as_posix(),
                          "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                          "size": p.stat().st_size} for p in sorted(stage.rglob("*")) if p.is_file()]
    out = tmp_path / "b.tar"
    write_archive(stage, manifest, out, site_key.sign)
    from remote.bundle import BundleError

    with pytest.raises(BundleError) as exc:
        read_bundle(out)
    assert f"apt/{other.name}: sha256" in str(exc.value)
    assert ("is not the one locks/apt-debian12-x86_64-cuda-13.0.txt locks for "
            "cuda-toolkit-13-0=13.0.2-1") in str(exc.value)
    (stage / "apt" / other.name).unlink()
    manifest["files"] = [f for f in manifest["files"] if f["path"] != f"apt/{other.name}"]
    write_archive(stage, manifest, out, site_key.sign)
    assert read_bundle(out).id        # the locked file alone: accepted


def test_bundle_sign_key_that_is_not_in_the_keyring_stops_the_build_before_any_download(
        tmp_path, capsys, monkeypatch, site_key):
    from remote.bundle import BundleOptions, run_bundle

    monkeypatch.setenv("GNUPGHOME", str(site_key.home))
    out = tmp_path / "out" / "b.tar"
    rc = run_bundle(BundleOptions("13.0", str(out), index_url="http://127.0.0.1:9/simple",
                                  debs=False, sign_key="B" * 40))
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--sign-key {'B' * 40}: no secret key with that fingerprint" in err
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_the_builder_s_signer_signs_with_the_user_s_key(tmp_path, monkeypatch, site_key):
    """`--sign-key`'s signer reads the user's own keyring (GNUPGHOME as set), and its
    signature verifies as provision checks it."""
    monkeypatch.setenv("GNUPGHOME", str(site_key.home))
    sign = trust.signer(site_key.fingerprint.lower())
    signature = sign(b'{"schema": 1}\n')
    keyring = site_key.export(tmp_path / "site.gpg")
    assert trust.verify(b'{"schema": 1}\n', signature, keyring, site_key.fingerprint) == ""
    assert "bad signature" in trust.verify(b'{"schema": 2}\n', signature, keyring, site_key.fingerprint)
