"""`gpuprov bundle --distro X` on a machine that is not X (issue 35): the .debs come from X's own
archive through a private apt configuration (remote/bundle/distro.py), never from this
machine's sources.

Real parts: apt-config, apt-get update/download and apt-cache against Debian 13's archive (at
the mirror this machine's apt uses for Debian 12), gpg/gpgv for the bundle's signature, pip
and uv for a lock of two small wheels (as tests/test_bundle_sandbox.py: the row's real CUDA
wheels are 1.1 GB). Ubuntu's archive cannot be reached from this project's machines, so the
Ubuntu targets are tested as far as their configuration (sources, keyring) and no further.
No sandbox host installs the Debian 13 bundle: remote/sandbox builds bookworm roots only
(rootfs.py SUITE)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from remote.bundle import build, distro, read_bundle
from remote.bundle.archive import BundleError
from remote.ground.errors import InputError
from remote.ground.paths import VALIDATE_DIR
from tests.conftest import REPO, invoke, write_yaml

PINS = ["six==1.17.0", "packaging==24.2"]
HERE_IS_DEBIAN12 = build.this_distro() == "debian12"


def small_locks(work: Path) -> Path:
    """`work`/locks with uv's lock and, in the 13.0 row's place, a lock of two small wheels
    (real `uv pip compile --generate-hashes`; the row's CUDA wheels are 1.1 GB)."""
    locks = work / "locks"
    locks.mkdir()
    shutil.copyfile(REPO / "playbooks" / "locks" / "uv.txt", locks / "uv.txt")
    (work / "requirements.in").write_text("\n".join(PINS) + "\n")
    subprocess.run([sys.executable, "-m", "uv", "pip", "compile", "requirements.in", "--no-config",
                    "--generate-hashes", "--universal", "--python-version", "3.10", "-q",
                    "-o", "locks/cuda-13.0-wheels.txt"], cwd=work, check=True, timeout=300)
    return locks


def _mirror() -> str:
    """The Debian archive this machine's apt reads (the tests use that host, as the sandbox's
    debootstrap does)."""
    from remote.sandbox.rootfs import host_apt_sources

    return host_apt_sources()["mirror"]


def test_ubuntu_sources_name_its_archive_key_and_ports_for_arm():
    """Configuration only: Ubuntu's archive cannot be reached from here."""
    amd = distro.sources("ubuntu2404", "amd64")
    assert "URIs: http://archive.ubuntu.com/ubuntu\nSuites: noble noble-updates" in amd
    assert "URIs: http://security.ubuntu.com/ubuntu\nSuites: noble-security" in amd
    assert amd.count("Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg") == 2
    assert amd.count("Components: main universe") == 2
    arm = distro.sources("ubuntu2204", "arm64")
    assert arm.count("URIs: http://ports.ubuntu.com/ubuntu-ports") == 2 and "jammy-security" in arm
    mirrored = distro.sources("ubuntu2204", "amd64", mirror="http://mirror.example/ubuntu")
    assert mirrored.count("URIs: http://mirror.example/ubuntu") == 2


def test_debian_sources_and_a_company_mirror():
    text = distro.sources("debian13", "arm64", mirror="http://mirror.example/debian",
                          security="http://mirror.example/debian-security")
    assert "URIs: http://mirror.example/debian\nSuites: trixie trixie-updates" in text
    assert "URIs: http://mirror.example/debian-security\nSuites: trixie-security" in text
    assert text.count("Architectures: arm64") == 2
    assert text.count("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg") == 2


@pytest.mark.skipif(Path("/usr/share/keyrings/ubuntu-archive-keyring.gpg").exists(),
                    reason="this machine has Ubuntu's keyring")
def test_a_missing_archive_key_is_one_line_naming_the_package_before_anything_is_fetched(tmp_path):
    if build.this_distro() == "ubuntu2404":
        pytest.skip("this machine is the target")
    with pytest.raises(InputError, match="ubuntu-archive-keyring.gpg.*package ubuntu-keyring"):
        build._target("13.0", "ubuntu2404", "x86_64", True)
    out = tmp_path / "b.tar"
    result = invoke("bundle", "--cuda", "13.0", "--distro", "ubuntu2404", "--out", str(out))
    assert result.rc == 2 and "ubuntu-keyring" in result.err, result.out + result.err
    assert "wheels" not in result.out and not out.exists()


def test_a_mirror_that_is_no_url_is_refused(tmp_path):
    with pytest.raises(InputError, match="--mirror deb.example: not an http"):
        build._target("13.0", "debian13", "x86_64", True, mirror="deb.example")


def test_the_private_configuration_reads_nothing_of_this_machine_s_apt(tmp_path):
    """apt itself, reading the private configuration: its sources are the target's alone, its
    lists and status are the scratch folder's, this machine's apt.conf.d is not read."""
    env = distro.private_apt(tmp_path / "apt", "debian13", "arm64")
    dump = subprocess.run(["apt-config", "dump"], env=env, capture_output=True, text=True,
                          check=True).stdout
    assert f'Dir::State "{tmp_path}/apt/state";' in dump
    assert f'Dir::Etc "{tmp_path}/apt/etc";' in dump
    assert 'APT::Architecture "arm64";' in dump
    own = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, check=True).stdout
    ours = [line for line in own.splitlines() if line.startswith("APT::Update::Post-Invoke")]
    assert not any(line in dump for line in ours)
    sources = list((tmp_path / "apt" / "etc" / "sources.list.d").iterdir())
    assert [p.name for p in sources] == ["debian13.sources"]


@pytest.mark.slow
@pytest.mark.skipif(not HERE_IS_DEBIAN12, reason="needs a machine that is not Debian 13 (this one is "
                    f"{build.this_distro() or 'unknown'}); the test expects Debian 12's own packages")
def test_a_debian13_bundle_built_here_carries_trixie_s_debs_in_a_signed_repository(tmp_path):
    work = tmp_path
    locks = small_locks(work)
    recipe = write_yaml(work / "wheels.yaml", {"name": "bundle for Debian 13", "steps": [
        {"name": "python3-venv and a C++ compiler", "become": True,
         "apt": {"packages": ["python3-venv", "g++"]}}]})
    out = work / "trixie.bundle.tar"
    result = invoke("bundle", "--cuda", "13.0", "--distro", "debian13", "--out", str(out),
                    "--recipe", str(recipe), "--locks", str(locks), "--mirror", _mirror(),
                    cwd=work, timeout=1200)
    assert result.rc == 0, result.out + result.err
    assert "debian13 amd64 package lists" in result.out
    with tarfile.open(out) as tar:
        import json

        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        tar.extractall(work / "x", filter="data")
    debs = manifest["debs"]
    # trixie's python3 is 3.13 (bookworm's 3.11), its g++ 14 (bookworm's 12)
    assert "python3.13-venv" in debs and "python3.11-venv" not in debs, sorted(debs)
    assert debs["g++"].startswith("4:14."), debs["g++"]
    assert manifest["distro"] == "debian13" and manifest["python"] == "3.13"
    origins = {f["origin"] for f in manifest["files"] if f["path"].endswith(".deb")}
    assert origins == {"debian13's archive (apt-get download)"}
    repo = work / "x" / "apt"
    verified = subprocess.run(["gpgv", "--keyring", str(repo / "bundle-key.gpg"),
                               str(repo / "InRelease")], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
    # this machine's own package lists were neither read nor changed
    assert not any("trixie" in p.name for p in Path("/var/lib/apt/lists").iterdir())


def test_only_this_machine_s_own_distribution_and_architecture_read_its_sources():
    """This machine's apt serves its own distribution and architecture as they stand (no
    apt-get update); another architecture, another distribution or a mirror gets the private
    configuration."""
    here = build.this_distro()
    if here not in build.DISTROS or os.uname().machine not in build.ARCHES:
        pytest.skip(f"this machine ({here or 'unknown'}, {os.uname().machine}) is no target")
    other_arch = next(a for a in build.ARCHES if a != os.uname().machine)
    other = next(d for d in build.DISTROS if d != here)
    assert build.own_sources(here, os.uname().machine)
    assert not build.own_sources(here, other_arch)
    assert not build.own_sources(other, os.uname().machine)
    assert not build.own_sources(here, os.uname().machine, mirror="http://mirror.example/debian")


@pytest.mark.slow
def test_the_rebuild_command_repeats_the_options_without_their_passwords(tmp_path):
    """`--mirror` and `--security-mirror` choose where the bundle's .debs come from, the index
    (here from $GPUPROV_BUNDLE_INDEX, as the docs advise for one with a password) the wheels,
    `--no-debs`, `--recipe` and `--locks` what comes at all: the command the manifest records,
    which every error about a file the bundle lacks quotes, repeats each of them; a password in
    a URL stays out of the bundle. The recipe has no apt step, so the mirrors (nothing listens
    at 127.0.0.1:9) are never asked. (Every option, as data: tests/test_bundle.py.)"""
    locks = small_locks(tmp_path)
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "no .debs", "steps": [{"shell": "true"}]})
    out = tmp_path / "b.tar"
    result = invoke("bundle", "--cuda", "13.0", "--out", str(out), "--recipe", str(recipe),
                    "--locks", str(locks), "--mirror", "http://builder:s3cret@127.0.0.1:9/debian",
                    "--security-mirror", "http://127.0.0.1:9/debian-security", "--no-debs",
                    cwd=tmp_path, timeout=600,
                    env={"GPUPROV_BUNDLE_INDEX": "https://builder:s3cret@pypi.org/simple/"})
    assert result.rc == 0, result.out + result.err
    rebuild = (f"gpuprov bundle --cuda 13.0 --out b.tar --distro {build.this_distro()} "
               f"--index-url https://pypi.org/simple/ --recipe {recipe} --locks {locks} --no-debs "
               "--mirror http://127.0.0.1:9/debian --security-mirror "
               "http://127.0.0.1:9/debian-security")
    assert b"s3cret" not in out.read_bytes() and "s3cret" not in result.out + result.err
    # what provision says when this gpuprov's validate/ has a file the bundle lacks
    ours = tmp_path / "validate"
    shutil.copytree(VALIDATE_DIR, ours, ignore=shutil.ignore_patterns("__pycache__"))
    (ours / "checks" / "new_check.py").write_text("")
    with pytest.raises(BundleError) as caught:
        read_bundle(out, validate_dir=ours)
    assert str(caught.value).endswith(f"rebuild it with `{rebuild}`"), caught.value
    assert read_bundle(out).route().rebuild == rebuild   # the kinds' errors on the host quote it
