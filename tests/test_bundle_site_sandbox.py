"""One bundle per site (issue 43, item 5): `provision --bundle` with the inventory's
`bundle_site:` pushes the bundle once, to the site host, which serves it over HTTP; the other
hosts install from it over the site network, checked with apt's Signed-By (the key sent by the
control machine, from the signed manifest) and `--require-hashes` (the control machine's lock).

Real parts: three OFFLINE sandbox hosts (`sandbox up --offline`: each in a network namespace of
its own with nothing but `lo`); the test joins them by a real site network: a bridge in the
site host's (sandbox1's) namespace and a veth pair from it into each other host's namespace
(10.243.0.0/24), so sandbox2 and sandbox3 reach sandbox1 and nothing else (not the Debian
mirror, not PyPI, not this machine). The bundle is real (`gpuprov bundle --sign-key`, the
recipe's real .debs, a lock of two small wheels: tests/test_bundle_sandbox.py's `built`), and
so are the site's python3 http.server, apt over HTTP, uv and pip on the hosts.

The tampering is done where a hostile site host would do it: the files it serves, in its
unpacked bundle. Then each host refuses them (apt's hash check against the signed Packages,
uv's `--require-hashes` against the lock), and nothing of them is installed."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.sandbox_fixture import SandboxHosts, own_hosts
from tests.test_bundle_sandbox import VENV, built, site_key  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

SITE = "10.243.0.1"     # the site host's address on the test's site network
PORT = 8478
ROOT = "/var/lib/gpuprov/bundles"


def _ns(hosts: SandboxHosts, name: str) -> str:
    """The PID of host `name`'s init: its network namespace is /proc/PID/ns/net."""
    state = json.loads((hosts.state_dir / "state.json").read_text())
    return str(state["hosts"][name]["init_pid"])


def _ip(pid: str, *args: str) -> None:
    subprocess.run(["nsenter", "-t", pid, "-n", "ip", *args], check=True, capture_output=True,
                   timeout=30)


def site_network(hosts: SandboxHosts, site: str = "sandbox1") -> None:
    """Join offline sandbox hosts by a site network: a bridge in `site`'s namespace at SITE,
    a veth pair from it into each other host's namespace (its `eth0`, 10.243.0.N)."""
    ns = _ns(hosts, site)
    _ip(ns, "link", "add", "br0", "type", "bridge")
    _ip(ns, "addr", "add", f"{SITE}/24", "dev", "br0")
    _ip(ns, "link", "set", "br0", "up")
    for i, name in enumerate((n for n in hosts.names if n != site), start=2):
        other = _ns(hosts, name)
        subprocess.run(["ip", "link", "add", f"s{i}", "netns", ns, "type", "veth", "peer",
                        "name", "eth0", "netns", other], check=True, capture_output=True,
                       timeout=30)
        _ip(ns, "link", "set", f"s{i}", "master", "br0", "up")
        _ip(other, "addr", "add", f"10.243.0.{i}/24", "dev", "eth0")
        _ip(other, "link", "set", "eth0", "up")


@pytest.fixture(scope="module")
def site_hosts():
    """sandbox1 (the site) bridged to sandbox2 and sandbox3 on 10.243.0.0/24, all offline."""
    with own_hosts(3, offline=True) as hosts:
        site_network(hosts)
        yield hosts


@pytest.fixture(scope="module")
def inventory(site_hosts, tmp_path_factory):
    import yaml

    data = yaml.safe_load(site_hosts.inventory.read_text())
    data["bundle_site"] = {"host": "sandbox1", "address": SITE, "port": PORT}
    path = tmp_path_factory.mktemp("site") / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _provision(work: Path, inventory: Path, hosts: str, recipe: Path, bundle: Path, anchor: tuple,
               name: str):
    result = invoke("provision", "--host", hosts, "--inventory", str(inventory), "--recipe",
                    str(recipe), "--bundle", str(bundle), *anchor, "--no-validate",
                    "--json", str(work / f"{name}.json"), cwd=work, timeout=900)
    path = work / f"{name}.json"
    return result, (json.loads(path.read_text())["hosts"] if path.exists() else None)


def _recipe(work: Path, name: str, steps: list) -> Path:
    from tests.conftest import write_yaml

    return write_yaml(work / f"{name}.yaml", {"name": f"site test: {name}", "steps": steps})


APT = {"name": "python3-venv and a C++ compiler", "become": True,
       "apt": {"packages": ["python3-venv", "g++"], "update_cache": True}}
WHEELS = {"name": "the row's wheels (locked)",
          "pip_lock": {"lock": "locks/cuda-13.0-wheels.txt", "venv": VENV}}


def reaches_only_the_site(site_hosts) -> None:
    rc, out, _ = site_hosts.run("sandbox2", "ip -4 -o addr; cat /proc/net/route")
    assert rc == 0 and "10.243.0.2/24" in out, out
    assert all(line.split()[1] != "00000000" for line in out.splitlines()[1:] if "\t" in line), out
    # a route to the site, none elsewhere (the Debian mirror does not even resolve)
    rc, out, err = site_hosts.run("sandbox2", f"ip route get {SITE}; ip route get 151.101.2.132; "
                                             "curl -sS --max-time 5 http://deb.debian.org/ 2>&1",
                                  timeout=30)
    assert f"{SITE} dev eth0" in out and "resolve host" in out, out + err
    assert "unreachable" in err, err


def test_a_site_serving_a_changed_deb_or_wheel_is_refused(site_hosts, inventory, built):
    """The site host is the attacker: it changes the .deb and the wheel it serves. Each host
    refuses them (apt: the signed Packages' hash; uv: the lock's hash) and installs nothing."""
    work, recipe, bundle, anchor = built
    work = work / "site-tamper"
    work.mkdir()
    (work / "locks").symlink_to(recipe.parent / "locks")
    first, hosts = _provision(work, inventory, "sandbox2", _recipe(work, "nothing", []), bundle,
                              anchor, "prime")
    assert first.rc == 0, first.out + first.err
    assert "bundle" in first.out and "pushed" in first.out, first.out
    rc, out, _ = site_hosts.run("sandbox1", f"ls -d {ROOT}/*/ | grep -v site; "
                                            f"ls {ROOT}/*/apt/g++_*.deb {ROOT}/*/wheels/six-*.whl")
    assert rc == 0, out
    deb = next(line for line in out.split() if line.endswith(".deb"))
    wheel = next(line for line in out.split() if line.endswith(".whl"))
    # keep the honest files aside; serve other bytes under their names
    # another package's .deb under g++'s name; six's own wheel with one module more (its
    # name, structure and metadata still six's: only its hash tells)
    swap = (f"sudo -n sh -c 'cp -p {deb} /root/deb.honest && cp -p {wheel} /root/whl.honest && "
            f"cp {ROOT}/*/apt/cpp_*.deb {deb}' && sudo -n python3 -c 'import sys, zipfile\n"
            "with zipfile.ZipFile(sys.argv[1], \"a\") as z: z.writestr(\"six_extra.py\", \"x = 1\")' "
            f"{wheel}")
    rc, out, err = site_hosts.run("sandbox1", swap)
    assert rc == 0, out + err
    try:
        apt_run, hosts = _provision(work, inventory, "sandbox2,sandbox3", _recipe(work, "apt", [APT]),
                                    bundle, anchor, "bad-deb")
        assert apt_run.rc != 0 and hosts is not None, apt_run.out
        for name in ("sandbox2", "sandbox3"):
            assert hosts[name]["failed"], hosts[name]
            assert site_hosts.run(name, "command -v g++")[0] != 0
        for log in (work / "logs").glob("sandbox[23]/*/provision.log"):
            said = log.read_text()
            if "apt-get" in said and "install" in said:
                assert "Hash Sum mismatch" in said or "unexpected size" in said, said[-3000:]
        pip_run, hosts = _provision(work, inventory, "sandbox2,sandbox3",
                                    _recipe(work, "wheels", [WHEELS]), bundle, anchor, "bad-wheel")
        assert pip_run.rc != 0 and hosts is not None, pip_run.out
        for name in ("sandbox2", "sandbox3"):
            assert hosts[name]["failed"], hosts[name]
            assert site_hosts.run(name, f"test -e {VENV}/bin/python && {VENV}/bin/python -c "
                                        "'import six'")[0] != 0
        assert "hash mismatch" in (pip_run.out + pip_run.err).lower(), pip_run.out
    finally:
        site_hosts.run("sandbox1", f"sudo -n sh -c 'cp -p /root/deb.honest {deb} && "
                                   f"cp -p /root/whl.honest {wheel}'")


def test_hosts_install_through_the_site_and_one_that_cannot_reach_it_is_named(
        site_hosts, inventory, built):
    """sandbox3's link to the site is down: it fails alone, its line naming the site and what
    to do; sandbox2 installs from the site. With the link up again, sandbox3 installs too."""
    work, recipe, bundle, anchor = built
    work = work / "site-install"
    work.mkdir()
    (work / "locks").symlink_to(recipe.parent / "locks")
    full = _recipe(work, "full", [APT, WHEELS])
    reaches_only_the_site(site_hosts)
    other = _ns(site_hosts, "sandbox3")
    _ip(other, "link", "set", "eth0", "down")
    try:
        run, hosts = _provision(work, inventory, "sandbox2,sandbox3", full, bundle, anchor, "split")
    finally:
        _ip(other, "link", "set", "eth0", "up")
    print(run.out)
    assert run.rc != 0 and hosts is not None, run.out + run.err
    assert hosts["sandbox2"]["failed"] == 0 and hosts["sandbox3"]["failed"], hosts
    line = next(line for line in run.out.splitlines()
                if "sandbox3" in line and "cannot reach the bundle site sandbox1" in line)
    assert f"http://{SITE}:{PORT}/" in line and f"let this host reach {SITE} TCP port {PORT}" in line
    for name, want in (("sandbox2", 0), ("sandbox3", 1)):
        rc, out, err = site_hosts.run(name, f"g++ --version && {VENV}/bin/python -c "
                                            "'import six; print(six.__version__)'")
        assert (rc == 0) == (want == 0), (name, out, err)
    again, hosts = _provision(work, inventory, "sandbox2,sandbox3", full, bundle, anchor, "again")
    assert again.rc == 0 and hosts is not None, again.out + again.err
    assert hosts["sandbox2"]["changed"] == 0 and hosts["sandbox3"]["failed"] == 0, hosts
    rc, out, err = site_hosts.run("sandbox3", f"g++ --version && {VENV}/bin/python -c 'import six'")
    assert rc == 0, out + err
    for name in ("sandbox2", "sandbox3"):
        # the bundle itself never came to them: only the site's apt source and key
        rc, out, _ = site_hosts.run(name, f"cat {ROOT}/*.site/sources.d/*.sources")
        assert rc == 0 and f"URIs: http://{SITE}:{PORT}/" in out, out
        rc, out, _ = site_hosts.run(name, f"ls {ROOT}")
        assert rc == 0 and all(entry.endswith(".site") for entry in out.split()), out
    rc, log, _ = site_hosts.run("sandbox1", "sudo -n cat /var/log/gpuprov-bundle-site.log")
    assert "10.243.0.2" in log and "10.243.0.3" in log and ".whl" in log and ".deb" in log, log[-2000:]


def test_a_selected_site_host_serves_then_installs_from_its_own_copy(site_hosts, inventory, built):
    """The site host among the selected hosts: it takes the bundle, serves it, then runs the
    recipe from its own unpacked copy (a local apt source), as a host with no site does."""
    work, recipe, bundle, anchor = built
    work = work / "site-selected"
    work.mkdir()
    (work / "locks").symlink_to(recipe.parent / "locks")
    run, hosts = _provision(work, inventory, "sandbox1,sandbox2", _recipe(work, "full", [APT, WHEELS]),
                            bundle, anchor, "selected")
    assert run.rc == 0 and hosts is not None, run.out + run.err
    assert hosts["sandbox1"]["failed"] == 0 and hosts["sandbox2"]["failed"] == 0, hosts
    assert "served to the site" in run.out and "sandbox2 ok" in run.out, run.out
    rc, out, err = site_hosts.run("sandbox1", f"g++ --version && {VENV}/bin/python -c 'import six' && "
                                             f"cat {ROOT}/*/sources.d/*.sources")
    assert rc == 0 and "URIs: file:" in out, out + err
