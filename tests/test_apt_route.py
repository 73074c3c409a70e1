"""The apt route of cuda.yaml, cudnn.yaml and nvidia-driver.yaml, for real, on a sandbox host.

The NVIDIA repository here is a STAND-IN (tests/standin_repo.py): a tiny signed flat apt
repository with NVIDIA's layout and package names (`cuda-keyring`, `cuda-toolkit-13-0`,
`cudnn9-cuda-13`, `nvidia-open-580`, `nvidia-open` with its pinning package and library,
`nvidia-fabricmanager-580`, an image's `nvidia-driver`), contents of a few bytes, built by this
module with dpkg-deb and a throwaway GPG key, and served on 127.0.0.1. Later tests make the host
look like a GPU cloud's: a stand-in lspci of an HGX board (GPUs and NVSwitches), a stand-in
systemctl, a driver already installed and held by someone else, another entry for the
repository. It is NOT NVIDIA's repository and NOT NVIDIA software. The recipes reach it through
their mirror var `nvidia_repo_base`, exactly as a fenced fleet would reach an internal mirror.

While this module runs, the sandbox host's Debian sources are set aside so that every apt fetch
goes to the stand-in on loopback (nothing leaves 127.0.0.0/8); the module puts the host's apt
state back and removes the stand-in packages when it ends (the hosts are shared by the session).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from remote import sandbox
from remote.config.templating import render_text
from tests.conftest import REPO, invoke, write_yaml
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401  (session fixture)
from tests.standin_repo import (
    FIXTURES,
    IMAGE_DRIVER,
    KEYRING_PATH,
    MAINTAINER,
    STANDIN,
    Package,
    StandinRepo,
    cudnn,
    toolkit,
)

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

HOST = "sandbox1"
CUDA = REPO / "playbooks" / "cuda.yaml"
CUDNN = REPO / "playbooks" / "cudnn.yaml"
DRIVER = REPO / "playbooks" / "nvidia-driver.yaml"
STANDIN_PACKAGES = ("cuda-keyring", "cuda-toolkit-13-0", "cudnn9-cuda-13", "nvidia-open-580",
                    "nvidia-fabricmanager-580", "nvidia-driver")
# Stand-ins this module puts on the host (removed at the end): an HGX board's lspci, and a
# systemctl (the sandbox host has no systemd) that records its calls and keeps enabled/active marks.
STANDIN_TOOLS = ("/usr/local/bin/lspci", "/usr/local/bin/systemctl", "/usr/local/sbin/update-initramfs")
SYSTEMCTL_STATE = "/var/lib/gpuprov-standin-systemctl"
SYSTEMCTL = f"""#!/bin/sh
# STAND-IN for systemctl, from gpuprov's tests: no systemd runs in a sandbox host
d={SYSTEMCTL_STATE}; mkdir -p $d; echo "$*" >> $d/log
cmd=$1; shift; now=; unit=
for a in "$@"; do case $a in --now) now=1;; --*) ;; *) unit=$a;; esac; done
case $cmd in
  enable) touch "$d/$unit.enabled"; [ -z "$now" ] || touch "$d/$unit.active";;
  start|restart) touch "$d/$unit.active";;
  is-enabled) exec test -e "$d/$unit.enabled";;
  is-active) exec test -e "$d/$unit.active";;
esac
"""
BACKUP = "/root/.gpuprov-apt-route-backup"
RUN_TIMEOUT = 240     # one provision run (apt retries included) never takes longer


# ------------------------------------------------------------------------------------------------
# fixtures

@pytest.fixture(scope="module")
def box(sandbox_hosts):  # noqa: F811
    if HOST not in sandbox_hosts.names:
        pytest.skip(f"{HOST} is not among the sandbox hosts")
    return sandbox_hosts


def root_sh(box, script: str, timeout: float = 60.0) -> str:
    """Run `script` as root on HOST; its stdout (asserting it succeeded)."""
    rc, out, err = box.run(HOST, script, user="root", timeout=timeout)
    assert rc == 0, f"{script!r} on {HOST}: rc={rc}\n{out}\n{err}"
    return out


@pytest.fixture(scope="module")
def repo(box):
    """The STAND-IN for NVIDIA's repository, laid out for the host's distro and arch."""
    out = root_sh(box, ". /etc/os-release; echo \"$ID $VERSION_ID $(uname -m)\"")
    distro, version, arch = out.split()
    repo_path = f"{distro}{version.replace('.', '')}/{'sbsa' if arch == 'aarch64' else arch}"
    for tool, package in (("dpkg-deb", "dpkg"), ("gpg", "gnupg"), ("gpgconf", "gnupg")):
        if not shutil.which(tool):
            pytest.fail(f"`{tool}` is needed to build the stand-in repository: "
                        f"apt-get install -y {package}")
    with StandinRepo(repo_path) as standin:
        yield standin
    assert not standin.gnupghome.exists() and not standin.tmp.exists()
    assert sandbox.hosts.port_free("127.0.0.1", int(standin.url.rsplit(":", 1)[1]))


@pytest.fixture(scope="module")
def host(box, repo):
    """HOST with its apt fenced to the stand-in for this module, put back afterwards."""
    root_sh(box, f"""set -e
rm -rf {BACKUP}; mkdir -p {BACKUP}
cp -a /etc/apt/sources.list.d {BACKUP}/sources.list.d
cp -a /var/lib/apt/lists {BACKUP}/lists
rm -f /etc/apt/sources.list.d/*
[ -e /etc/apt/sources.list ] && mv /etc/apt/sources.list {BACKUP}/sources.list || true
# a proxy from this machine's apt settings must not see loopback requests
printf 'Acquire::http::Proxy::127.0.0.1 "DIRECT";\\n' > /etc/apt/apt.conf.d/99gpuprov-standin
""")
    try:
        yield box
    finally:
        # every package the stand-in repository built (its maintainer), whatever the test added
        names = (f"$(dpkg-query -W -f='${{Package}}\\t${{Maintainer}}\\n' | "
                 f"awk -F'\\t' '$2 == \"{MAINTAINER}\" {{print $1}}')")
        root_sh(box, f"""apt-mark unhold {names} >/dev/null 2>&1
dpkg --purge --force-remove-reinstreq {names} >/dev/null 2>&1
set -e
rm -f /etc/profile.d/cuda.sh /etc/apt/apt.conf.d/99gpuprov-standin {" ".join(STANDIN_TOOLS)}
rm -rf {SYSTEMCTL_STATE} /etc/systemd/system/nvidia-persistenced.service.d
rm -f /etc/modprobe.d/blacklist-nouveau.conf /etc/modules-load.d/nvidia-peermem.conf
rm -rf /etc/apt/sources.list.d /var/lib/apt/lists
mv {BACKUP}/sources.list.d /etc/apt/sources.list.d
mv {BACKUP}/lists /var/lib/apt/lists
[ -e {BACKUP}/sources.list ] && mv {BACKUP}/sources.list /etc/apt/sources.list || true
rmdir {BACKUP}
""")


class Run:
    def __init__(self, result, data):
        self.rc, self.out, self.err, self.json = result.rc, result.out, result.err, data

    @property
    def host(self) -> dict:
        return self.json["hosts"][HOST]

    @property
    def steps(self) -> dict:
        return {s["name"]: s for s in self.host["steps"]}

    def status(self, name: str) -> str:
        return self.steps[name]["status"]

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"


def provision(box, tmp_path: Path, recipe: Path, repo: StandinRepo, **overrides) -> Run:
    """`invoke provision --host HOST --recipe RECIPE --no-validate` against the stand-in."""
    variables = {"cuda_version": "13.0", "nvidia_repo_base": repo.url,
                 "cuda_keyring_sha256": repo.keyring_sha256, **overrides}
    json_path = tmp_path / f"run-{len(list(tmp_path.glob('run-*.json')))}.json"
    args = ["provision", "--host", HOST, "--inventory", str(box.inventory),
            "--recipe", str(recipe), "--no-validate", "--json", str(json_path)]
    for name, value in variables.items():
        args += ["--var", f"{name}={value}"]
    result = invoke(*args, cwd=tmp_path, timeout=RUN_TIMEOUT)
    data = json.loads(json_path.read_text()) if json_path.exists() else None
    return Run(result, data)


def installed(box, *names: str) -> dict:
    """{package: version} of the installed ones among `names` on HOST."""
    out = root_sh(box, "dpkg-query -W -f='${Package} ${db:Status-Abbrev} ${Version}\\n' -- "
                  + " ".join(map(shlex.quote, names)) + " 2>/dev/null || true")
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1][1:2] == "i":     # ii, or hi when held
            got[parts[0]] = parts[2]
    return got


def exists(box, path: str) -> bool:
    return root_sh(box, f"test -e {shlex.quote(path)} && echo yes || echo no").strip() == "yes"


# ------------------------------------------------------------------------------------------------
# tests (in order: each starts from the state the previous one left)

def test_wrong_keyring_checksum_fails_closed(host, repo, tmp_path):
    before = len(repo.requests)
    run = provision(host, tmp_path, CUDA, repo, cuda_keyring_sha256="0" * 64)
    assert run.rc == 1, run
    keyring = run.steps["NVIDIA repository keyring"]
    assert keyring["status"] == "failed", run
    assert "checksum mismatch" in keyring["message"], keyring
    assert repo.keyring_sha256 in keyring["message"]        # it says what it got
    # The host stopped at the failed step: no sources list, no apt run against the repository.
    assert list(run.steps)[-1] == "NVIDIA repository keyring"
    fetched = repo.requests[before:]
    assert fetched == [f"/{repo.repo_path}/cuda-keyring_1.1-1_all.deb"], fetched
    assert installed(host, *STANDIN_PACKAGES) == {}
    assert not exists(host, KEYRING_PATH)
    assert not exists(host, f"/etc/apt/sources.list.d/cuda-{repo.repo_path.replace('/', '-')}.list")
    assert root_sh(host, "ls /tmp/*.deb 2>/dev/null | wc -l").strip() == "0"   # download removed


def test_cuda_then_cudnn_converge_from_the_standin(host, repo, tmp_path):
    list_file = f"/etc/apt/sources.list.d/cuda-{repo.repo_path.replace('/', '-')}.list"
    before = len(repo.requests)
    run = provision(host, tmp_path, CUDA, repo)
    assert run.rc == 0, run
    assert run.host["failed"] == 0 and not run.host["unreachable"]
    assert run.status("NVIDIA repository keyring") == "changed"
    # The keyring ships the very line the recipe writes, so the recipe does not fight the
    # package's conffile.
    assert run.status(f"NVIDIA repository source ({repo.url})") == "ok"
    assert run.status("CUDA toolkit 13.0") == "changed"
    assert run.status("CUDA on PATH and the library path") == "changed"
    fetched = repo.requests[before:]
    for path in ("cuda-keyring_1.1-1_all.deb", "InRelease", "Packages",
                 "cuda-toolkit-13-0_13.0.2-1_all.deb"):
        assert f"/{repo.repo_path}/{path}" in fetched, fetched

    assert root_sh(host, f"cat {list_file}") == repo.sources_line()
    assert root_sh(host, f"sha256sum < {KEYRING_PATH}").split()[0] == \
        hashlib.sha256(repo.public_key).hexdigest()
    policy = root_sh(host, "apt-cache policy cuda-toolkit-13-0")
    assert f"{repo.url}/{repo.repo_path}" in policy, policy
    assert STANDIN in root_sh(host, "dpkg-query -W -f='${Description}' cuda-toolkit-13-0")
    nvcc = root_sh(host, "bash -lc 'nvcc --version; echo LD=$LD_LIBRARY_PATH'")
    assert "release 13.0" in nvcc and "LD=/usr/local/cuda-13.0/lib64" in nvcc, nvcc

    run = provision(host, tmp_path, CUDNN, repo)
    assert run.rc == 0, run
    assert run.status("NVIDIA repository keyring") == "ok"
    assert run.status("cuDNN 9 for CUDA 13.0") == "changed"
    assert installed(host, *STANDIN_PACKAGES) == {
        "cuda-keyring": "1.1-1", "cuda-toolkit-13-0": "13.0.2-1", "cudnn9-cuda-13": "9.13.0.50-1"}

    facts = invoke("facts", "--host", HOST, "--inventory", str(host.inventory),
                   "--json", str(tmp_path / "facts.json"), cwd=tmp_path, timeout=60)
    assert facts.rc == 0, facts.err
    got = json.loads((tmp_path / "facts.json").read_text())["hosts"][HOST]["facts"]
    assert got["cudnn_version"] == "9.13.0", got     # from the stand-in's cudnn_version.h


def test_rerun_changes_nothing(host, repo, tmp_path):
    before = len(repo.requests)
    for recipe in (CUDA, CUDNN):
        run = provision(host, tmp_path, recipe, repo)
        assert run.rc == 0, run
        assert run.host["changed"] == 0, run.host["steps"]
        assert run.host["failed"] == 0
    assert repo.requests[before:] == []     # converged: not even an apt-get update


def test_apt_lock_holds_the_versions_it_names(host, repo, tmp_path):
    """`gpuprov lock --apt` against the stand-in pins the newest toolkit and cuDNN. The
    repository then gains newer ones: an unlocked run takes the newest (and says it is
    unlocked), a run with the lock installs exactly the locked version, then changes nothing;
    a lock naming a version the repository lacks fails the step with apt's message."""
    locks = tmp_path / "locks"
    made = invoke("lock", "--apt", "--cuda", "13.0", "--apt-repo", repo.repo_path,
                  "--apt-base", repo.url, "--out", str(locks), cwd=tmp_path, timeout=120)
    assert made.rc == 0, made.err
    lock_file = locks / f"apt-{repo.repo_path.replace('/', '-')}-cuda-13.0.txt"
    text = lock_file.read_text()
    assert "\ncuda-toolkit-13-0=13.0.2-1 " in text and "\ncudnn9-cuda-13=9.13.0.50-1 " in text, text
    assert f"# index: {repo.url}/{repo.repo_path}/Packages\n" in text     # no Packages.gz here
    repo.publish([toolkit("13.0.3-1"), cudnn("9.14.0.64-1")])
    root_sh(host, "dpkg --purge cuda-toolkit-13-0 cudnn9-cuda-13 >/dev/null && apt-get update -q >/dev/null",
            timeout=120)

    # no lock for this repository shipped: both steps install the newest, the notice shows once
    (tmp_path / "unlocked").mkdir()
    both = write_yaml(tmp_path / "unlocked" / "both.yaml", {"name": "toolkit and cuDNN", "steps": [
        {"include": str(CUDA)}, {"include": str(CUDNN)}]})
    run = provision(host, tmp_path, both, repo)
    assert run.rc == 0, run
    assert installed(host, "cuda-toolkit-13-0", "cudnn9-cuda-13") == {
        "cuda-toolkit-13-0": "13.0.3-1", "cudnn9-cuda-13": "9.14.0.64-1"}
    assert [w for w in run.host.get("warnings", []) if "unlocked" in w] == [w for w in run.host[
        "warnings"] if w.startswith("CUDA toolkit 13.0: unlocked: no apt lock locks/apt-")], run.host
    assert len(run.host["warnings"]) == 1, run.host["warnings"]
    assert run.steps["cuDNN 9 for CUDA 13.0"]["message"].startswith("unlocked: no apt lock"), run.steps

    run = provision(host, tmp_path, CUDA, repo, apt_locks=str(locks))
    assert run.rc == 0 and run.status("CUDA toolkit 13.0") == "changed", run
    assert not run.host.get("warnings"), run.host
    assert installed(host, "cuda-toolkit-13-0") == {"cuda-toolkit-13-0": "13.0.2-1"}
    runs = sorted((tmp_path / "logs" / HOST).iterdir(), key=lambda p: p.stat().st_mtime)
    manifest = json.loads((runs[-1] / "stack.json").read_text())      # what the run recorded
    assert {"name": "cuda-toolkit-13-0", "version": "13.0.2-1"} in manifest["apt"], manifest["apt"]
    run = provision(host, tmp_path, CUDNN, repo, apt_locks=str(locks))  # 9.14 put back to 9.13
    assert run.rc == 0 and run.status("cuDNN 9 for CUDA 13.0") == "changed", run
    before = len(repo.requests)
    for recipe in (CUDA, CUDNN):        # both at their locked versions now
        run = provision(host, tmp_path, recipe, repo, apt_locks=str(locks))
        assert (run.rc, run.host["changed"]) == (0, 0), run.host["steps"]
    assert repo.requests[before:] == []
    assert installed(host, "cudnn9-cuda-13") == {"cudnn9-cuda-13": "9.13.0.50-1"}

    lock_file.write_text(text.replace("cuda-toolkit-13-0=13.0.2-1", "cuda-toolkit-13-0=13.0.99-1"))
    run = provision(host, tmp_path, CUDA, repo, apt_locks=str(locks))
    assert run.rc == 1
    step = run.steps["CUDA toolkit 13.0"]
    assert step["status"] == "failed", step
    assert "Version '13.0.99-1' for 'cuda-toolkit-13-0' was not found" in step["message"], step
    assert installed(host, "cuda-toolkit-13-0") == {"cuda-toolkit-13-0": "13.0.2-1"}


def test_driver_route_is_skipped_without_a_gpu(host, repo, tmp_path):
    assert root_sh(host, "lspci | wc -l").strip() == "0"
    run = provision(host, tmp_path, DRIVER, repo)
    assert run.rc == 0, run
    steps = run.host["steps"]
    assert steps[0]["name"] == "CUDA 13.0 is in the compatibility table"
    assert steps[0]["status"] == "ok"
    assert len(steps) > 5 and {s["status"] for s in steps[1:]} == {"skipped"}, steps
    assert run.status("Driver branch 580 (nvidia-open), held") == "skipped"
    assert run.status("NVIDIA repository keyring") == "skipped"
    assert run.host["changed"] == 0
    assert installed(host, "nvidia-open", "nvidia-open-580") == {}


def pin_recipe(path: Path, pin: str) -> Path:
    return write_yaml(path, {
        "name": "driver pin and hold (against the stand-in repository)",
        "steps": [{"name": f"nvidia-open-580={pin}, held",
                   "apt": {"packages": [f"nvidia-open-580={pin}"], "hold": True,
                           "update_cache": True},
                   "become": True}]})


def held(box) -> list:
    return root_sh(box, "apt-mark showhold").split()


def test_pinned_install_hold_and_downgrade(host, repo, tmp_path):
    recipe = pin_recipe(tmp_path / "pin-580.yaml", "580.*")
    run = provision(host, tmp_path, recipe, repo)
    assert run.rc == 0, run
    assert run.host["changed"] == 1
    assert installed(host, "nvidia-open-580") == {"nvidia-open-580": "580.82.07-1"}  # newest match
    assert held(host) == ["nvidia-open-580"]
    run = provision(host, tmp_path, recipe, repo)
    assert (run.rc, run.host["changed"]) == (0, 0), run.host["steps"]

    # A narrower pin on a held package: downgraded (the step allows changing held packages).
    recipe = pin_recipe(tmp_path / "pin-580.65.yaml", "580.65.*")
    run = provision(host, tmp_path, recipe, repo)
    assert run.rc == 0, run
    assert run.host["changed"] == 1
    assert installed(host, "nvidia-open-580") == {"nvidia-open-580": "580.65.06-1"}
    assert held(host) == ["nvidia-open-580"]
    run = provision(host, tmp_path, recipe, repo)
    assert (run.rc, run.host["changed"]) == (0, 0), run.host["steps"]

    # A pin nothing matches: a clear failure, and the installed version stays.
    recipe = pin_recipe(tmp_path / "pin-575.yaml", "575.*")
    run = provision(host, tmp_path, recipe, repo)
    assert run.rc == 1
    assert "no version of nvidia-open-580 matches 575.*" in run.steps[
        "nvidia-open-580=575.*, held"]["message"]
    assert installed(host, "nvidia-open-580") == {"nvidia-open-580": "580.65.06-1"}


def test_driver_packages_are_held_together(host, repo, tmp_path):
    """nvidia-driver.yaml's hold of every package at the driver's version, run on the host's
    real dpkg: the driver's and Fabric Manager's packages of 580.82.07 are found and held."""
    recipe = yaml.safe_load(DRIVER.read_text())
    unheld = render_text(recipe["vars"]["driver_unheld"],
                         {"driver_install_packages": ["nvidia-open-580"]})
    hold = recipe["steps"][[s.get("name") for s in recipe["steps"]].index(
        "The driver's packages of its version held together")]
    root_sh(host, "apt-mark unhold nvidia-open-580 >/dev/null; DEBIAN_FRONTEND=noninteractive "
            "apt-get install -y -q --allow-downgrades nvidia-open-580=580.82.07-1 "
            "nvidia-fabricmanager-580=580.82.07-1 >/dev/null", timeout=120)
    assert sorted(root_sh(host, unheld).split()) == ["nvidia-fabricmanager-580", "nvidia-open-580"]
    root_sh(host, hold["shell"].replace("{{ driver_unheld | verbatim }}", unheld))
    assert sorted(held(host)) == ["nvidia-fabricmanager-580", "nvidia-open-580"]
    assert root_sh(host, unheld).strip() == ""
    root_sh(host, "apt-mark unhold nvidia-fabricmanager-580 >/dev/null; "
            "dpkg --purge nvidia-fabricmanager-580 >/dev/null")


def put(box, path: str, text: str, mode: str = "0644") -> None:
    root_sh(box, f"cat > {shlex.quote(path)} <<'GPUPROV_EOF'\n{text}GPUPROV_EOF\nchmod {mode} {shlex.quote(path)}")


def test_another_entry_for_the_repository_is_set_aside(host, repo, tmp_path):
    # An older install's list under another name, with another keyring: apt refuses both.
    other = "/etc/apt/sources.list.d/cuda.list"
    put(host, other, f"deb [signed-by=/usr/share/keyrings/cuda-old.gpg] {repo.url}/{repo.repo_path}/ /\n")
    rc, out, err = host.run(HOST, "apt-get update", user="root", timeout=120)
    assert rc != 0 and "Conflicting values set for option Signed-By" in out + err, (rc, out, err)
    name = f"NVIDIA's {repo.repo_path} repository set aside"
    run = provision(host, tmp_path, CUDA, repo)
    assert run.rc == 0, run
    assert run.status(f"Other entries for {name}") == "changed"
    assert exists(host, f"{other}.disabled") and not exists(host, other)
    root_sh(host, "apt-get update", timeout=120)         # apt reads its sources again
    run = provision(host, tmp_path, CUDA, repo)
    assert (run.rc, run.host["changed"]) == (0, 0), run.host["steps"]


def test_image_driver_kept_and_fabric_manager_matched(host, repo, tmp_path):
    """An HGX image: NVSwitches on the bus, a driver at the row's branch already installed and
    held by someone else. The driver stays, Fabric Manager comes at exactly its version."""
    root_sh(host, "apt-mark unhold nvidia-open-580 >/dev/null; dpkg --purge nvidia-open-580 >/dev/null")
    lspci = (FIXTURES / "lspci-hgx-h100.txt").read_text()
    put(host, "/usr/local/bin/lspci",
        f"#!/bin/sh\n# STAND-IN for lspci (an HGX board)\ncat <<'EOF'\n{lspci}EOF\n", "0755")
    put(host, "/usr/local/bin/systemctl", SYSTEMCTL, "0755")
    root_sh(host, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
            f"nvidia-driver={IMAGE_DRIVER}-1 >/dev/null && apt-mark hold nvidia-driver", timeout=120)

    run = provision(host, tmp_path, DRIVER, repo)
    assert run.rc == 0, run
    # The stand-in's module cannot be loaded in a sandbox host: installed, not loaded, as on an
    # image built without a reboot, so the run reboots the host (for real) before the check.
    case = (f"Driver: {IMAGE_DRIVER} (package) kept: branch 580 meets the minimum 580 of CUDA 13.0, "
            "not loaded yet: reboot")
    assert run.status(case) == "ok", list(run.steps)
    for name, step in run.steps.items():
        if name.startswith(("Driver branch ", "Kernel headers ", "Blacklist nouveau")):
            assert step["status"] == "skipped", step
    assert run.status("Fabric Manager (nvidia-fabricmanager-580) at the driver's version, held") == "changed"
    # exactly the driver's version (the repository also has an older and a newer one), both held
    assert installed(host, "nvidia-driver", "nvidia-fabricmanager-580", "nvidia-open") == {
        "nvidia-driver": f"{IMAGE_DRIVER}-1", "nvidia-fabricmanager-580": f"{IMAGE_DRIVER}-1"}
    assert sorted(held(host)) == ["nvidia-driver", "nvidia-fabricmanager-580"]
    for name in ("reboot", "fabric manager", "persistence mode"):
        assert run.status(name) == "changed", name
    # nvidia-smi (stand-in: a captured HGX H800 with its fabric Completed) and cuInit (stand-in
    # libcuda returning 0) pass the check
    assert run.status("driver answers") == "ok", run.steps["driver answers"]
    calls = [c for c in root_sh(host, f"cat {SYSTEMCTL_STATE}/log").splitlines()
             if not c.startswith("is-")]        # the probes' questions aside
    assert calls == ["enable nvidia-fabricmanager", "restart nvidia-fabricmanager", "daemon-reload",
                     "enable nvidia-persistenced", "restart nvidia-persistenced"], calls
    assert root_sh(host, "cat /etc/systemd/system/nvidia-persistenced.service.d/override.conf") == (
        "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user root --persistence-mode --verbose\n")

    # Again: the packages, holds and files stay; only the pending reboot is still pending (the
    # stand-in never loads), so it and its handlers run once more.
    run = provision(host, tmp_path, DRIVER, repo)
    assert run.rc == 0, run
    assert sorted(s["name"] for s in run.host["steps"] if s["status"] == "changed") == sorted([
        f"Driver {IMAGE_DRIVER} installed, not loaded yet", "reboot", "fabric manager",
        "persistence mode"])
    assert installed(host, "nvidia-driver", "nvidia-fabricmanager-580") == {
        "nvidia-driver": f"{IMAGE_DRIVER}-1", "nvidia-fabricmanager-580": f"{IMAGE_DRIVER}-1"}


def test_missing_kernel_headers_are_named(host, repo, tmp_path):
    """A GPU, no driver, and no headers for the running kernel anywhere (the stand-in repository
    carries none, like an archive that dropped an image's old kernel): a plain message."""
    root_sh(host, "apt-mark unhold nvidia-driver >/dev/null; dpkg --purge nvidia-driver >/dev/null")
    run = provision(host, tmp_path, DRIVER, repo)
    assert run.rc == 1, run
    kernel = root_sh(host, "uname -r").strip()
    check = run.steps[f"Headers for kernel {kernel} are in the archive"]
    assert check["status"] == "failed", run.host["steps"]
    assert f"no linux-headers-{kernel} in the configured repositories" in check["message"], check
    assert "Upgrade the kernel (apt-get install linux-image-" in check["message"]
    assert list(run.steps)[-1] == check["name"]


def test_fresh_hgx_host_converges_with_fabric_manager(host, repo, tmp_path):
    """A fresh HGX host (after the previous test: no driver; lspci shows GPUs and NVSwitches):
    pinning package, driver, its library held with it, Fabric Manager at the version apt just
    installed, a real reboot of the sandbox host, then the CUDA check passes."""
    root_sh(host, "apt-mark unhold nvidia-fabricmanager-580 >/dev/null; "
            "dpkg --purge nvidia-fabricmanager-580 >/dev/null")     # the kept image's
    kernel = root_sh(host, "uname -r").strip()
    flavour = "-".join(part for part in kernel.split("-") if not part[:1].isdigit())
    headers = [f"linux-headers-{kernel}", f"linux-headers-{flavour}", "dkms"]
    repo.publish([Package(name, "0.0-1", {f"/usr/share/doc/{name}/STANDIN": (STANDIN + "\n", 0o644)})
                  for name in headers])
    put(host, "/usr/local/sbin/update-initramfs",
        "#!/bin/sh\n# STAND-IN for update-initramfs (not in a sandbox host)\nexit 0\n", "0755")
    boot = root_sh(host, "cat /proc/sys/kernel/random/boot_id").strip()

    run = provision(host, tmp_path, DRIVER, repo)
    assert run.rc == 0, run
    assert run.status("Driver: none found, installing branch 580 (nvidia-open)") == "ok"
    for name in ("Driver branch 580 pinned (nvidia-driver-pinning-580)", "Driver branch 580 (nvidia-open), held",
                 "Blacklist nouveau", "The driver's packages of its version held together",
                 "Fabric Manager (nvidia-fabricmanager-580) at the driver's version, held",
                 "rebuild initramfs", "reboot", "fabric manager", "persistence mode"):
        assert run.status(name) == "changed", name
    assert run.status("driver answers") == "ok"
    assert root_sh(host, "cat /proc/sys/kernel/random/boot_id").strip() != boot
    want = {"nvidia-driver-pinning-580": f"{IMAGE_DRIVER}-1", "nvidia-open": f"{IMAGE_DRIVER}-1",
            "libnvidia-compute-580": f"{IMAGE_DRIVER}-1",
            # the driver's version, not the newest (580.105.08-1 is in the repository too)
            "nvidia-fabricmanager-580": f"{IMAGE_DRIVER}-1"}
    assert installed(host, *want) == want
    assert sorted(held(host)) == ["libnvidia-compute-580", "nvidia-driver-pinning-580",
                                  "nvidia-fabricmanager-580", "nvidia-open"]
