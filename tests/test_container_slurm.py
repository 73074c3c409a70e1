"""`gpuprov validate --container BUNDLE` on the real test Slurm cluster (tests/slurm_cluster.py,
with its oci.conf for runc: Slurm's native OCI containers, `srun --container`), the login node
reached with `connection: local`. The bundle's root filesystem is the sandbox's Debian 12 plus
torch 2.13.0+cpu (tests/container_images.py); the nodes' own python (this machine's) has
torch 2.14.1, so a node's stack in and out of the container differs."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests import container_images
from tests.slurm_cluster import OCI_RUNC, SlurmCluster, missing_reason

CHECKS = "--checks system,torch_import"


@pytest.fixture(scope="module")
def slurm():
    why = missing_reason() or (None if shutil.which("runc") else "runc is not installed")
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(2, oci_conf=OCI_RUNC)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def bundles(slurm, tmp_path_factory):
    """Two OCI bundles on the nodes (one machine here): with torch, and one without python3."""
    root = container_images.torch_rootfs()
    folder = tmp_path_factory.mktemp("bundles")
    os.chmod(folder, 0o755)
    torch = container_images.oci_bundle(root, folder / "torch")
    bare = container_images.oci_bundle(root, folder / "nopython")
    for name in ("python3", "python3.11"):  # links of the copy: the cache keeps its own
        (bare / "rootfs" / "usr" / "bin" / name).unlink()
    yield {"torch": str(torch), "nopython": str(bare)}
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def run(slurm, tmp_path, capsys, monkeypatch):
    """`gpuprov validate --host hpc1 [--container X]` in this process: (rc, out, logs)."""
    from remote.commands import validate as validate_cmd

    monkeypatch.chdir(tmp_path)  # where a crashing slurmstepd would leave its core

    def go(container=None):
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {
            "connection": "local", "slurm": {"partition": "debug", "conf": str(slurm.conf)},
            "vars": {"validate_args": CHECKS}}}}, sort_keys=False))
        logs = tmp_path / "logs"
        shutil.rmtree(logs, ignore_errors=True)
        rc = validate_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(logs),
                              container=container)
        return rc, capsys.readouterr().out, logs
    return go


def _results(logs: Path, node: str) -> dict:
    [path] = (logs / node).glob("*/results.json")
    return json.loads(path.read_text())


def _record(logs: Path) -> dict:
    [path] = (logs / "hpc1").glob("*/slurm.json")
    return json.loads(path.read_text())


def test_each_step_runs_in_the_bundle_through_srun_container(run, bundles):
    rc, out, logs = run()  # the nodes' own stack first
    outside = {n: _results(logs, n)["host"] for n in ("n1", "n2")}
    rc, out, logs = run(container=bundles["torch"])
    assert rc == 3, out  # no GPU, no torchvision in the image: a verdict, results home
    record = _record(logs)
    assert f"--container={bundles['torch']}" in record["srun"]
    assert record["container"] == {"image": bundles["torch"], "kind": "slurm-oci"}
    for node in ("n1", "n2"):
        host = _results(logs, node)["host"]
        assert host["container"]["image"] == bundles["torch"]
        assert host["container"]["runtime"] == "slurm-oci"
        assert host["container"]["digest"] is None  # a bundle has none
        assert (host["python"], host["torch"]) == ("3.11.2", "2.13.0+cpu")
        assert (host["python"], host["torch"]) != (outside[node]["python"], outside[node]["torch"])
        assert "container" not in outside[node]


def test_a_bundle_without_python3_is_a_named_failure_of_each_node(run, bundles):
    rc, out, logs = run(container=bundles["nopython"])
    assert rc == 3, out
    for node in ("n1", "n2"):
        assert (f"{node}: validation: not validated: container: image {bundles['nopython']} "
                "has no python3") in out


def test_an_image_reference_on_a_cluster_with_only_oci_bundles_is_named(run):
    rc, out, logs = run(container="nvcr.io/nvidia/pytorch:25.01-py3")
    assert rc != 0
    assert ("hpc1: validation: not validated: --container: the cluster runs only OCI bundles "
            "(oci.conf, srun --container): --container 'nvcr.io/nvidia/pytorch:25.01-py3' must "
            "be the bundle's path on the nodes") in out
