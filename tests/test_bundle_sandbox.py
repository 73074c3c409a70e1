"""Air-gapped sites end to end (issue 35): `gpuprov bundle` builds a bundle with real pip, apt,
dpkg-scanpackages and gpg from PyPI and this machine's Debian mirror; `gpuprov provision
--bundle` installs it on two OFFLINE sandbox hosts (`sandbox up --offline`: a network namespace
of their own with nothing but `lo`, sshd reached through a relay), which the test first proves
reach nothing; a re-run changes nothing; validation runs from the bundle's validate/, nothing
pushed, to the honest "no GPU" verdict; a tampered bundle is refused naming the file; a
package the bundle lacks fails that step naming it and the command that adds it. The bundle is
signed by a "site key" generated for the test in a GNUPGHOME of its own (`--sign-key`), and
provisioned with that key as its anchor (`--bundle-key`, `--bundle-keyring`); a bundle whose
carrier swapped a .deb for one with a postinst and re-signed everything with their own key is
refused before any host is contacted (issue 41, attack 1).

What is not real here, and why: the lock in the 13.0 row's place holds two small PyPI wheels
(six, packaging), resolved at test time by the real `uv pip compile --generate-hashes`; the
real row's CUDA wheels are 1.1 GB (tests/test_bundle_row.py installs their bundle on an
offline host, tests/test_lock_sandbox.py installs them online). The .debs are the recipe's
real ones (python3-venv, g++ and their dependencies, about 100 packages and 96 MB). NVIDIA's
own apt repository cannot be reached from here, so the bundle's apt half is Debian's packages
only.

Needs root, PyPI and the Debian mirror this machine's apt uses."""
from __future__ import annotations

import email.utils
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import invoke, write_yaml
from tests.http_stub import serve
from tests.sandbox_fixture import SandboxHosts, own_hosts
from tests.test_bundle_aptrepo import APT_LOCK, _bundle, site, standin  # noqa: F401 - fixtures
from tests.test_bundle_distro import small_locks
from tests.test_bundle_trust import Keyring, postinst_deb

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

VENV = "/home/admin/.gpuprov/venv"


@pytest.fixture(scope="module")
def offline_hosts():
    """Two offline sandbox hosts of their own (the shared fixture's hosts are online)."""
    with own_hosts(2, offline=True) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def site_key():
    key = Keyring("site")
    yield key
    key.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory, site_key):
    """A recipe like cuda-wheels.yaml (apt python3-venv and g++, then a pip_lock), its locks,
    its bundle built by `gpuprov bundle --sign-key` with the site key, and the anchor that
    provision takes (the site key's fingerprint and exported public key)."""
    work = tmp_path_factory.mktemp("bundle")
    locks = small_locks(work)
    recipe = write_yaml(work / "wheels.yaml", {"name": "CUDA from wheels (bundle test)", "steps": [
        {"name": "python3-venv and a C++ compiler", "become": True,
         "apt": {"packages": ["python3-venv", "g++"], "update_cache": True}},
        {"name": "the row's wheels (locked)",
         "pip_lock": {"lock": "locks/cuda-13.0-wheels.txt", "venv": VENV}}]})
    out = work / "site.bundle.tar"
    result = invoke("bundle", "--cuda", "13.0", "--out", str(out), "--recipe", str(recipe),
                    "--locks", str(locks), "--sign-key", site_key.fingerprint, cwd=work,
                    timeout=1200, env={"GNUPGHOME": str(site_key.home)})
    assert result.rc == 0, result.out + result.err
    assert "wheels" in result.out and ".debs" in result.out
    assert f"bundle: manifest signed by {site_key.fingerprint}" in result.out, result.out
    assert f"bundle: sha256 {hashlib.sha256(out.read_bytes()).hexdigest()}" in result.out
    keyring = site_key.export(work / "site.gpg")
    return work, recipe, out, ("--bundle-key", site_key.fingerprint, "--bundle-keyring", str(keyring))


def _provision(work: Path, hosts: SandboxHosts, recipe: Path, bundle: Path, name: str,
               validate: bool = False, variables: tuple = (), anchor: tuple = ()):
    """`provision --bundle` of `bundle` with `anchor` (default: its sha256, as given out of band)."""
    anchor = anchor or ("--bundle-sha256", hashlib.sha256(bundle.read_bytes()).hexdigest())
    result = invoke("provision", "--host", ",".join(hosts.names), "--inventory", str(hosts.inventory),
                    "--recipe", str(recipe), "--bundle", str(bundle), *anchor,
                    *(a for v in variables for a in ("--var", v)),
                    *([] if validate else ["--no-validate"]),
                    "--json", str(work / f"{name}.json"), cwd=work, timeout=900)
    path = work / f"{name}.json"
    return result, (json.loads(path.read_text())["hosts"] if path.exists() else None)


def test_offline_hosts_reach_nothing(offline_hosts):
    reaches_nothing(offline_hosts, "sandbox1")


def reaches_nothing(hosts: SandboxHosts, name: str) -> None:
    """No route, no name service, and not even the control machine's own loopback services:
    a server the test runs on 127.0.0.1 here is not there from inside host `name`."""
    server = serve(lambda path, headers: (200, "text/plain", b"reached\n"))
    port = server.server_address[1]
    try:
        rc, out, _ = hosts.run(name, "cat /proc/net/route; ls /sys/class/net")
        assert rc == 0 and out.split()[-1] == "lo" and len(out.strip().splitlines()) == 2, out
        for target in ("deb.debian.org", "pypi.org", "files.pythonhosted.org", "127.0.0.1"):
            rc, out, err = hosts.run(
                name, f"curl -sS --max-time 5 http://{target}:{port if target == '127.0.0.1' else 80}/",
                timeout=30)
            assert rc != 0 and "reached" not in out, (target, out, err)
        rc, out, _ = hosts.run(name, "sudo -n apt-get update -q 2>&1", timeout=120)
        assert "Err:" in out or "Failed to fetch" in out or "Temporary failure" in out, out
    finally:
        server.shutdown()
        server.server_close()


def test_provision_from_the_bundle_on_offline_hosts_then_converges(offline_hosts, built):
    work, recipe, bundle, anchor = built
    first, hosts = _provision(work, offline_hosts, recipe, bundle, "first", anchor=anchor)
    assert first.rc == 0, first.out + first.err
    for name in offline_hosts.names:
        assert [s["status"] for s in hosts[name]["steps"]] == ["changed"] * 3, hosts[name]
        rc, out, err = offline_hosts.run(name, "g++ --version && " + VENV + "/bin/python -c "
                                         "'import six, packaging; print(six.__version__, packaging.__version__)'")
        assert rc == 0 and out.strip().endswith("1.17.0 24.2"), out + err
        # apt trusted the bundle's repository through its own key, never [trusted=yes]
        rc, out, _ = offline_hosts.run(name, "cat /var/lib/gpuprov/bundles/*/sources.d/*.sources")
        assert "Signed-By: /var/lib/gpuprov/bundles/" in out and "trusted" not in out.lower(), out
    again, hosts = _provision(work, offline_hosts, recipe, bundle, "again", anchor=anchor)
    assert again.rc == 0, again.out + again.err
    assert all(s["status"] == "ok" for h in hosts.values() for s in h["steps"]), hosts

    # A package the bundle does not carry: that step fails, naming it and the command.
    more = write_yaml(work / "more.yaml", {"name": "more", "steps": [
        {"name": "make", "become": True, "apt": {"packages": ["make"]}}]})
    lacking, hosts = _provision(work, offline_hosts, more, bundle, "lacking", anchor=anchor)
    assert lacking.rc != 0
    message = hosts["sandbox1"]["steps"][-1]["message"]
    assert "make not in the bundle" in message and "gpuprov bundle --cuda 13.0" in message, message


def _stanza_of(packages: str, package: str) -> str:
    return next(s for s in packages.split("\n\n") if s.startswith(f"Package: {package}\n"))


def carrier_attack(bundle: Path, out: Path, work: Path, attacker: Keyring) -> Path:
    """What a carrier of the bundle can do with it, in full (issue 41, attack 1): the g++ .deb
    swapped for one of the same name and version whose postinst runs as root; its Packages
    stanza, Release, InRelease (clear-signed with the attacker's key), bundle-key.gpg (the
    attacker's public key), SHA256SUMS and manifest.json rewritten to match, and the manifest
    signed with the attacker's key. Every check inside the bundle then holds."""
    with tarfile.open(bundle) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    files = dict((m.name, d) for m, d in members)
    target = next(n for n in files if n.startswith("apt/g++_"))
    packages = files["apt/Packages"].decode()
    stanza = _stanza_of(packages, "g++")
    version = next(line.split(": ", 1)[1] for line in stanza.splitlines() if line.startswith("Version: "))
    deb = postinst_deb(work / "attack", "g++", version)
    data = deb.read_bytes()
    ours = "\n".join([line for line in stanza.splitlines()
                      if not line.startswith(("Size:", "SHA256:", "MD5sum:", "SHA1:", "SHA512:"))]
                     + [f"Size: {len(data)}", f"SHA256: {hashlib.sha256(data).hexdigest()}"])
    new_packages = packages.replace(stanza, ours).encode()
    release = (f"Origin: gpuprov bundle\nLabel: attacker\nDate: {email.utils.formatdate(usegmt=True)}\n"
               f"SHA256:\n {hashlib.sha256(new_packages).hexdigest()} {len(new_packages)} Packages\n").encode()
    (work / "attack" / "Release").write_bytes(release)
    attacker.gpg(["--local-user", attacker.fingerprint, "--clearsign", "--output",
                  str(work / "attack" / "InRelease"), str(work / "attack" / "Release")])
    changed = {target: data, "apt/Packages": new_packages, "apt/Release": release,
               "apt/InRelease": (work / "attack" / "InRelease").read_bytes(),
               "apt/bundle-key.gpg": attacker.export(work / "attack" / "key.gpg").read_bytes()}
    manifest = json.loads(files["manifest.json"])
    for entry in manifest["files"]:
        if entry["path"] in changed:
            entry.update(sha256=hashlib.sha256(changed[entry["path"]]).hexdigest(),
                         size=len(changed[entry["path"]]))
    raw = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n"
    from remote.bundle.archive import sums_text

    changed.update({"manifest.json": raw, "SHA256SUMS": sums_text(manifest["files"]).encode(),
                    "manifest.json.sig": attacker.sign(raw)})
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for member, payload in members:
            payload = changed.get(member.name, payload)
            member.size = len(payload)
            tar.addfile(member, io.BytesIO(payload))
    return out


def test_a_re_signed_bundle_is_refused_and_the_honest_one_installs(offline_hosts, built, tmp_path):
    """The carrier's bundle passes every check inside it (read_bundle reads it whole, apt's
    InRelease verifies with the bundle's own key) and is refused by the site's anchor before
    any host is contacted: no run folder, no postinst run. The honest bundle still provisions."""
    work, recipe, bundle, anchor = built
    attacker = Keyring("attacker")
    try:
        bad = carrier_attack(bundle, tmp_path / "carried.tar", tmp_path, attacker)
    finally:
        attacker.close()
    from remote.bundle import read_bundle

    assert read_bundle(bad).sha256 != read_bundle(bundle).sha256     # consistent with itself
    gpgv = subprocess.run(["gpgv", "--keyring", str(tmp_path / "attack" / "key.gpg"),
                           str(tmp_path / "attack" / "InRelease")], capture_output=True, text=True)
    assert gpgv.returncode == 0, gpgv.stderr
    runs = sorted((work / "logs").rglob("*"))
    result, hosts = _provision(work, offline_hosts, recipe, bad, "carried", anchor=anchor)
    assert result.rc == 2 and hosts is None, result.out + result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert f"{bad}: manifest.json.sig: made by key" in result.err, result.err
    assert "not signed by the site key" in result.err
    assert sorted((work / "logs").rglob("*")) == runs     # no run folder: no host contacted
    for name in offline_hosts.names:
        rc, out, _ = offline_hosts.run(name, "sudo -n test -e /root/pwned && echo PWNED || echo clean")
        assert out.strip() == "clean", out
    honest, hosts = _provision(work, offline_hosts, recipe, bundle, "honest", anchor=anchor)
    assert honest.rc == 0, honest.out + honest.err
    assert f"signed by {anchor[1]}" in honest.out


def test_validation_runs_from_the_bundle_and_needs_no_network(offline_hosts, built):
    """After the recipe, each offline host validates with the bundle's own validate/ (the
    archive carries it; nothing is pushed). A sandbox has no GPU: the honest verdict is
    validation failed, exit 3, as on online sandbox hosts (docs/tutorial/sandbox.md)."""
    work, recipe, bundle, anchor = built
    with tarfile.open(bundle) as tar:
        assert "validate/__main__.py" in tar.getnames()
    result, hosts = _provision(work, offline_hosts, recipe, bundle, "validated", validate=True,
                               anchor=anchor)
    validated_from_the_bundle(work, result, hosts)


def validated_from_the_bundle(work: Path, result, hosts: dict) -> None:
    """`provision --bundle` validated each of `hosts` (its --json) from the bundle's validate/,
    nothing pushed, to the honest no-GPU verdict: validation failed, exit 3."""
    assert result.rc == 3, result.out + result.err      # every step ok, validation failed
    for name in hosts:
        assert hosts[name]["failed"] == 0 and hosts[name]["unreachable"] is False, hosts[name]
        assert "failed" in hosts[name]["validation"], hosts[name]["validation"]
        assert f"{name}" in result.out and "from the bundle at /var/lib/gpuprov/bundles/" in result.out
        run = max((p for p in (work / "logs" / name).iterdir() if (p / "results.json").exists()),
                  key=lambda p: p.stat().st_mtime)
        checks = {c["name"]: c for c in json.loads((run / "results.json").read_text())["checks"]}
        assert checks and all(c["status"] != "pass" for n, c in checks.items() if n.startswith("gpu")), checks
        log = (run / "provision.log").read_text()
        assert "from the bundle at /var/lib/gpuprov/bundles/" in log and "nothing pushed" in log
        assert "bytes pushed)" not in log.split("python -m validate", 1)[1].splitlines()[0]


@pytest.mark.parametrize("kind", ["wheels/six-", "apt/g++_"])
def test_a_tampered_bundle_is_refused_before_any_host_is_touched(offline_hosts, built, kind, tmp_path):
    work, recipe, bundle, anchor = built
    with tarfile.open(bundle) as tar:
        member = next(m for m in tar.getmembers() if m.name.startswith(kind))
        start = tar.getmember(member.name).offset_data
    bad = tmp_path / "tampered.tar"
    shutil.copyfile(bundle, bad)
    with open(bad, "r+b") as f:                   # one byte in the middle of that file
        f.seek(start + member.size // 2)
        byte = f.read(1)
        f.seek(start + member.size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    result, hosts = _provision(work, offline_hosts, recipe, bad, f"tampered-{kind[:3]}", anchor=anchor)
    assert result.rc == 2 and hosts is None
    assert f"{member.name}: sha256" in result.err and "changed after it was built" in result.err


def test_the_apt_lock_s_nvidia_debs_install_from_the_bundle_offline(offline_hosts, standin, site):
    """`--apt-repo`: the stand-in NVIDIA .debs of the apt lock (NVIDIA's own repository cannot be
    reached from here; tests/test_bundle_aptrepo.py) install on the offline hosts at the lock's
    versions from the bundle's signed repository; a re-run changes nothing."""
    work, locks, index = site
    bundle = work / "nvidia.bundle.tar"
    made = _bundle(work, locks, index, standin.url, bundle)
    assert made.rc == 0, made.out + made.err
    recipe = write_yaml(work / "toolkit.yaml", {"name": "toolkit from the bundle", "steps": [
        {"name": "CUDA toolkit (locked)", "become": True,
         "apt": {"packages": ["cuda-toolkit-13-0"], "lock": f"locks/{APT_LOCK}"}}]})
    version = next(line.split("=")[1].split()[0] for line in (locks / APT_LOCK).read_text().splitlines()
                   if line.startswith("cuda-toolkit-13-0="))
    first, hosts = _provision(work, offline_hosts, recipe, bundle, "nvidia")
    assert first.rc == 0, first.out + first.err
    for name in offline_hosts.names:
        assert [s["status"] for s in hosts[name]["steps"]][-1] == "changed", hosts[name]
        rc, out, err = offline_hosts.run(name, "dpkg-query -W -f '${Version}' cuda-toolkit-13-0 && "
                                         "/usr/local/cuda-13.0/bin/nvcc --version")
        assert rc == 0 and out.startswith(version) and "release 13.0" in out, out + err
    again, hosts = _provision(work, offline_hosts, recipe, bundle, "nvidia-again")
    assert again.rc == 0 and all(s["status"] == "ok" for h in hosts.values() for s in h["steps"]), hosts


def test_pip_and_a_shell_s_apt_get_install_from_the_bundle_or_name_what_it_lacks(offline_hosts, built):
    """The kinds that fetched under `provision --bundle` with no way to the network: a pip step
    installs from the bundle's wheels, a shell step's apt-get from its repository; what the
    bundle lacks (a pip package, a shell's apt package, a deb step's file) fails that step
    naming it and the command that makes the bundle, not with a network error."""
    work, _, bundle, anchor = built
    venv = "/home/admin/.gpuprov/pip-venv"
    ok = write_yaml(work / "kinds.yaml", {"name": "kinds from the bundle", "steps": [
        {"name": "six with pip", "pip": {"packages": ["six==1.17.0"], "venv": venv}},
        {"name": "g++ with a shell's apt-get", "become": True,
         "shell": "apt-get install -y -q g++"}]})
    first, hosts = _provision(work, offline_hosts, ok, bundle, "kinds")
    assert first.rc == 0, first.out + first.err
    for name in offline_hosts.names:
        rc, out, err = offline_hosts.run(name, f"{venv}/bin/python -c 'import six; print(six.__version__)'"
                                         " && g++ --version")
        assert rc == 0 and out.startswith("1.17.0\n"), out + err
    rebuild = "gpuprov bundle --cuda 13.0"
    for steps, says in [
            ([{"name": "iniconfig", "pip": {"packages": ["iniconfig"], "venv": venv}}],
             "pip: iniconfig not among the bundle's wheels"),
            ([{"name": "jq", "become": True, "shell": "apt-get install -y -q jq"}],
             # the hint's tail: a failure keeps its last 400 characters, and the rebuild
             # command (with --sign-key and this test's long paths) pushes the start out
             "repository alone, which carries the packages of the recipe's apt steps"),
            ([{"name": "vendor keyring", "become": True,
               "deb": {"name": "vendor-keyring", "url": "https://example.invalid/k_1_all.deb",
                       "sha256": "0" * 64}}],
             "deb vendor-keyring: https://example.invalid/k_1_all.deb (sha256 000000000000...) "
             "is not in the bundle")]:
        recipe = write_yaml(work / "lacking.yaml", {"name": "lacking", "steps": steps})
        result, hosts = _provision(work, offline_hosts, recipe, bundle, "lacking")
        assert result.rc != 0, result.out
        for name in offline_hosts.names:
            step = hosts[name]["steps"][-1]
            text = step["message"] + str(step.get("output") or "") + str(step.get("stderr") or "")
            assert step["status"] == "failed" and says in text and rebuild in text, step
