"""A bundle's check (remote/bundle/archive.py), before any host is touched: a file changed after
the build, a member the manifest does not list, a link, a lock that is not the recipe's: each
refused in one line naming the file, exit status 2, no host contacted.

The archives here are written by the bundle's own writer from small real files made by the test
(a wheel with a correct RECORD, a .deb's bytes, locks in uv's format with their sha256), not
fetched: the whole path from PyPI and Debian's mirror is in tests/test_bundle_sandbox.py."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from remote.bundle import BundleError, read_bundle
from remote.bundle.archive import SCHEMA, validate_files, write_archive
from remote.bundle.push import unpack_command
from remote.ground.paths import VALIDATE_DIR
from tests import tarcraft
from tests.conftest import REPO, write_yaml
from tests.procs import run_python_module_measured

PAYLOAD = "gpuprov_standin_payload-1.0-py3-none-any.whl"
UV = "uv-0.13.8-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
DEB = "g++_12.2.0-3_amd64.deb"


def _wheel(path: Path, name: str, version: str) -> bytes:
    """A pure-Python wheel of `name` with a correct RECORD (STAND-IN, made here)."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b'"""STAND-IN built by gpuprov\'s tests."""\n',
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: gpuprov-tests\nRoot-Is-Purelib: true\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
                     f"{len(d)}\n" for n, d in files.items()) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for n, d in files.items():
            wheel.writestr(n, d)
        wheel.writestr(f"{dist}/RECORD", record)
    return path.read_bytes()


def _lock(pins: dict[str, bytes]) -> str:
    """A lock as `uv pip compile --generate-hashes` writes it, for name==version -> file."""
    return "".join(f"{pin} \\\n    --hash=sha256:{hashlib.sha256(data).hexdigest()}\n"
                   for pin, data in pins.items())


def stage_bundle(tmp_path: Path) -> tuple[Path, dict]:
    """The files and manifest of a small bundle: two wheels, their locks, one .deb's bytes, and
    this gpuprov's validate/."""
    stage = tmp_path / "stage"
    for folder in ("locks", "wheels", "apt"):
        (stage / folder).mkdir(parents=True)
    for rel, source in validate_files(VALIDATE_DIR).items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_bytes(source.read_bytes())
    payload = _wheel(stage / "wheels" / PAYLOAD, "gpuprov_standin_payload", "1.0")
    uv = _wheel(stage / "wheels" / UV, "uv", "0.13.8")
    (stage / "locks" / "cuda-13.0-wheels.txt").write_text(_lock({"gpuprov-standin-payload==1.0": payload}))
    (stage / "locks" / "uv.txt").write_text(_lock({"uv==0.13.8": uv}))
    (stage / "apt" / DEB).write_bytes(b"!<arch>\nSTAND-IN bytes of a .deb\n" * 100)
    files = [{"path": p.relative_to(stage).as_posix(), "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
              "size": p.stat().st_size, "origin": "made by the test"}
             for p in sorted(p for p in stage.rglob("*") if p.is_file())]
    return stage, {"schema": SCHEMA, "cuda": "13.0", "torch": False, "distro": "debian12",
                   "command": "gpuprov bundle --cuda 13.0 --out b.tar", "uv_wheel": f"wheels/{UV}",
                   "debs": {"g++": "4:12.2.0-3"}, "files": files}


@pytest.fixture
def bundle(tmp_path) -> Path:
    """A bundle of two wheels, their locks, one .deb's bytes, and this gpuprov's validate/."""
    stage, manifest = stage_bundle(tmp_path)
    out = tmp_path / "b.tar"
    write_archive(stage, manifest, out)
    return out


def _rewrite(src: Path, dst: Path, change) -> Path:
    """A copy of the archive `src` with `change(member, data) -> (member, data) or None` applied
    to each member (None drops it), as someone editing the archive would."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as tout:
        for member in tin.getmembers():
            f = tin.extractfile(member)
            result = change(member, f.read() if f else b"")
            if result is not None:
                member, data = result
                member.size = len(data)
                tout.addfile(member, io.BytesIO(data))
    return dst


def _flip(name: str):
    """A change that flips one byte in the middle of member `name` (same size)."""
    def change(member, data):
        if member.name == name:
            middle = len(data) // 2
            data = data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:]
        return member, data
    return change


def test_a_whole_bundle_is_read_with_what_the_host_needs(bundle):
    checked = read_bundle(bundle)
    route = checked.route()
    assert route.root == f"/var/lib/gpuprov/bundles/{checked.id}"
    assert route.uv_wheel.endswith(UV) and route.debs == {"g++"}
    assert set(route.locks) == {"cuda-13.0-wheels.txt", "uv.txt"}
    assert route.validate == route.root    # the host runs validate/ from there


def test_the_manifest_comes_last_and_an_archive_with_it_first_reads_the_same(bundle, tmp_path):
    """The build writes each file as it has it, the manifest last; a bundle written with it
    first (by an earlier gpuprov) is the same bundle, and one without it is refused."""
    with tarfile.open(bundle) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    assert [m.name for m, _ in members][-2:] == ["SHA256SUMS", "manifest.json"]
    first = tmp_path / "first.tar"
    with tarfile.open(first, "w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in members[-1:] + members[:-1]:
            tar.addfile(member, io.BytesIO(data))
    assert read_bundle(first).id == read_bundle(bundle).id
    none = _rewrite(bundle, tmp_path / "none.tar", lambda m, d: None if m.name == "manifest.json" else (m, d))
    with pytest.raises(BundleError, match="the archive has no manifest.json"):
        read_bundle(none)


def test_a_file_whose_sha256_is_not_its_lock_s_is_refused_as_it_is_written(tmp_path):
    """The build checks each wheel against its lock while copying it into the archive (pip
    checked it too): a file that is not the one the lock names stops the build, naming it."""
    from remote.bundle.archive import ArchiveWriter

    wheel = tmp_path / PAYLOAD
    data = _wheel(wheel, "gpuprov_standin_payload", "1.0")
    writer = ArchiveWriter(tmp_path / "b.tar")
    assert writer.add(f"wheels/{PAYLOAD}", wheel, "test", {hashlib.sha256(data).hexdigest()}) == \
        hashlib.sha256(data).hexdigest()
    with pytest.raises(BundleError, match=re.escape(f"wheels/{PAYLOAD}: sha256 ") + ".* is not the one its lock"):
        writer.add(f"wheels/{PAYLOAD}", wheel, "test", {"0" * 64})
    writer.close()


def test_a_bundle_whose_validate_is_not_this_gpuprov_s_is_refused_naming_the_file(bundle, tmp_path):
    """The host runs the bundle's validate/ and this gpuprov reads what it writes: a file that
    differs, or one this gpuprov has and the bundle lacks, is refused with the command that
    rebuilds it."""
    import shutil

    read_bundle(bundle, validate_dir=VALIDATE_DIR)       # the same files: accepted
    ours = tmp_path / "validate"
    shutil.copytree(VALIDATE_DIR, ours, ignore=shutil.ignore_patterns("__pycache__"))
    (ours / "core.py").write_text((ours / "core.py").read_text() + "# changed\n")
    with pytest.raises(BundleError) as exc:
        read_bundle(bundle, validate_dir=ours)
    assert f"validate/core.py: differs from this gpuprov's {ours}" in str(exc.value)
    assert "rebuild it with `gpuprov bundle --cuda 13.0" in str(exc.value)
    shutil.copyfile(VALIDATE_DIR / "core.py", ours / "core.py")
    (ours / "checks" / "new_check.py").write_text("")
    with pytest.raises(BundleError, match=re.escape("validate/checks/new_check.py: this gpuprov's "
                                                    "validation has it and the bundle does not")):
        read_bundle(bundle, validate_dir=ours)


def test_provision_refuses_a_bundle_without_validate_before_any_host(bundle, tmp_path, capsys):
    """A bundle that carries no validate/ (built before bundles did): exit 2, no host."""
    from remote.commands import provision as provision_cmd

    old = _rewrite(bundle, tmp_path / "old.tar", lambda m, d: None if m.name.startswith("validate/") else (m, d))
    # its manifest still lists them: drop them there too, as an older gpuprov wrote it
    import json

    from remote.bundle.archive import sums_text

    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    manifest["files"] = [f for f in manifest["files"] if not f["path"].startswith("validate/")]
    new = {"manifest.json": json.dumps(manifest).encode(), "SHA256SUMS": sums_text(manifest["files"]).encode()}
    old = _rewrite(old, tmp_path / "old2.tar", lambda m, d: (m, new.get(m.name, d)))
    assert read_bundle(old).route().validate == ""
    inventory = write_yaml(tmp_path / "inventory.yaml",
                           {"hosts": {"h1": {"address": "127.0.0.1", "port": 9, "user": "nobody"}}})
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "r", "steps": [{"apt": {"packages": ["g++"]}}]})
    rc = provision_cmd.run(host="all", recipe=str(recipe), inventory=str(inventory),
                       logs_dir=str(tmp_path / "logs"), bundle=str(old),
                       bundle_sha256=hashlib.sha256(old.read_bytes()).hexdigest())
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "validate/README.md: this gpuprov's validation has it and the bundle does not" in err
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("member", [f"wheels/{PAYLOAD}", f"apt/{DEB}"])
def test_a_file_changed_after_the_build_is_refused_naming_it(bundle, tmp_path, member):
    bad = _rewrite(bundle, tmp_path / "bad.tar", _flip(member))
    with pytest.raises(BundleError) as exc:
        read_bundle(bad)
    assert f"{member}: sha256" in str(exc.value) and "changed after it was built" in str(exc.value)
    assert str(exc.value).startswith(str(bad))


def test_a_member_the_manifest_does_not_list_a_link_or_a_missing_file_is_refused(bundle, tmp_path):
    def add_extra(member, data):
        if member.name == f"apt/{DEB}":
            member.name = "apt/evil_1_all.deb"
        return member, data
    with pytest.raises(BundleError, match="apt/evil_1_all.deb: not in the bundle manifest"):
        read_bundle(_rewrite(bundle, tmp_path / "extra.tar", add_extra))

    def link(member, data):
        if member.name == f"apt/{DEB}":
            member.type, member.linkname = tarfile.SYMTYPE, "/etc/shadow"
            return member, b""
        return member, data
    with pytest.raises(BundleError, match=re.escape(f"apt/{DEB}: not a plain file")):
        read_bundle(_rewrite(bundle, tmp_path / "link.tar", link))

    gone = _rewrite(bundle, tmp_path / "gone.tar",
                    lambda m, d: None if m.name == f"wheels/{PAYLOAD}" else (m, d))
    with pytest.raises(BundleError, match=re.escape(f"wheels/{PAYLOAD}: in the manifest but not in the archive")):
        read_bundle(gone)


def test_a_manifest_edited_to_match_a_changed_wheel_is_refused_by_the_lock(bundle, tmp_path):
    """Someone who changes a wheel and writes its new sha256 into the manifest (and
    SHA256SUMS) still meets the lock, which the wheel's hash must be in."""
    import json

    from remote.bundle.archive import sums_text

    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        wheel = tar.extractfile(f"wheels/{PAYLOAD}").read()
    changed = wheel + b"\0"
    for entry in manifest["files"]:
        if entry["path"] == f"wheels/{PAYLOAD}":
            entry["sha256"], entry["size"] = hashlib.sha256(changed).hexdigest(), len(changed)
    new = {"manifest.json": json.dumps(manifest).encode(), "SHA256SUMS": sums_text(manifest["files"]).encode(),
           f"wheels/{PAYLOAD}": changed}
    bad = _rewrite(bundle, tmp_path / "relabelled.tar", lambda m, d: (m, new.get(m.name, d)))
    with pytest.raises(BundleError, match=re.escape(f"wheels/{PAYLOAD}: its sha256 is not one its lock allows")):
        read_bundle(bad)


def test_a_bundle_built_from_another_lock_than_the_recipe_s_is_refused(bundle, tmp_path):
    locks = tmp_path / "recipe-locks"
    locks.mkdir()
    (locks / "cuda-13.0-wheels.txt").write_text("gpuprov-standin-payload==1.1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(BundleError) as exc:
        read_bundle(bundle, locks_dir=locks)
    assert f"locks/cuda-13.0-wheels.txt differs from {locks / 'cuda-13.0-wheels.txt'}" in str(exc.value)
    assert "gpuprov bundle --cuda 13.0" in str(exc.value)


def test_provision_with_a_tampered_bundle_exits_2_before_any_host_is_contacted(bundle, tmp_path, capsys):
    """The host is at an address where nothing answers: a run that tried it would end
    `unreachable` (exit 3); the check stops it at 2 with the file named."""
    from remote.commands import provision as provision_cmd

    bad = _rewrite(bundle, tmp_path / "bad.tar", _flip(f"apt/{DEB}"))
    inventory = write_yaml(tmp_path / "inventory.yaml",
                           {"hosts": {"h1": {"address": "127.0.0.1", "port": 9, "user": "nobody"}}})
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "r", "steps": [{"apt": {"packages": ["g++"]}}]})
    rc = provision_cmd.run(host="all", recipe=str(recipe), inventory=str(inventory), validate=False,
                       logs_dir=str(tmp_path / "logs"), bundle=str(bad),
                       bundle_sha256=hashlib.sha256(bundle.read_bytes()).hexdigest())
    err = capsys.readouterr().err
    assert rc == 2
    assert f"apt/{DEB}: sha256" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "logs").exists()


def test_a_build_that_fails_leaves_no_half_bundle(tmp_path, monkeypatch, capsys):
    """Real pip against an index where nothing listens: the build stops with one line, exit 2,
    and neither the archive nor its temporary folder is left."""
    from remote.bundle import BundleOptions, run_bundle
    from tests.conftest import REPO

    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "cuda-13.0-wheels.txt").write_text("six==1.17.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    (locks / "uv.txt").write_text((REPO / "playbooks" / "locks" / "uv.txt").read_text())
    monkeypatch.setenv("PIP_RETRIES", "0")
    out = tmp_path / "out" / "site.bundle.tar"
    rc = run_bundle(BundleOptions("13.0", str(out), index_url="http://127.0.0.1:9/simple",
                                  locks=str(locks), debs=False))
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("bundle: pip download failed") and len(err.strip().splitlines()) == 1
    assert list(out.parent.iterdir()) == []


def test_a_failed_build_says_why_even_where_gpg_and_apt_are_missing(tmp_path, monkeypatch, capsys):
    """The key and the package list are made while the wheels download: on a machine without
    gpg or apt, a download that fails first is still what the one line says, and nothing is
    left (cleaning up the key's folder must not raise for the missing gpgconf)."""
    from remote.bundle import BundleOptions, run_bundle
    from remote.bundle.build import DISTROS, this_distro
    from tests.conftest import REPO

    if this_distro() not in DISTROS:
        pytest.skip("the .debs come from this machine's apt: it must be a supported distribution")
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "cuda-13.0-wheels.txt").write_text("six==1.17.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    (locks / "uv.txt").write_text((REPO / "playbooks" / "locks" / "uv.txt").read_text())
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))     # pip runs as sys.executable -m pip
    out = tmp_path / "out" / "site.bundle.tar"
    rc = run_bundle(BundleOptions("13.0", str(out), index_url="http://127.0.0.1:9/simple",
                                  locks=str(locks)))
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("bundle: pip download failed") and len(err.strip().splitlines()) == 1, err
    assert list(out.parent.iterdir()) == []


def _provision_with(tmp_path, inventory: dict, bundle: str = ""):
    from remote.commands import provision as provision_cmd

    # the trust anchor a bundle needs (tests/test_bundle_trust.py): the checks these tests
    # make refuse the bundle before it is compared
    inv = write_yaml(tmp_path / "inventory.yaml", {"bundle_sha256": "0" * 64, **inventory})
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "r", "steps": [{"apt": {"packages": ["g++"]}}]})
    return provision_cmd.run(host="all", recipe=str(recipe), inventory=str(inv), validate=False,
                         logs_dir=str(tmp_path / "logs"), bundle=bundle or None)


NOWHERE = {"address": "127.0.0.1", "port": 9, "user": "nobody"}   # nothing answers there


def test_the_inventory_s_bundle_key_is_read_like_the_option(bundle, tmp_path, capsys):
    """A group's `bundle:` (relative to the inventory) is checked before any host as --bundle
    is; a host's own key wins over its group's; --bundle wins over both."""
    bad = _rewrite(bundle, tmp_path / "bad.tar", _flip(f"apt/{DEB}"))
    rc = _provision_with(tmp_path, {"hosts": {"h1": dict(NOWHERE), "h2": dict(NOWHERE)},
                                    "groups": {"site": {"hosts": ["h1", "h2"], "bundle": "bad.tar"}}})
    err = capsys.readouterr().err
    assert rc == 2 and f"{bad}: apt/{DEB}: sha256" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "logs").exists()

    rc = _provision_with(tmp_path, {"hosts": {"h1": {**NOWHERE, "bundle": str(bad)},
                                              "h2": {**NOWHERE, "bundle": "bad.tar"}},
                                    "groups": {"site": {"hosts": ["h1", "h2"], "bundle": "gone.tar"}}})
    err = capsys.readouterr().err
    assert rc == 2 and f"apt/{DEB}: sha256" in err, err

    rc = _provision_with(tmp_path, {"hosts": {"h1": {**NOWHERE, "bundle": "gone.tar"}}}, bundle=str(bad))
    err = capsys.readouterr().err
    assert rc == 2 and f"{bad}: apt/{DEB}: sha256" in err and "gone.tar" not in err, err


@pytest.mark.parametrize("value, says", [
    (5, "host 'h1': bundle must be the path of a bundle archive"),
    ("", "host 'h1': bundle must be the path of a bundle archive"),
    ("gone.tar", "bundle: {tmp}/gone.tar: no such file (gpuprov bundle makes one)"),
])
def test_a_bad_bundle_key_is_one_line_naming_its_file_and_line(tmp_path, capsys, value, says):
    rc = _provision_with(tmp_path, {"hosts": {"h1": {**NOWHERE, "bundle": value}}})
    err = capsys.readouterr().err
    text = (tmp_path / "inventory.yaml").read_text().splitlines()
    line = next(n for n, t in enumerate(text, 1) if t.strip().startswith("bundle:"))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{tmp_path / 'inventory.yaml'}:{line}" in err and says.format(tmp=tmp_path) in err, err
    assert not (tmp_path / "logs").exists()


def test_hosts_that_name_different_bundles_are_refused_naming_the_key(bundle, tmp_path, capsys):
    rc = _provision_with(tmp_path, {"hosts": {"h1": {**NOWHERE, "bundle": str(bundle)}, "h2": NOWHERE}})
    err = capsys.readouterr().err
    assert rc == 2 and "host 'h2' names no bundle: one bundle per run" in err, err
    assert f"{tmp_path / 'inventory.yaml'}:" in err


# A push's client under a memory cap it could not hold the archive in: it sends the file as the
# push does (`PushBundle.push`: the open file as the command's stdin) over a real SSH session
# and to a local command, each of which hashes what arrived.
STREAM_CLIENT = """
import resource, sys
from remote.config.inventory import Host, load_inventory
from remote.ground.errors import Where
from remote.transport.connection import LocalConnection, connection_for
from remote.transport.hostkeys import KnownHosts

inventory, name, path, headroom = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
inv = load_inventory(inventory)
ssh = connection_for(inv.hosts[name], inv.hosts, inv.timeouts,
                     KnownHosts(inv.known_hosts, inv.host_key_policy)).open()
local = LocalConnection(Host("here", "localhost", Where("inv", 1), connection="local"), inv.timeouts)
for conn in (ssh, local):
    conn.run("true")        # the session's threads and buffers are there before the cap
vm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + headroom, resource.RLIM_INFINITY))
try:
    bytearray(2 * headroom)           # the cap holds: what the file's bytes in memory would meet
    print("not capped")
except MemoryError:
    pass
for conn in (ssh, local):
    with open(path, "rb") as f:
        result = conn.run("sha256sum", stdin=f, timeout=600)
    print(result.rc, result.stdout.decode().split()[0])
ssh.close()
"""


def test_a_bundle_larger_than_the_memory_the_control_process_may_use_still_gets_there(farm, work, inventory):
    """The control machine streams the archive from its file: a 512 MiB bundle goes whole, over
    SSH and to a local command, from a process that may not grow by more than 128 MiB (it
    would fail with MemoryError had it read the file into memory, as the push once did). The
    file is sparse (no disk) and zeros: the host's sha256 is that of 512 MiB of zeros."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    size, headroom = 512 << 20, 128 << 20
    big = work / "big.bundle.tar"
    with open(big, "wb") as f:
        f.truncate(size)
    zeros = hashlib.sha256()
    block = bytes(1 << 20)
    for _ in range(size >> 20):
        zeros.update(block)
    (work / "stream_client.py").write_text(STREAM_CLIENT)
    proc = subprocess.run([sys.executable, str(work / "stream_client.py"), str(inventory()), "h1",
                           str(big), str(headroom)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(REPO), MALLOC_ARENA_MAX="2"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [f"0 {zeros.hexdigest()}"] * 2, proc.stdout + proc.stderr


def _unpack(archive: Path, root: Path, sha256: str, path: str = "") -> subprocess.CompletedProcess:
    """The host's side of a push (`unpack_command`), run by this machine's /bin/sh and
    coreutils as a host's runs it, the archive's bytes on its stdin (`path`: its PATH)."""
    with open(archive, "rb") as f:
        return subprocess.run(["/bin/sh", "-c", unpack_command(str(root), sha256)], stdin=f,
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": path} if path else None)


def test_the_archive_s_sha256_is_taken_in_the_check_s_one_pass(bundle):
    """read_bundle's sha256 is that of every byte of the file, what the push sends."""
    assert read_bundle(bundle).sha256 == hashlib.sha256(bundle.read_bytes()).hexdigest()


def test_a_host_unpacks_only_the_archive_that_was_checked_and_leaves_nothing_else(bundle, tmp_path):
    """The host unpacks the checked archive; a byte changed on the way, a stream cut short,
    or another archive with the same id (the same files in another order: it agrees with its
    own SHA256SUMS, which the host's check once passed) fail with nothing left behind."""
    checked = read_bundle(bundle)
    hosts = tmp_path / "host"
    hosts.mkdir()
    root = hosts / checked.id
    first = tmp_path / "first.tar"
    with tarfile.open(bundle) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(first, "w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in members[-1:] + members[:-1]:
            tar.addfile(member, io.BytesIO(data))
    assert read_bundle(first).id == checked.id
    cut = tmp_path / "cut.tar"
    cut.write_bytes(bundle.read_bytes()[:bundle.stat().st_size // 2])
    for archive in (_rewrite(bundle, tmp_path / "flipped.tar", _flip(f"apt/{DEB}")), cut, first):
        bad = _unpack(archive, root, checked.sha256)
        assert bad.returncode != 0, archive
        if archive != cut:     # tar may be first to say a cut stream ended early
            assert "the bundle arrived changed: its sha256 here is " in bad.stderr, bad.stderr
            assert f"not {checked.sha256} as checked before the push" in bad.stderr, bad.stderr
        assert list(hosts.iterdir()) == [], archive
    good = _unpack(bundle, root, checked.sha256)
    assert good.returncode == 0, good.stderr
    assert sorted(p.name for p in hosts.iterdir()) == [checked.id]
    deb = next(data for member, data in members if member.name == f"apt/{DEB}")
    assert (root / ".complete").is_file() and (root / "apt" / DEB).read_bytes() == deb
    assert "Signed-By: " in (root / "sources.d" / "gpuprov-bundle.sources").read_text()


@pytest.mark.parametrize("hasher", ["openssl", "python3", "sha256sum"])
def test_each_hasher_a_host_may_have_takes_the_stream_s_sha256(bundle, tmp_path, hasher):
    """A host with only openssl, only python3 or only coreutils' sha256sum to hash with (a
    PATH of this machine's tools with just that one) unpacks the checked archive and refuses
    one changed byte."""
    import shutil

    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("tee", "tar", "mkfifo", "mkdir", "rm", "mv", "touch", hasher):
        (tools / tool).symlink_to(shutil.which(tool))
    checked = read_bundle(bundle)
    hosts = tmp_path / "host"
    hosts.mkdir()
    flipped = _rewrite(bundle, tmp_path / "flipped.tar", _flip(f"apt/{DEB}"))
    bad = _unpack(flipped, hosts / checked.id, checked.sha256, str(tools))
    assert bad.returncode != 0 and "the bundle arrived changed" in bad.stderr, bad.stderr
    assert list(hosts.iterdir()) == []
    good = _unpack(bundle, hosts / checked.id, checked.sha256, str(tools))
    assert good.returncode == 0, good.stderr
    assert (hosts / checked.id / ".complete").is_file()


# The command the manifest records (`rebuild_command`), parsed back with gpuprov's own command
# line: every option of `gpuprov bundle` changes what it holds (but --out, kept as a name).

def _parse(argv: list[str]):
    """`gpuprov ARGV` as gpuprov's Program parses it (tasks.py's tasks): the task's context."""
    from remote.program import GpuprovProgram, load_tasks

    program = GpuprovProgram(namespace=load_tasks(), name="gpuprov", binary="gpuprov")
    program.create_config()
    program.parse_core(argv)
    program.parse_collection()
    program.parse_tasks()
    (task,) = program.tasks
    return task.name, {arg.name: arg for arg in task.args.values()}


def test_every_option_of_gpuprov_bundle_comes_back_from_the_recorded_command():
    """Each option the task has (its argument spec, as the parser reads it) set to a value
    that is not its default: the recorded command, parsed again, gives each back (a URL
    without its password, --out as the archive's name), and nothing else."""
    import dataclasses
    import shlex

    from remote.bundle import BundleOptions
    from remote.bundle.build import rebuild_command

    _, spec = _parse(["gpuprov", "bundle", "--cuda", "13.0", "--out", "b.tar"])
    fields = {f.name: f for f in dataclasses.fields(BundleOptions)}
    assert sorted(spec) == sorted(fields)        # the task hands each option through
    argv, given, expected = ["gpuprov", "bundle"], {}, {}
    for name, arg in spec.items():
        flag = "--" + name.replace("_", "-")
        field = fields[name]
        default = None if field.default is dataclasses.MISSING else field.default
        assert arg.default == default, name     # the task's default is the class's
        if arg.kind is bool:
            argv.append(f"--no-{name.replace('_', '-')}" if default else flag)
            given[name] = expected[name] = not default
        elif field.metadata.get("url"):
            given[name] = f"http://builder:s3cret@mirror.example/{name}"
            expected[name] = f"http://mirror.example/{name}"
            argv += [flag, given[name]]
        else:
            given[name] = f"/srv/site's {name}/x.tar"      # quoted in the command
            expected[name] = "x.tar" if name == "out" else given[name]
            argv += [flag, given[name]]
    parsed = {name: arg.value for name, arg in _parse(argv)[1].items()}
    assert parsed == given                     # every option was set, away from its default
    command = rebuild_command(BundleOptions(**parsed))
    assert "s3cret" not in command and command.startswith("gpuprov bundle ")
    task, back = _parse(shlex.split(command))
    assert task == "bundle"
    assert {name: arg.value for name, arg in back.items()} == expected


def test_options_left_at_their_default_are_left_out_of_the_recorded_command():
    from remote.bundle import BundleOptions
    from remote.bundle.build import rebuild_command

    assert rebuild_command(BundleOptions("13.0", "/tmp/b.tar", distro="debian12")) == \
        "gpuprov bundle --cuda 13.0 --out b.tar --distro debian12"


# Issue 41: a bundle is read by the one strict tar reader (remote/transport/tarstream.py), and
# each member's header must be the one the bundle's writer writes.
def _gnu_tar_as_the_host_unpacks(archive: Path, into: Path) -> None:
    """GNU tar with the options of the host's unpacking (remote/bundle/push.py unpack_command)."""
    into.mkdir()
    subprocess.run(["tar", "-x", "-f", str(archive), "-C", str(into), "--no-same-owner",
                    "--no-same-permissions"], check=True, capture_output=True)


def test_a_repository_hidden_behind_a_malformed_header_is_refused(bundle, tmp_path):
    """The honest bundle, then a header whose uid reads `0 00000` and the attacker's apt index
    and .deb: tarfile stopped at that header without an error, so every check passed and the
    bundle kept its id, while GNU tar on the host extracted the attacker's files over the
    honest ones (a postinst ran as root). Now refused, naming the header."""
    evil_index = b"Package: evil\nVersion: 1\nFilename: ./evil_1_all.deb\n"
    hidden = [tarcraft.member("apt/Packages", evil_index, tarcraft.bad_uid(
                  tarcraft.header("apt/Packages", len(evil_index), fmt=tarfile.USTAR_FORMAT))),
              tarcraft.member("apt/evil_1_all.deb", b"!<arch>\nevil\n")]
    body = tarcraft.members_of(bundle.read_bytes()) + b"".join(hidden)
    evil = tmp_path / "evil.tar"
    evil.write_bytes(body + tarcraft.end(written=len(body)))
    _gnu_tar_as_the_host_unpacks(evil, tmp_path / "host")
    assert (tmp_path / "host" / "apt" / "Packages").read_bytes() == evil_index
    with pytest.raises(BundleError) as exc:
        read_bundle(evil)
    assert str(exc.value) == (f"{evil}: not a bundle archive as gpuprov bundle writes it: a malformed uid "
                              "field b'0 00000\\x00' in the header of: 'apt/Packages' (the header at byte "
                              f"{len(tarcraft.members_of(bundle.read_bytes()))})")


def test_a_header_other_than_the_writers_is_refused(bundle, tmp_path):
    """Same bytes, another header: a .deb made setuid and group-writable, owned by uid 1000.
    GNU tar on the host applies the mode it reads; the checks never saw it. Refused."""
    def setuid(member, data):
        if member.name == f"apt/{DEB}":
            member.mode, member.uid = 0o4775, 1000
        return member, data
    changed = _rewrite(bundle, tmp_path / "setuid.tar", setuid)
    with pytest.raises(BundleError, match=re.escape(f"apt/{DEB}: its header is not the one gpuprov bundle "
                                                    "writes")):
        read_bundle(changed)


def test_data_after_the_bundles_end_is_refused(bundle, tmp_path):
    body = bundle.read_bytes() + tarcraft.member("apt/evil_1_all.deb", b"!<arch>\nevil\n")
    trailing = tmp_path / "trailing.tar"
    trailing.write_bytes(body)
    with pytest.raises(BundleError, match="data after the end of the archive"):
        read_bundle(trailing)


# Reads a bundle in a process of its own, for its peak memory (tests/procs.py).
READER = """
import sys
from pathlib import Path
from remote.bundle import BundleError, read_bundle
try:
    print("id", read_bundle(Path(sys.argv[1])).id)
except BundleError as exc:
    print(exc)
    sys.exit(2)
"""


def test_a_gigabyte_pax_header_in_a_sparse_bundle_is_refused_in_bounded_memory(bundle, tmp_path):
    """A PAX header of 1 GiB (a hole in a sparse file: no disk used) before the manifest: tarfile
    read it whole (the check peaked at 1,074 MiB) and, finding no record in it, accepted the
    bundle. Now refused from its size field; the process stays far under 200 MiB."""
    honest = bundle.read_bytes()
    with tarfile.open(bundle) as tar:
        last = tar.getmembers()[-1]
    assert last.name == "manifest.json"
    sparse = tmp_path / "sparse.tar"
    with open(sparse, "wb") as f:
        f.write(honest[:last.offset])
        f.write(tarcraft.header("././@PaxHeader", 1 << 30, tarfile.XHDTYPE, tarfile.USTAR_FORMAT))
        f.seek(1 << 30, os.SEEK_CUR)     # the header's data: a hole
        f.write(honest[last.offset:])
    assert os.stat(sparse).st_blocks * 512 < 64 << 20, "sparse"
    (tmp_path / "bundle_reader.py").write_text(READER)
    rc, out, err, _, rss = run_python_module_measured(
        "bundle_reader", [str(sparse)], tmp_path / "peak_kib",
        env={"PYTHONPATH": f"{REPO}:{tmp_path}", "PATH": os.environ["PATH"]}, cwd=str(tmp_path), timeout=300)
    print(f"peak RSS {rss:.0f} MiB")
    assert rc == 2, (rc, out, err)
    assert f"an extended header of {1 << 30} bytes, over the 65536 allowed" in out, out
    assert rss < 200, f"peak RSS {rss:.0f} MiB"
