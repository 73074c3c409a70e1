"""The apt route of cuda.yaml, cudnn.yaml and nvidia-driver.yaml, for real, on a sandbox host.

The NVIDIA repository here is a STAND-IN (tests/standin_repo.py): a tiny signed flat apt
repository with NVIDIA's layout and package names (`cuda-keyring`, `cuda-toolkit-13-0`,
`cudnn9-cuda-13`, `nvidia-open-580`), contents of a few bytes, built by this module with dpkg-deb
and a throwaway GPG key, and served on 127.0.0.1. It is NOT NVIDIA's repository and NOT NVIDIA
software. The recipes reach it through their mirror var `nvidia_repo_base`, exactly as a fenced
fleet would reach an internal mirror.

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

from remote import sandbox
from tests.conftest import REPO, invoke, write_yaml
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401  (session fixture)
from tests.standin_repo import KEYRING_PATH, STANDIN, StandinRepo

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

HOST = "sandbox1"
CUDA = REPO / "playbooks" / "cuda.yaml"
CUDNN = REPO / "playbooks" / "cudnn.yaml"
DRIVER = REPO / "playbooks" / "nvidia-driver.yaml"
STANDIN_PACKAGES = ("cuda-keyring", "cuda-toolkit-13-0", "cudnn9-cuda-13", "nvidia-open-580")
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
        names = " ".join(STANDIN_PACKAGES)
        root_sh(box, f"""apt-mark unhold {names} >/dev/null 2>&1
dpkg --purge --force-remove-reinstreq {names} >/dev/null 2>&1
set -e
rm -f /etc/profile.d/cuda.sh /etc/apt/apt.conf.d/99gpuprov-standin
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


def test_driver_route_is_skipped_without_a_gpu(host, repo, tmp_path):
    assert root_sh(host, "lspci | wc -l").strip() == "0"
    run = provision(host, tmp_path, DRIVER, repo)
    assert run.rc == 0, run
    steps = run.host["steps"]
    assert steps[0]["name"] == "CUDA 13.0 is in the compatibility table"
    assert steps[0]["status"] == "ok"
    assert len(steps) > 5 and {s["status"] for s in steps[1:]} == {"skipped"}, steps
    assert run.status("Driver branch 580 (nvidia-open-580), held") == "skipped"
    assert run.status("NVIDIA repository keyring") == "skipped"
    assert run.host["changed"] == 0
    assert "nvidia-open-580" not in installed(host, "nvidia-open-580")


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
