"""The GPU-stack recipes: exact command plans per distro, and the checks that guard them.

Plans are made in check mode on the local connection (read-only probes of this machine's dpkg)
with the facts of the target distro put in place of this machine's, and a GPU on the bus.
"""
from __future__ import annotations

import pytest

from remote.commands.inputs import load_and_check
from remote.engine.jobs.apply import ApplyRecipe
from remote.engine.run import Run, RunOptions
from remote.output.recap import Reporter
from remote.output.runlog import Redactor
from tests.conftest import REPO, write_yaml

# The recipes' `become` steps run on the local connection, which needs root.
pytestmark = pytest.mark.root

DISTROS = {
    "ubuntu2004-x86_64": {"distro_id": "ubuntu", "distro_version": "20.04", "arch": "x86_64"},
    "ubuntu2204-x86_64": {"distro_id": "ubuntu", "distro_version": "22.04", "arch": "x86_64"},
    "ubuntu2404-x86_64": {"distro_id": "ubuntu", "distro_version": "24.04", "arch": "x86_64"},
    "ubuntu2404-sbsa": {"distro_id": "ubuntu", "distro_version": "24.04", "arch": "aarch64"},
    "debian12-x86_64": {"distro_id": "debian", "distro_version": "12", "arch": "x86_64"},
    "debian13-x86_64": {"distro_id": "debian", "distro_version": "13", "arch": "x86_64"},
    "debian13-sbsa": {"distro_id": "debian", "distro_version": "13", "arch": "aarch64"},
}
# The first 12 hex digits of each sum in stack.yaml (sources cited there); debian13/sbsa has none.
KNOWN_SUMS = {
    "ubuntu2004-x86_64": "cf5ca9853118",
    "ubuntu2204-x86_64": "d93190d50b98",
    "ubuntu2404-x86_64": "d2a6b11c0963",
    "ubuntu2404-sbsa": "6ea7d2737648",
    "debian12-x86_64": "e7f219eab6fe",
    "debian13-x86_64": "dd28f1f6ba00",
}


def plan(work, recipe, facts, extra_vars=None):
    inv = write_yaml(work / "inv.yaml", {"hosts": {"localhost": {"connection": "local"}}})
    inventory, hosts, rec = load_and_check(str(inv), "localhost", str(REPO / "playbooks" / recipe),
                                           extra_vars or {})
    # A fresh GPU host unless `facts` says otherwise (the target's facts win).
    host = dict(gpu_count=1, gpus=["NVIDIA H100"], kernel="6.8.0-1012-aws",
                secure_boot="disabled", driver_version="", driver_source="", driver_packages=[],
                driver_package_version="", driver_held=[], nvswitch_count=0)
    options = RunOptions(check=True, logs_dir=None, run_id="plan", extra_vars=extra_vars or {},
                         facts_override=dict(host, **facts))
    reporter = Reporter(Redactor())
    reporter.set_hosts(["localhost"])
    result = Run(inventory, hosts, options, reporter, Redactor()).execute(ApplyRecipe(rec))["localhost"]
    return {s.name: s for s in result.steps}


@pytest.mark.parametrize("distro", sorted(DISTROS))
def test_driver_plan_per_distro(work, distro):
    repo = distro.replace("-", "/")
    steps = plan(work, "nvidia-driver.yaml", DISTROS[distro])
    checksum = steps[f"The keyring's checksum for {repo} is known"]
    if distro not in KNOWN_SUMS:
        assert checksum.status == "failed"
        assert f"{repo}/Packages" in checksum.message and "--var cuda_keyring_sha256" in checksum.message
        return
    assert checksum.status == "ok"
    keyring = steps["NVIDIA repository keyring"]
    assert keyring.status == "changed"
    assert keyring.commands == [
        f"download https://developer.download.nvidia.com/compute/cuda/repos/{repo}/"
        f"cuda-keyring_1.1-1_all.deb, verify sha256 {KNOWN_SUMS[distro]}..., dpkg -i"]
    headers = steps["Kernel headers for 6.8.0-1012-aws (linux-headers-6.8.0-1012-aws linux-headers-aws) and DKMS"]
    assert "apt-get install linux-headers-6.8.0-1012-aws linux-headers-aws dkms" in headers.commands
    # The fleet's branch (R580); Debian's branch is held by NVIDIA's pinning package.
    package = "nvidia-open" if distro.startswith("debian") else "nvidia-open-580"
    driver = steps[f"Driver branch 580 ({package}), held"]
    assert driver.commands[-2:] == [f"apt-get install {package}", f"apt-mark hold {package}"]
    pinning = steps["Driver branch 580 pinned (nvidia-driver-pinning-580)"]
    assert pinning.status == ("changed" if distro.startswith("debian") else "skipped")
    assert steps["Blacklist nouveau"].commands[0].startswith("write /etc/modprobe.d/blacklist-nouveau.conf")


def test_cuda_version_picks_the_row(work):
    facts = DISTROS["ubuntu2204-x86_64"]   # NVIDIA's 24.04 repository has no 11.8
    steps = plan(work, "site.yaml", facts, {"cuda_version": "11.8"})
    assert "apt-get install cuda-toolkit-11-8" in steps["CUDA toolkit 11.8"].commands
    assert steps["cuDNN 8 for CUDA 11.8"].commands[-1] == \
        "apt-get install libcudnn8=8.9.7.29-1+cuda11.8 libcudnn8-dev=8.9.7.29-1+cuda11.8"
    assert steps["Driver: none found, installing branch 580 (nvidia-open-580)"].status == "ok"
    # 11.8's torch is on PyTorch's index only: its lock is the user's to make (README, "Locks").
    torch = steps["torch 2.7.1 + torchvision 0.22.1 (locked)"]
    assert torch.status == "failed"
    assert torch.message.startswith("pip_lock: lock locks/torch-11.8.txt: no such lock file (`gpuprov lock`")


def test_unknown_cuda_version_fails_with_the_known_ones(work):
    steps = plan(work, "cuda-wheels.yaml", DISTROS["debian12-x86_64"], {"cuda_version": "10.2"})
    check = steps["CUDA 10.2 is in the compatibility table"]
    assert check.status == "failed"
    assert "known: 13.0, 12.8, 12.6, 12.4, 11.8" in check.message


def test_mirrors_replace_nvidia_and_pytorch_urls(work):
    facts = DISTROS["ubuntu2404-x86_64"]
    steps = plan(work, "site.yaml", facts, {"nvidia_repo_base": "http://mirror.internal/nvidia",
                                            "pip_index_url": "http://mirror.internal/pypi"})
    assert steps["NVIDIA repository keyring"].commands[0].startswith(
        "download http://mirror.internal/nvidia/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb")
    # 12.8's torch lock was made from PyPI: its files come from PyPI's mirror.
    assert steps["torch 2.10.0 + torchvision 0.25.0 (locked)"].commands[-1].startswith(
        "install locks/torch-12.8.txt into /opt/gpuprov/venv from http://mirror.internal/pypi with uv")


def test_secure_boot_is_a_clear_failure(work):
    facts = dict(DISTROS["ubuntu2204-x86_64"])
    inv = write_yaml(work / "inv.yaml", {"hosts": {"localhost": {"connection": "local"}}})
    inventory, hosts, rec = load_and_check(str(inv), "localhost",
                                           str(REPO / "playbooks" / "nvidia-driver.yaml"), {})
    options = RunOptions(check=True, logs_dir=None, run_id="plan",
                         facts_override=dict(facts, gpu_count=1, secure_boot="enabled"))
    result = Run(inventory, hosts, options, Reporter(Redactor()), Redactor()).execute(ApplyRecipe(rec))
    steps = result["localhost"].steps
    failed = [s for s in steps if s.status == "failed"]
    assert failed and failed[0].name == "Secure Boot is off"
    assert "Disable Secure Boot" in failed[0].message
    assert steps[-1] is failed[0], "nothing runs after the failed check"


def test_no_gpu_skips_every_driver_step(work, provision):
    inv = write_yaml(work / "inv.yaml", {"hosts": {"localhost": {"connection": "local"}}})
    result = provision("localhost", REPO / "playbooks" / "nvidia-driver.yaml", inv, check=True)
    assert result.rc == 0
    statuses = result.statuses("localhost")
    assert statuses[0] == "ok" and set(statuses[1:]) == {"skipped"}


def test_reboot_is_refused_on_the_local_connection(work, provision):
    inv = write_yaml(work / "inv.yaml", {"hosts": {"localhost": {"connection": "local"}}})
    rec = write_yaml(work / "r.yaml", {"steps": [{"reboot": {"timeout": 5}}]})
    result = provision("localhost", rec, inv)
    assert result.rc == 1
    assert "refusing to reboot" in result.host("localhost")["steps"][0]["message"]


def test_the_cache_prefetches_torch_from_the_index_pytorch_yaml_uses(work):
    """`prefetch_torch`: the row's torch and torchvision into the cache's mirror of the index
    its torch lock was made from: PyPI's root/pypi where PyPI has the row's torch build, else
    torch_index_url (PyTorch's index; root/pypi too when that is PyPI). The cache fetches
    NVIDIA's https:// repository over HTTPS for the fleet and publishes that it does."""
    facts = DISTROS["debian12-x86_64"]
    for row, index, mirror, pins in (
            ("12.6", None, "root/download.pytorch.org-whl-cu126", "torch==2.10.0 torchvision==0.25.0"),
            ("12.6", "https://pypi.org/simple/", "root/pypi", "torch==2.10.0 torchvision==0.25.0"),
            # 13.0's torch lock was made from PyPI (its torch build is published there)
            ("13.0", None, "root/pypi", "torch==2.14.1 torchvision==0.29.1")):
        extra = {"prefetch_torch": True, "cuda_version": row,
                 **({"torch_index_url": index} if index else {})}
        steps = plan(work, "cache.yaml", facts, extra)
        fetch = steps[f"Fetched into the cache from {mirror}: {pins}"]
        assert f"--index-url http://127.0.0.1:3141/{mirror}/+simple/ {pins}" in fetch.commands[0]
    nvidia = "https://developer.download.nvidia.com/compute/cuda/repos"
    assert steps[f"apt-cacher-ng fetches over HTTPS for the fleet: {nvidia}"].status == "changed"
    steps = plan(work, "cache.yaml", facts, {})
    assert steps["Fetched into the cache from root/pypi: "].status == "skipped"
