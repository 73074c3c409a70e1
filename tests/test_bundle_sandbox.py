"""Air-gapped sites end to end (issue 35): `gpuprov bundle` builds a bundle with real pip, apt,
dpkg-scanpackages and gpg from PyPI and this machine's Debian mirror; `gpuprov provision
--bundle` installs it on two OFFLINE sandbox hosts (`sandbox up --offline`: a network namespace
of their own with nothing but `lo`, sshd reached through a relay), which the test first proves
reach nothing; a re-run changes nothing; validation runs from the bundle's validate/, nothing
pushed, to the honest "no GPU" verdict; a tampered bundle is refused naming the file; a
package the bundle lacks fails that step naming it and the command that adds it.

What is not real here, and why: the lock in the 13.0 row's place holds two small PyPI wheels
(six, packaging), resolved at test time by the real `uv pip compile --generate-hashes`; the
real row's CUDA wheels are 1.1 GB (tests/test_bundle_row.py installs their bundle on an
offline host, tests/test_lock_sandbox.py installs them online). The .debs are the recipe's
real ones (python3-venv, g++ and their dependencies, about 100 packages and 96 MB). NVIDIA's
own apt repository cannot be reached from here, so the bundle's apt half is Debian's packages
only.

Needs root, PyPI and the Debian mirror this machine's apt uses."""
from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.conftest import invoke, write_yaml
from tests.http_stub import serve
from tests.sandbox_fixture import SandboxHosts, own_hosts
from tests.test_bundle_aptrepo import APT_LOCK, _bundle, site, standin  # noqa: F401 - fixtures
from tests.test_bundle_distro import small_locks

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

VENV = "/home/admin/.gpuprov/venv"


@pytest.fixture(scope="module")
def offline_hosts():
    """Two offline sandbox hosts of their own (the shared fixture's hosts are online)."""
    with own_hosts(2, offline=True) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A recipe like cuda-wheels.yaml (apt python3-venv and g++, then a pip_lock), its locks,
    and its bundle built by `gpuprov bundle`."""
    work = tmp_path_factory.mktemp("bundle")
    locks = small_locks(work)
    recipe = write_yaml(work / "wheels.yaml", {"name": "CUDA from wheels (bundle test)", "steps": [
        {"name": "python3-venv and a C++ compiler", "become": True,
         "apt": {"packages": ["python3-venv", "g++"], "update_cache": True}},
        {"name": "the row's wheels (locked)",
         "pip_lock": {"lock": "locks/cuda-13.0-wheels.txt", "venv": VENV}}]})
    out = work / "site.bundle.tar"
    result = invoke("bundle", "--cuda", "13.0", "--out", str(out), "--recipe", str(recipe),
                    "--locks", str(locks), cwd=work, timeout=1200)
    assert result.rc == 0, result.out + result.err
    assert "wheels" in result.out and ".debs" in result.out
    return work, recipe, out


def _provision(work: Path, hosts: SandboxHosts, recipe: Path, bundle: Path, name: str,
               validate: bool = False, variables: tuple = ()):
    result = invoke("provision", "--host", ",".join(hosts.names), "--inventory", str(hosts.inventory),
                    "--recipe", str(recipe), "--bundle", str(bundle),
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
    work, recipe, bundle = built
    first, hosts = _provision(work, offline_hosts, recipe, bundle, "first")
    assert first.rc == 0, first.out + first.err
    for name in offline_hosts.names:
        assert [s["status"] for s in hosts[name]["steps"]] == ["changed"] * 3, hosts[name]
        rc, out, err = offline_hosts.run(name, "g++ --version && " + VENV + "/bin/python -c "
                                         "'import six, packaging; print(six.__version__, packaging.__version__)'")
        assert rc == 0 and out.strip().endswith("1.17.0 24.2"), out + err
        # apt trusted the bundle's repository through its own key, never [trusted=yes]
        rc, out, _ = offline_hosts.run(name, "cat /var/lib/gpuprov/bundles/*/sources.d/*.sources")
        assert "Signed-By: /var/lib/gpuprov/bundles/" in out and "trusted" not in out.lower(), out
    again, hosts = _provision(work, offline_hosts, recipe, bundle, "again")
    assert again.rc == 0, again.out + again.err
    assert all(s["status"] == "ok" for h in hosts.values() for s in h["steps"]), hosts

    # A package the bundle does not carry: that step fails, naming it and the command.
    more = write_yaml(work / "more.yaml", {"name": "more", "steps": [
        {"name": "make", "become": True, "apt": {"packages": ["make"]}}]})
    lacking, hosts = _provision(work, offline_hosts, more, bundle, "lacking")
    assert lacking.rc != 0
    message = hosts["sandbox1"]["steps"][-1]["message"]
    assert "make not in the bundle" in message and "gpuprov bundle --cuda 13.0" in message, message


def test_validation_runs_from_the_bundle_and_needs_no_network(offline_hosts, built):
    """After the recipe, each offline host validates with the bundle's own validate/ (the
    archive carries it; nothing is pushed). A sandbox has no GPU: the honest verdict is
    validation failed, exit 3, as on online sandbox hosts (docs/tutorial/sandbox.md)."""
    work, recipe, bundle = built
    with tarfile.open(bundle) as tar:
        assert "validate/__main__.py" in tar.getnames()
    result, hosts = _provision(work, offline_hosts, recipe, bundle, "validated", validate=True)
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
    work, recipe, bundle = built
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
    result, hosts = _provision(work, offline_hosts, recipe, bad, f"tampered-{kind[:3]}")
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
    work, _, bundle = built
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
             "this step's apt read the bundle's repository alone"),
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
