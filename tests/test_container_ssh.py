"""`gpuprov validate --container IMAGE` on an SSH host: a real sshd on loopback, its real non-root
login user (tests/sshd.py), rootless podman with runc and the cgroupfs manager as Debian sets it
up, and images built here from the sandbox's root filesystem (tests/container_images.py: Debian
12's python3 plus torch 2.13.0+cpu; the host's python3 has no torch). Nothing is pulled."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from remote.sandbox import rootfs
from tests import container_images
from tests.conftest import REPO, Result, write_yaml
from tests.sshd import TEST_USER

pytestmark = pytest.mark.skipif(shutil.which("podman") is None or shutil.which("runc") is None,
                                reason="podman and runc are not installed (.ci/setup --dev installs them)")

CHECKS = "--checks system,torch_import"  # two quick checks; torch_import reads torch's version


@pytest.fixture(scope="module")
def images(farm):
    """Two images in the login user's storage: with torch, and the sandbox's own root
    filesystem without python3."""
    tag = secrets.token_hex(4)
    names = {"torch": f"localhost/gpuprov-test:torch-{tag}",
             "nopython": f"localhost/gpuprov-test:nopython-{tag}"}
    try:
        container_images.podman_import(container_images.torch_rootfs(), names["torch"], farm.user)
        container_images.podman_import(rootfs.ensure_rootfs(), names["nopython"], farm.user,
                                       exclude=["usr/bin/python3", "usr/bin/python3.11"])
        yield names
    finally:
        for name in names.values():
            container_images.podman_remove(name, farm.user)


def gpuprov(*args: str, cwd: Path) -> Result:
    proc = subprocess.run([sys.executable, "-c", "from remote.program import main; main()", *args],
                          cwd=cwd, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=600)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _inventory(farm, work: Path) -> Path:
    return write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "hosts": {"h1": farm.host_entry(farm.addresses[0], vars={"validate_args": CHECKS})}})


def _results(work: Path) -> dict:
    [path] = (work / "logs" / "h1").glob("*/results.json")
    return json.loads(path.read_text())


def _containers_left(user: str) -> str:
    return container_images.as_user(user, "podman ps -a --format '{{.ID}} {{.Image}}'").stdout.strip()


def test_validation_runs_in_the_image_and_results_json_names_it_beside_the_hosts_stack(
        farm, work, images):
    result = gpuprov("validate", "--host", "h1", "-i", str(_inventory(farm, work)),
                     "--container", images["torch"], "--json", str(work / "r.json"), cwd=work)
    # torch_import fails on torchvision (not in the image) and system on nvidia-smi: exit 3,
    # a verdict, with the results home
    assert result.rc == 3, result.out + result.err
    assert f"validate: in container {images['torch']} (podman, digest sha256:" in result.out
    host = _results(work)["host"]
    container = host["container"]
    assert container["image"] == images["torch"] and container["runtime"] == "podman"
    assert container["digest"].startswith("sha256:") and len(container["digest"]) == 71
    assert container["gpus"] == "none"
    # the stack inside is the image's; the host's own, read outside, differs where it does
    assert host["torch"] == "2.13.0+cpu" and host["python"] == "3.11.2"
    assert container["host_stack"] == {"python": "3.11.2", "torch": None, "cuda": None}
    checks = {c["name"]: c for c in _results(work)["checks"]}
    assert "torchvision not installed" in checks["torch_import"]["reason"]
    # nothing left on the host: no container, no unpacked package
    assert _containers_left(farm.user) == ""
    home = Path(os.path.expanduser(f"~{TEST_USER}"))
    assert not list((home / ".gpuprov" / "h1").glob("pkg-*"))
    # the report shows the two stacks side by side, the difference marked
    report = gpuprov("report", "--logs", str(work / "logs"), "--out", str(work / "report"), cwd=work)
    assert report.rc == 0, report.out + report.err
    lines = report.out.splitlines()
    head = lines.index("Containers (latest validation in one per host): the stack inside beside "
                       "the host's own")
    [row] = [line for line in lines[head:] if line.startswith("h1 ")]
    assert row.split()[:3] == ["h1", images["torch"], "podman"]
    assert "3.11.2 | 3.11.2" in row and "2.13.0+cpu != -" in row and "- | -" in row


def test_a_missing_image_is_a_named_failure_of_its_host(farm, work, images):
    missing = images["torch"] + "-gone"
    result = gpuprov("validate", "--host", "h1", "-i", str(_inventory(farm, work)),
                     "--container", missing, cwd=work)
    assert result.rc == 3, result.out + result.err
    assert (f"h1: validation: not validated: container: image {missing} is not on the host "
            "(gpuprov never pulls: load or build it there)") in result.out
    assert not list((work / "logs" / "h1").glob("*/results.json"))


def test_an_image_without_python3_is_a_named_failure_of_its_host(farm, work, images):
    result = gpuprov("validate", "--host", "h1", "-i", str(_inventory(farm, work)),
                     "--container", images["nopython"], cwd=work)
    assert result.rc == 3, result.out + result.err
    assert f"h1: validation: not validated: container: image {images['nopython']} has no python3" \
        in result.out
    assert _containers_left(farm.user) == ""


@pytest.mark.parametrize("image, message", [
    ("", "--container needs an image"),
    ("Localhost/UPPER:1", "'Localhost/UPPER:1' is not an image reference"),
    ("img; rm -rf ~", "'img; rm -rf ~' is not an image reference"),
    ("/srv/bundles/../etc", "a path must be absolute and plain"),
    ("/srv/bundles/pytorch", "a path is an OCI bundle or image on a cluster's nodes (srun); h1 is "
                             "an SSH host"),
])
def test_a_bad_image_is_one_line_and_exit_2_before_any_host_is_contacted(farm, work, image, message):
    result = gpuprov("validate", "--host", "h1", "-i", str(_inventory(farm, work)),
                     "--container", image, cwd=work)
    assert result.rc == 2, result.out + result.err
    assert message in result.err and len(result.err.strip().splitlines()) == 1, result.err
    assert "Traceback" not in result.err
    assert not (work / "logs").exists()
