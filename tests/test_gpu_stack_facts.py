"""The GPU facts: the driver banner, the driver's packages and holds, NVSwitches.

Banners and lspci lines are real host outputs quoted in public sources (cited per row). The
facts script runs for real in sh here, with a stand-in `lspci` on PATH that prints a captured
listing (this machine has no NVIDIA device).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from remote.engine import facts

FIXTURES = Path(__file__).parent / "fixtures" / "facts"

BANNERS = [
    # proprietary x86_64: AWS EC2 User Guide, "efa-start-nccl"
    ("NVIDIA UNIX x86_64 Kernel Module  450.42.01  Tue Jun 15 21:26:37 UTC 2021",
     "450.42.01", "proprietary"),
    # proprietary x86_64: NVRM lines quoted in several public dmesg logs
    ("NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023",
     "535.104.05", "proprietary"),
    # open x86_64: nix-community/nixGL#186 (Ubuntu 24.04, nvidia-driver-565-open)
    ("NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
     "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024", "565.57.01", "open"),
    # open x86_64, the example (public test fixtures carry this line)
    ("NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build", "580.95.05", "open"),
    # open x86_64: nix-community/nixGL#121
    ("NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build  "
     "(archlinux-builder@localhost)", "525.60.11", "open"),
    # open aarch64: a public Go test's captured /proc/driver/nvidia/version
    ("NVIDIA UNIX Open Kernel Module for aarch64  550.144.03  Release Build  "
     "(dvs-builder@U16-I2-C01-12-4)  Mon Dec 30 17:33:24 UTC 2024", "550.144.03", "open"),
    # open aarch64: a public GB300 capture
    ("NVIDIA UNIX Open Kernel Module for aarch64  580.173.02  Release Build  "
     "(dvs-builder@U22-A24-5-4)  Tue Jun 23 08:34:19 UTC 2026", "580.173.02", "open"),
    # proprietary aarch64 (the same Go test): a two-part version
    ("NVIDIA UNIX aarch64 Kernel Module  550.120  Fri Sep 13 11:01:10 UTC 2024",
     "550.120", "proprietary"),
    ("", "", ""),
]


@pytest.mark.parametrize("banner, version, flavor", BANNERS)
def test_driver_banner(banner, version, flavor):
    assert facts.driver_from_banner(banner) == (version, flavor)
    parsed = facts.parse(f"driver_banner={banner}\n")
    assert (parsed["driver_version"], parsed["driver_flavor"]) == (version, flavor)


def test_banner_is_read_from_the_nvrm_line():
    # What the script prints from /proc/driver/nvidia/version (nixGL#186's file, two lines).
    text = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
            "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n"
            "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
    banner = subprocess.run(["sed", "-n", "s/^NVRM version: *//p"], input=text,
                            capture_output=True, text=True, check=True).stdout.strip()
    assert facts.driver_from_banner(banner) == ("565.57.01", "open")


def dpkg_rows(*rows: str) -> str:
    return "".join(f"driver_pkg={row}\n" for row in rows)


@pytest.mark.parametrize("output, expect", [
    # NVIDIA's repository, loaded and held by this recipe
    ("driver_banner=NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n"
     + dpkg_rows("nvidia-open-580 hi 580.95.05-1", "nvidia-kernel-open-580 ii 580.95.05-1",
                 "nvidia-driver-550 un "),
     {"driver_source": "package", "driver_package_version": "580.95.05",
      "driver_held": ["nvidia-open-580"],
      "driver_packages": ["nvidia-open-580=580.95.05-1", "nvidia-kernel-open-580=580.95.05-1"]}),
    # Canonical's server driver, held by the image, Fabric Manager held with it
    ("driver_banner=NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
     + dpkg_rows("nvidia-driver-535-server hi 535.104.05-0ubuntu0.22.04.1",
                 "nvidia-fabricmanager-535 hi 535.104.05-1"),
     {"driver_source": "package", "driver_package_version": "535.104.05",
      "driver_held": ["nvidia-driver-535-server", "nvidia-fabricmanager-535"]}),
    # the .run installer: a module and /usr/bin/nvidia-installer, no package
    ("driver_banner=NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build\n"
     "driver_runfile=1\n",
     {"driver_source": "runfile", "driver_packages": [], "driver_package_version": ""}),
    # a module no package or runfile accounts for (an image's own build)
    ("driver_banner=NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build\n",
     {"driver_source": "unknown"}),
    # installed, not loaded yet (reboot pending): the packages' version
    (dpkg_rows("nvidia-open-580 ii 580.82.07-1", "cuda-drivers-580 ii 580.82.07-1"),
     {"driver_source": "package", "driver_version": "", "driver_package_version": "580.82.07"}),
    # nothing
    ("", {"driver_source": "", "driver_version": "", "driver_packages": [], "driver_held": []}),
])
def test_driver_package_facts(output, expect):
    got = facts.parse(output)
    assert {name: got[name] for name in expect} == expect


def run_script(tmp_path: Path, lspci_output: str, names) -> dict:
    """The facts script for `names`, run by sh here with a stand-in lspci first on PATH."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "lspci.out").write_text(lspci_output)
    (stub / "lspci").write_text(f"#!/bin/sh\n# STAND-IN for lspci -nn -d 10de:\ncat {stub}/lspci.out\n")
    (stub / "lspci").chmod(0o755)
    proc = subprocess.run(["sh", "-c", facts.script(names=names, over_ssh=False)],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PATH=f"{stub}:{os.environ['PATH']}"))
    assert proc.returncode == 0, proc.stderr
    return facts.parse(proc.stdout)


def test_nvswitches_and_gpus_from_lspci(tmp_path):
    got = run_script(tmp_path, (FIXTURES / "lspci-hgx-h100.txt").read_text(),
                     {"nvswitch_count", "gpu_count"})
    assert got["nvswitch_count"] == 4
    assert got["gpu_count"] == 2 and got["gpus"] == ["NVIDIA H100 SXM5 80GB HBM3"] * 2


def test_no_nvswitch_on_a_pcie_board(tmp_path):
    lines = [line for line in (FIXTURES / "lspci-hgx-h100.txt").read_text().splitlines()
             if "[0680]" not in line]
    got = run_script(tmp_path, "\n".join(lines) + "\n", {"nvswitch_count"})
    assert got["nvswitch_count"] == 0


def test_script_reads_no_driver_where_there_is_none(tmp_path):
    # This machine: no /proc/driver/nvidia, no NVIDIA packages.
    got = run_script(tmp_path, "", {"driver_version", "driver_packages", "driver_source"})
    assert (got["driver_version"], got["driver_source"], got["driver_packages"]) == ("", "", [])
