"""nvidia-driver.yaml on the hosts real GPU clouds hand out: plans in check mode for a driver
already there (newer, older, held by someone else, from the .run installer), NVSwitch boards,
the driver package names per branch; and the driver's success check run for real against
stand-ins of nvidia-smi (captured output) and libcuda (a C stub returning cuInit's code).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_playbooks import DISTROS, plan

# Plans are made on the local connection, whose become probes go through sudo: root only.
pytestmark = pytest.mark.root

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
UBUNTU = DISTROS["ubuntu2204-x86_64"]
DEBIAN = DISTROS["debian12-x86_64"]
HEADERS = "Kernel headers for 6.8.0-1012-aws (linux-headers-6.8.0-1012-aws linux-headers-aws) and DKMS"


def driver_plan(work, facts=None, distro=UBUNTU, **variables):
    steps = plan(work, "nvidia-driver.yaml", dict(distro, **(facts or {})),
                 {name: str(value) for name, value in variables.items()})
    case = next(s for name, s in steps.items() if name.startswith("Driver: "))
    return case, steps


def install_step(steps):
    return next(s for name, s in steps.items()
                if name.startswith("Driver branch ") and name.endswith(", held"))


def ran(steps) -> list:
    return [name for name, s in steps.items() if s.status != "skipped"]


def test_fresh_host_installs_the_fleet_branch(work):
    case, steps = driver_plan(work)
    assert case.name == "Driver: none found, installing branch 580 (nvidia-open-580)"
    assert install_step(steps).status == "changed"
    assert {HEADERS, "Blacklist nouveau", "reboot"} <= set(ran(steps))


def test_newer_driver_from_the_image_is_kept(work):
    # A DLAMI-like image: 580.95.05 from Canonical's server packages, held by the image.
    case, steps = driver_plan(work, {
        "driver_version": "580.95.05", "driver_flavor": "open", "driver_source": "package",
        "driver_packages": ["nvidia-driver-580-server=580.95.05-0ubuntu0.22.04.1"],
        "driver_package_version": "580.95.05", "driver_held": ["nvidia-driver-580-server"]})
    assert case.status == "ok"
    assert case.name == "Driver: 580.95.05 (package) kept: branch 580 meets the minimum 570 of CUDA 12.8"
    assert install_step(steps).status == "skipped"
    for name in (HEADERS, "Blacklist nouveau",
                 "Someone else's holds released (driver_policy replace)", "Secure Boot is off"):
        assert steps[name].status == "skipped", name
    assert "reboot" not in steps and "rebuild initramfs" not in steps
    assert steps["Driver 580.95.05 installed, not loaded yet"].status == "skipped"
    assert steps["nvidia-persistenced running"].status == "changed"


def test_a_kept_driver_not_loaded_yet_gets_its_reboot(work):
    case, steps = driver_plan(work, {"driver_source": "package", "driver_package_version": "580.95.05",
                                     "driver_packages": ["nvidia-open-580=580.95.05-1"]})
    assert case.name.endswith("kept: branch 580 meets the minimum 570 of CUDA 12.8, not loaded yet: reboot")
    assert steps["Driver 580.95.05 installed, not loaded yet"].status == "changed"
    assert install_step(steps).status == "skipped"
    assert [name for name in ("reboot", "persistence mode", "driver answers") if name in steps] == [
        "reboot", "persistence mode", "driver answers"]


def test_a_newer_branch_is_never_downgraded(work):
    case, steps = driver_plan(work, {"driver_version": "590.48.01", "driver_source": "unknown"},
                              cuda_version="12.4")
    assert case.name == "Driver: 590.48.01 (unknown) kept: branch 590 meets the minimum 550 of CUDA 12.4"
    assert install_step(steps).status == "skipped"


OLD_HELD = {"driver_version": "535.104.05", "driver_flavor": "proprietary", "driver_source": "package",
            "driver_packages": ["nvidia-driver-535-server=535.104.05-0ubuntu0.22.04.1"],
            "driver_package_version": "535.104.05", "driver_held": ["nvidia-driver-535-server"]}


def test_an_old_driver_held_by_someone_else_is_left_alone(work):
    case, steps = driver_plan(work, OLD_HELD)
    assert case.status == "failed"
    assert case.message == ("535.104.05 is below the minimum 570 of CUDA 12.8 and someone else holds "
                            "nvidia-driver-535-server: left alone (driver_policy: replace takes it over)")
    assert list(steps)[-1] == case.name, "nothing runs after the refusal"


def test_replace_takes_the_hold_over(work):
    case, steps = driver_plan(work, OLD_HELD, driver_policy="replace")
    assert case.name == "Driver: 535.104.05 (package) replaced by branch 580 (driver_policy: replace)"
    assert steps["Someone else's holds released (driver_policy replace)"].commands == [
        "apt-mark unhold nvidia-driver-535-server"]
    # the old driver's daemon is left to the reboot; the handler starts the new one
    assert steps["nvidia-persistenced running"].status == "skipped"
    assert install_step(steps).commands[-2:] == ["apt-get install nvidia-open-580",
                                                 "apt-mark hold nvidia-open-580"]


def test_an_old_unheld_package_driver_is_upgraded(work):
    case, steps = driver_plan(work, dict(OLD_HELD, driver_held=[]))
    assert case.name == ("Driver: 535.104.05 (package) is below the minimum 570 of CUDA 12.8, "
                         "upgrading to branch 580")
    assert install_step(steps).status == "changed"


def test_an_old_runfile_driver_is_refused(work):
    case, _ = driver_plan(work, {"driver_version": "535.104.05", "driver_source": "runfile"})
    assert case.status == "failed"
    assert "came from NVIDIA's .run installer: remove it (nvidia-installer --uninstall)" in case.message


def test_the_fleet_branch_must_meet_the_row(work):
    case, _ = driver_plan(work, driver_branch="550")
    assert case.status == "failed"
    assert case.message == "driver_branch 550 is below the minimum 570 of CUDA 12.8"


@pytest.mark.parametrize("distro, branch, flavor, pinned, packages", [
    (UBUNTU, "535", "open", False, "nvidia-kernel-open-535 cuda-drivers-535"),
    (UBUNTU, "550", "open", False, "nvidia-kernel-open-550 cuda-drivers-550"),
    (UBUNTU, "570", "open", False, "nvidia-open-570"),
    (UBUNTU, "580", "open", False, "nvidia-open-580"),
    (UBUNTU, "580", "proprietary", False, "cuda-drivers-580"),
    (UBUNTU, "590", "open", True, "nvidia-open"),
    (DEBIAN, "580", "open", True, "nvidia-open"),
    (DEBIAN, "580", "proprietary", True, "cuda-drivers"),
])
def test_driver_package_names_per_branch(work, distro, branch, flavor, pinned, packages):
    _, steps = driver_plan(work, distro=distro, cuda_version="11.8", driver_branch=branch,
                           driver_flavor=flavor)
    driver = steps[f"Driver branch {branch} ({packages}), held"]
    assert driver.commands[-2:] == [f"apt-get install {packages}", f"apt-mark hold {packages}"]
    pinning = steps[f"Driver branch {branch} pinned (nvidia-driver-pinning-{branch})"]
    assert pinning.status == ("changed" if pinned else "skipped")
    if pinned:
        assert pinning.commands[-1] == f"apt-get install nvidia-driver-pinning-{branch}"


@pytest.mark.parametrize("kernel, meta", [
    ("6.8.0-1012-aws", "linux-headers-aws"),                 # Ubuntu on AWS
    ("6.8.0-1015-gcp", "linux-headers-gcp"),                 # Ubuntu on GCP
    ("6.1.0-18-cloud-amd64", "linux-headers-cloud-amd64"),   # Debian 12 cloud image
    ("6.12.43+deb13-cloud-amd64", "linux-headers-cloud-amd64"),   # Debian 13's version format
    ("5.15.0-91-generic", "linux-headers-generic"),
])
def test_kernel_headers_follow_the_flavour(work, kernel, meta):
    _, steps = driver_plan(work, {"kernel": kernel}, hold_kernel="true")
    headers = steps[f"Kernel headers for {kernel} (linux-headers-{kernel} {meta}) and DKMS"]
    assert headers.commands[-1] == f"apt-get install linux-headers-{kernel} {meta} dkms"
    check = steps[f"Headers for kernel {kernel} are in the archive"].commands[0]
    assert f"apt-cache show linux-headers-{kernel}" in check
    assert f"Upgrade the kernel (apt-get install linux-image-{meta[len('linux-headers-'):]})" in check
    hold = steps[f"Kernel {kernel} and its headers held (hold_kernel)"]
    assert hold.commands[-1] == f"apt-mark hold linux-image-{kernel} linux-headers-{kernel} {meta}"


def test_kernel_is_not_held_by_default(work):
    _, steps = driver_plan(work)
    assert steps["Kernel 6.8.0-1012-aws and its headers held (hold_kernel)"].status == "skipped"


def test_nvswitch_board_gets_fabric_manager_with_the_driver(work):
    _, steps = driver_plan(work, {"nvswitch_count": 4})
    fm = steps["Fabric Manager (nvidia-fabricmanager-580) at the driver's version, held"]
    assert fm.status == "changed"
    script = fm.commands[0]
    # the version apt installed for the driver, the same version of Fabric Manager, held
    assert "dpkg-query -W -f='${Version}' nvidia-open-580" in script
    assert "install nvidia-fabricmanager-580=\"$fm\"" in script
    assert "apt-mark hold nvidia-fabricmanager-580" in script
    assert steps["Fabric Manager enabled at boot"].commands == ["systemctl enable nvidia-fabricmanager"]
    handlers = [name for name in steps if name in ("reboot", "fabric manager", "driver answers")]
    assert handlers == ["reboot", "fabric manager", "driver answers"]


def test_nvswitch_board_with_a_kept_driver_matches_its_version(work):
    _, steps = driver_plan(work, {"nvswitch_count": 4, "driver_version": "580.95.05",
                                  "driver_source": "package", "driver_package_version": "580.95.05"})
    fm = steps["Fabric Manager (nvidia-fabricmanager-580) at the driver's version, held"]
    assert fm.commands[0].startswith("v=580.95.05\n")


def test_no_fabric_manager_without_nvswitches(work):
    _, steps = driver_plan(work)
    assert steps["Fabric Manager (nvidia-fabricmanager-580) at the driver's version, held"].status == "skipped"
    assert steps["fabric manager"].status == "skipped"


def test_persistence_mode_drop_in(work):
    _, steps = driver_plan(work)
    assert steps["Persistence mode drop-in folder"].commands[0] == \
        "mkdir -p -- /etc/systemd/system/nvidia-persistenced.service.d"
    drop_in = steps["Persistence mode on (nvidia-persistenced --persistence-mode)"]
    assert drop_in.commands[0].startswith(
        "write /etc/systemd/system/nvidia-persistenced.service.d/override.conf (101 bytes")
    assert steps["persistence mode"].commands == [
        "systemctl daemon-reload && systemctl enable nvidia-persistenced && systemctl restart nvidia-persistenced"]


# ------------------------------------------------------------------------------------------------
# the driver's success check, run for real with stand-ins

@pytest.fixture(scope="module")
def libcuda(tmp_path_factory):
    """Stand-in libcuda.so.1 builds: {cuInit's return code: folder holding that build}."""
    if not shutil.which("cc"):
        pytest.skip("needs a C compiler")
    builds = {}
    for code in (0, 802):
        folder = tmp_path_factory.mktemp(f"libcuda-{code}")
        src = folder / "cuda.c"
        src.write_text(f"/* STAND-IN for libcuda (gpuprov tests) */\nint cuInit(unsigned int f) {{ return {code}; }}\n")
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"), str(src)],
                       check=True, capture_output=True, timeout=120)
        builds[code] = folder
    return builds


def check_driver(work, tmp_path, libcuda, nvswitches: int, smi_q: str, cuinit: int):
    """Run the plan's `driver answers` script in bash with stand-in nvidia-smi and libcuda."""
    _, steps = driver_plan(work, {"nvswitch_count": nvswitches})
    script = steps["driver answers"].commands[0]
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "q.txt").write_text(smi_q)
    (stub / "nvidia-smi").write_text(
        "#!/bin/sh\n# STAND-IN for nvidia-smi (gpuprov tests)\n"
        'case "$1" in -L) echo "GPU 0: NVIDIA H800 (UUID: GPU-34bf77d1-c686-6821-79a8-32d326c5039c)";;\n'
        f'  -q) cat {stub}/q.txt;; esac\n')
    (stub / "nvidia-smi").chmod(0o755)
    env = dict(os.environ, PATH=f"{stub}:{os.environ['PATH']}",
               LD_LIBRARY_PATH=str(libcuda[cuinit]))
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)


H800 = (FIXTURES / "nvidia-smi-q-h800.txt").read_text()
IN_PROGRESS = H800.replace("State                             : Completed",
                           "State                             : In Progress").replace(
    "Status                            : Success", "Status                            : N/A")
NO_PERSISTENCE = H800.replace("Persistence Mode                      : Enabled",
                              "Persistence Mode                      : Disabled")


def test_check_passes_on_a_ready_nvswitch_host(work, tmp_path, libcuda):
    proc = check_driver(work, tmp_path, libcuda, 4, H800, 0)
    assert proc.returncode == 0, proc.stderr
    assert "fabric state: Completed" in proc.stdout and "cuInit: 0" in proc.stdout


def test_check_fails_while_the_fabric_is_not_ready(work, tmp_path, libcuda):
    # nvidia-smi -L answers, yet CUDA cannot start: what `nvidia-smi -L` alone let through.
    proc = check_driver(work, tmp_path, libcuda, 4, IN_PROGRESS, 802)
    assert proc.returncode != 0
    assert "GPU 0: NVIDIA H800" in proc.stdout
    assert "fabric state: In Progress" in proc.stdout
    assert "the GPU fabric is not ready" in proc.stderr


def test_check_fails_when_cuda_does_not_initialise(work, tmp_path, libcuda):
    proc = check_driver(work, tmp_path, libcuda, 0, H800, 802)
    assert proc.returncode != 0
    assert "cuInit: 802" in proc.stdout and "CUDA does not initialise" in proc.stderr


def test_check_fails_without_persistence_mode(work, tmp_path, libcuda):
    proc = check_driver(work, tmp_path, libcuda, 0, NO_PERSISTENCE, 0)
    assert proc.returncode != 0
    assert "persistence mode is not on" in proc.stderr
