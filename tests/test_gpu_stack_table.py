"""playbooks/stack.yaml's rows against what PyPI and PyTorch publish, and the static refusals.

The requirement tables below are public metadata (sources per row); the rows must satisfy them,
so that pip never has to undo one step's choice in the next (the 11.8 row pinned cuDNN 8 while
torch's cu118 build requires cuDNN 9.1.0.70: every run downgraded the other).
"""
from __future__ import annotations

import re

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import REPO
from tests.test_playbooks import DISTROS, plan

ROWS = yaml.safe_load((REPO / "playbooks" / "stack.yaml").read_text())["vars"]["compat"]

# What torch's wheel of each row requires, exactly (torch's METADATA Requires-Dist):
TORCH_REQUIRES = {
    # torch +cu118 builds: pytorch/pytorch .github/scripts/generate_binary_build_matrix.py
    # (commit 00018c9487224886f1c839167a56f4471ab1ebc4, "11.8" block) and public pip logs
    # ("Collecting nvidia-cudnn-cu11==9.1.0.70 (from torch)").
    "11.8": {"nvidia-cudnn-cu11": "9.1.0.70", "nvidia-cuda-runtime-cu11": "11.8.89"},
    # torch 2.6.0 on PyPI (a cu124 build): pip --dry-run --report of torch==2.6.0.
    "12.4": {"nvidia-cudnn-cu12": "9.1.0.70", "nvidia-cuda-runtime-cu12": "12.4.127"},
    # torch 2.10.0 on PyPI (a cu128 build): pip --dry-run --report of torch==2.10.0.
    "12.8": {"nvidia-cudnn-cu12": "9.10.2.21", "nvidia-cuda-runtime-cu12": "12.8.90"},
    # torch 2.14.1 on PyPI (a cu130 build): `uv pip compile` of torch==2.14.1 against PyPI
    # (cuda-toolkit[...]==13.0.3, whose own METADATA pins nvidia-cuda-runtime==13.0.96.*).
    "13.0": {"nvidia-cudnn-cu13": "9.24.0.43", "cuda-toolkit": "13.0.3",
             "nvidia-cuda-runtime": "13.0.96"},
}
# nvidia-cuda-nvcc 13.0.88's Requires-Dist (its METADATA, unpinned): each must be in the row,
# pinned to 13.0, or pip takes the newest and ptxas 13.0 rejects newer PTX.
NVCC_13_REQUIRES = ("nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cuda-crt")


def requirements(row: str) -> dict:
    return {(r := Requirement(spec)).name: r.specifier for spec in ROWS[row]["wheels"]}


@pytest.mark.parametrize("row", sorted(ROWS))
def test_every_cuda_wheel_is_pinned_to_the_row(row):
    cuda_wheels = {name: spec for name, spec in requirements(row).items()
                   if re.match(r"nvidia-(cuda-|nvvm)", name)}
    assert cuda_wheels
    for name, spec in cuda_wheels.items():
        assert str(spec) == f"=={row}.*", (name, spec)


def test_the_13_0_compiler_comes_with_its_own_minor():
    assert ROWS["13.0"]["nvcc_wheel"] is True
    reqs = requirements("13.0")
    for name in NVCC_13_REQUIRES:
        assert reqs[name].contains("13.0.88") and not reqs[name].contains("13.5.37"), name


@pytest.mark.parametrize("row", sorted(set(ROWS) - {"13.0"}))
def test_rows_without_an_nvcc_wheel_say_so(row):
    assert ROWS[row]["nvcc_wheel"] is False


@pytest.mark.parametrize("row", sorted(TORCH_REQUIRES))
def test_rows_satisfy_torchs_own_requirements(row):
    reqs = requirements(row)
    for name, version in TORCH_REQUIRES[row].items():
        assert reqs[name].contains(version), (row, name, str(reqs[name]), version)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_torch_without_the_known_remote_code_execution(row):
    torch = Version(ROWS[row]["torch"])
    # CVE-2025-32434 (torch.load weights_only=True RCE), fixed in 2.6.0: every row.
    assert torch >= Version("2.6.0")
    # CVE-2026-24747, fixed in 2.10.0: every row whose CUDA has a 2.10.0 build (not cu124, cu118).
    if row not in ("12.4", "11.8"):
        assert torch >= Version("2.10.0")


@pytest.mark.root  # its plan runs become probes through sudo on the local connection
def test_no_nvcc_is_said_in_the_plan(work):
    steps = plan(work, "cuda-wheels.yaml", DISTROS["debian12-x86_64"], {"cuda_version": "12.8"})
    assert ("CUDA compiler: none, CUDA 12.8 has no nvcc wheel (runtime, cuDNN and torch only; "
            "use cuda.yaml for nvcc)") in steps
    # 12.8's torch is PyPI's build: its lock is shipped, and installs with the wheels.
    torch = steps["CUDA 12.8 compiler, runtime and cuDNN wheels + torch 2.10.0 + torchvision (locked)"]
    assert torch.commands[-1].startswith("install locks/cuda-12.8-wheels-torch.txt into ")
    steps = plan(work, "cuda-wheels.yaml", DISTROS["debian12-x86_64"], {"cuda_version": "13.0",
                                                                           "with_torch": False})
    assert "CUDA compiler: nvcc 13.0 in the venv (link with -L <site-packages>/nvidia/cu13/lib)" in steps
    wheels = steps["CUDA 13.0 compiler, runtime and cuDNN wheels (locked)"].commands[-1]
    assert wheels.startswith("install locks/cuda-13.0-wheels.txt into ")
    assert wheels.endswith("with uv (pip when uv cannot be fetched), hashes required (8 packages)")


def test_11_8_wheels_are_refused_on_arm64(work):
    steps = plan(work, "cuda-wheels.yaml", DISTROS["ubuntu2404-sbsa"], {"cuda_version": "11.8"})
    check = steps["CUDA 11.8 wheels exist for aarch64"]
    assert check.status == "failed"
    assert check.message.startswith("CUDA 11.8's wheels (cuDNN, torch) are not published for aarch64")
    assert list(steps)[-1] == check.name


@pytest.mark.parametrize("distro, refused", [
    ("debian12-x86_64", True), ("ubuntu2404-x86_64", True), ("ubuntu2204-x86_64", False)])
def test_11_8_toolkit_is_refused_where_the_repository_lacks_it(work, distro, refused):
    steps = plan(work, "cuda.yaml", DISTROS[distro], {"cuda_version": "11.8"})
    repo = distro.split("-")[0]
    check = steps[f"NVIDIA's repository for {distro.replace('-', '/')} carries CUDA 11.8"]
    assert check.status == ("failed" if refused else "ok")
    if refused:
        assert check.message.startswith(f"CUDA 11.8 is not in NVIDIA's {repo} repository "
                                        "(no cuda-toolkit-11-8)")
        assert "NVIDIA repository keyring" not in steps


@pytest.mark.parametrize("recipe", ["site.yaml", "nvidia-driver.yaml", "cuda.yaml", "cudnn.yaml"])
def test_a_host_without_apt_stops_at_the_start(work, recipe):
    rocky = {"distro_id": "rocky", "distro_version": "9.4", "arch": "x86_64", "pkg_manager": "dnf"}
    steps = plan(work, recipe, rocky)
    failed = [s for s in steps.values() if s.status == "failed"]
    assert [s.name for s in failed] == ["localhost has apt (Ubuntu or Debian)"]
    assert failed[0].message == ("rocky 9.4 has no apt: the NVIDIA recipes support Ubuntu "
                                 "20.04/22.04/24.04 and Debian 12/13 (cuda-wheels.yaml needs only "
                                 "python3 with venv)")
    assert list(steps)[-1] == failed[0].name
    assert all(s.status in ("ok", "skipped") for s in list(steps.values())[:-1])


@pytest.mark.root  # its plan runs become probes through sudo on the local connection
def test_dcgm_for_the_rows_cuda_major(work):
    steps = plan(work, "dcgm.yaml", DISTROS["ubuntu2204-x86_64"], {"cuda_version": "13.0"})
    assert steps["DCGM 4 has a build for CUDA 13 on ubuntu2204/x86_64"].status == "ok"
    dcgm = steps["DCGM 4 for CUDA 13 (datacenter-gpu-manager-4-cuda13)"]
    assert dcgm.commands[-1] == "apt-get install datacenter-gpu-manager-4-cuda13"
    steps = plan(work, "dcgm.yaml", DISTROS["ubuntu2204-x86_64"], {"cuda_version": "11.8"})
    check = steps["DCGM 4 has a build for CUDA 11 on ubuntu2204/x86_64"]
    assert check.status == "failed" and list(steps)[-1] == check.name
    steps = plan(work, "dcgm.yaml", DISTROS["debian13-x86_64"], {"cuda_version": "13.0"})
    assert steps["DCGM 4 has a build for CUDA 13 on debian13/x86_64"].status == "failed"


@pytest.mark.root  # its plan runs become probes through sudo on the local connection
def test_container_toolkit_plan(work):
    steps = plan(work, "container-toolkit.yaml", DISTROS["debian12-x86_64"])
    assert steps["nvidia-container-toolkit"].commands[-1] == "apt-get install nvidia-container-toolkit"
    assert "NVIDIA repository keyring" in steps


@pytest.mark.root  # its plan runs become probes through sudo on the local connection
def test_peermem_leaves_a_host_without_the_peer_memory_api_alone(work):
    # This machine's kernel has no ib_register_peer_memory_client: the probe says so for real.
    assert "ib_register_peer_memory_client" not in open("/proc/kallsyms").read()
    steps = plan(work, "peermem.yaml", dict(DISTROS["ubuntu2204-x86_64"], driver_version="580.95.05"))
    step = steps["nvidia-peermem loaded, and at boot (where the peer-memory API exists)"]
    assert (step.status, step.commands) == ("ok", [])
