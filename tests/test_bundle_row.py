"""The real CUDA 13.0 wheel row from a bundle on an offline host (issue 35, "Done means"): `gpuprov
bundle --cuda 13.0` builds the bundle of the real `playbooks/locks/cuda-13.0-wheels.txt` (no
torch: the row's 8 wheels and uv, 1.15 GB from PyPI) with the real `playbooks/cuda-wheels.yaml`'s
Debian packages (python3-venv, g++ and their dependencies, from this machine's Debian mirror);
`gpuprov provision --bundle` with that recipe (`cuda_version=13.0`, `with_torch=false`) installs
it on an OFFLINE sandbox host (`sandbox up --offline`), which the test proves reaches nothing.
What a user then sees: the recap; the venv's nvcc 13.0 (the nvidia/cu13 wheel) compiles and links
a kernel with the bundle's g++; uv lists exactly the lock's pins at the lock's versions; the
bundle's validate/ ran, nothing pushed, to the honest no-GPU verdict; a re-run is all `ok`.

One host, not two: the push and the install of 1.15 GB are the test's time (bench/bundle_install.py
measures two hosts). Nothing is a stand-in. Needs root, PyPI and the Debian mirror this
machine's apt uses; the bundle (1.25 GB) and the host are removed at the end. It takes 2-2.5
min on a 2-core machine (the build about 25 s of it, with PyPI at about 100 MB/s).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tarfile

import pytest
from packaging.utils import parse_wheel_filename

from tests.conftest import REPO, invoke
from tests.sandbox_fixture import own_hosts
from tests.sshd import shared_tmp
from tests.test_bundle_sandbox import _provision, reaches_nothing, validated_from_the_bundle
from tests.test_gpu_stack_nvcc import VECTOR_ADD

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

RECIPE = REPO / "playbooks" / "cuda-wheels.yaml"
LOCK = REPO / "playbooks" / "locks" / "cuda-13.0-wheels.txt"
ROW = ("cuda_version=13.0", "with_torch=false")
VENV = "/home/admin/.gpuprov/venv"
WHEELS_STEP = "CUDA 13.0 compiler, runtime and cuDNN wheels (locked)"
APT_STEP = "python3-venv and a C++ compiler"
# name -> version of each pin of the lock (the row's lock has no markers: every pin holds)
PINS = {m.group(1): m.group(2) for m in re.finditer(r"^([\w.-]+)==(\S+)", LOCK.read_text(), re.M)}


@pytest.fixture(scope="module")
def offline_host():
    with own_hosts(1, offline=True) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def row_bundle():
    """The 13.0 row's bundle, built as a user builds it (all defaults: the row's lock, uv's
    lock, cuda-wheels.yaml's packages); removed at the end."""
    work = shared_tmp("gpuprov-bundle-row-")
    try:
        out = work / "site.bundle.tar"
        result = invoke("bundle", "--cuda", "13.0", "--out", str(out), cwd=work, timeout=1800)
        assert result.rc == 0, result.out + result.err
        yield work, out, result.out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_real_13_0_row_installs_from_its_bundle_on_an_offline_host(offline_host, row_bundle):
    work, bundle, built = row_bundle
    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    wheels = dict(parse_wheel_filename(f["path"].split("/", 1)[1])[:2]
                  for f in manifest["files"] if f["path"].startswith("wheels/"))
    assert {n: str(v) for n, v in wheels.items() if n != "uv"} == PINS, wheels
    assert f"bundle: {len(PINS) + 1} wheels, " in built and ".debs" in built, built
    bundle_id = re.search(r"id ([0-9a-f]{16})\)", built).group(1)
    reaches_nothing(offline_host, "sandbox1")

    first, hosts = _provision(work, offline_host, RECIPE, bundle, "first", validate=True,
                              variables=ROW)
    validated_from_the_bundle(work, first, hosts)       # exit 3: no GPU here
    steps = {s["name"]: s["status"] for s in hosts["sandbox1"]["steps"]}
    pushed = [name for name in steps if name.startswith(f"bundle {bundle_id} pushed (")]
    assert pushed and steps[pushed[0]] == "changed", steps
    assert steps[APT_STEP] == "changed" and steps[WHEELS_STEP] == "changed", steps
    recap = first.out.split("RECAP", 1)[1].splitlines()
    row = next(line.split() for line in recap if line.startswith("sandbox1 "))
    assert row[3:6] == ["0", "0", "no"] and int(row[2]) >= 3, recap    # changed, nothing failed

    # The compiler works: nvcc of the venv's nvidia/cu13 wheel, with g++ from the bundle,
    # compiles and links a kernel; it runs and finds no GPU (a sandbox has none).
    rc, out, err = offline_host.run("sandbox1", f"""set -e
d=$({VENV}/bin/python -c 'import nvidia; print(list(nvidia.__path__)[0])')/cu13
cd "$(mktemp -d)"
cat > va.cu <<'EOF'
{VECTOR_ADD}EOF
"$d/bin/nvcc" --version | tail -n 2
"$d/bin/nvcc" -arch=sm_90 va.cu -o va -L"$d/lib"
./va
{VENV}-uv/uv pip list --python {VENV}/bin/python --offline --format freeze
""", user="admin", timeout=600)
    assert rc == 0, f"rc={rc}\n{out}\n{err}"
    assert "release 13.0, V13.0.88" in out and "no CUDA device" in out, out
    listed = dict(line.split("==") for line in out.splitlines() if "==" in line)
    assert listed == PINS, listed            # the lock's pins at its versions, nothing else

    again, hosts = _provision(work, offline_host, RECIPE, bundle, "again", variables=ROW)
    assert again.rc == 0, again.out + again.err
    assert all(s["status"] == "ok" for s in hosts["sandbox1"]["steps"]), hosts["sandbox1"]["steps"]
    assert f"bundle {bundle_id} on the host" in again.out
