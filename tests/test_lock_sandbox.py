"""Locks on real sandbox hosts (issue 24): two hosts installed from one lock get the same
packages, a lock whose hash does not match its file installs nothing and says so, and a package
changed by hand on one host is flagged as drift by `report`.

Needs root and PyPI (the CUDA 13.0 wheels, about 1.1 GB per host; uv from PyPI). Run under
`flock /tmp/gpuprov-sandbox.lock`.
"""
from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.conftest import REPO, invoke
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.root]

WHEELS = str(REPO / "playbooks" / "cuda-wheels.yaml")
LOCK = REPO / "playbooks" / "locks" / "cuda-13.0-wheels.txt"
VENV = "/home/admin/.gpuprov/venv"
COMMON = ["--recipe", WHEELS, "--var", "cuda_version=13.0", "--var", "with_torch=false"]
# Every distribution of a venv with its version and the digest of its RECORD as installed.
LIST = ("import hashlib, importlib.metadata as m\n"
        "for d in sorted(m.distributions(), key=lambda d: d.metadata['Name'].lower()):\n"
        "    print(d.metadata['Name'], d.version)\n")


def _json(path):
    return json.loads(path.read_text())["hosts"]


def packages(sandbox_hosts, host: str, venv: str = VENV) -> list[str]:
    rc, out, err = sandbox_hosts.run(host, f"{venv}/bin/python - <<'EOF'\n{LIST}EOF")
    assert rc == 0, err
    return out.splitlines()


def test_two_hosts_from_one_lock_have_identical_packages_then_drift_is_flagged(sandbox_hosts, work):
    inv = str(sandbox_hosts.inventory)
    first = invoke("provision", "--host", "sandbox1,sandbox2", "--inventory", inv, *COMMON,
                   "--no-validate", "--json", str(work / "1.json"), cwd=work, timeout=1200)
    hosts = _json(work / "1.json")
    assert first.rc == 0, first.out + first.err
    assert all(h["failed"] == 0 for h in hosts.values())
    one, two = packages(sandbox_hosts, "sandbox1"), packages(sandbox_hosts, "sandbox2")
    assert one == two
    locked = {f"{m.group(1)} {m.group(2)}" for m in re.finditer(r"^([\w.-]+)==(\S+)", LOCK.read_text(), re.M)}
    assert locked <= set(one), locked - set(one)
    # Every provision leaves the host's stack manifest beside its run log.
    for name in ("sandbox1", "sandbox2"):
        run = max((work / "logs" / name).iterdir())
        manifest = json.loads((run / "stack.json").read_text())
        assert {p["name"]: p["version"] for p in manifest["packages"]}["nvidia-cuda-runtime"] \
            == "13.0.96"

    # Converged: the lock is installed, nothing runs (no pip check any more).
    again = invoke("provision", "--host", "sandbox1,sandbox2", "--inventory", inv, *COMMON,
                   "--no-validate", "--json", str(work / "2.json"), cwd=work, timeout=300)
    assert again.rc == 0, again.out + again.err
    assert all(h["changed"] == 0 for h in _json(work / "2.json").values())

    # A package changed by hand on sandbox2: report names it, the host and both versions.
    rc, _, err = sandbox_hosts.run(
        "sandbox2", f"{VENV}/bin/python -m pip install -q --no-deps 'nvidia-nvvm==13.0.48'",
        timeout=600)
    assert rc == 0, err
    again = invoke("provision", "--host", "sandbox2", "--inventory", inv, *COMMON,
                   "--no-validate", "--tags", "nothing", cwd=work, timeout=300)
    report = invoke("report", "--logs", str(work / "logs"), "--out", str(work / "report"),
                    cwd=work, timeout=300)
    assert report.rc == 0, report.out + report.err
    flags = json.loads((work / "report" / "flags.json").read_text())
    drift = [f for f in flags["drift"] if f["host"] == "sandbox2"]
    assert {"host": "sandbox2", "what": "package", "name": "nvidia-nvvm", "value": "13.0.48",
            "majority": "13.0.88"}.items() <= drift[0].items(), drift
    assert not [f for f in flags["drift"] if f["host"] == "sandbox1"]
    assert "DRIFT sandbox2 package nvidia-nvvm: 13.0.48 (majority 13.0.88" in report.out
    assert "nvidia-nvvm" in (work / "report" / "report.html").read_text()


def test_a_lock_with_an_altered_hash_installs_nothing(sandbox_hosts, work):
    recipes = work / "recipes"
    shutil.copytree(REPO / "playbooks", recipes)
    lock = recipes / "locks" / "cuda-13.0-wheels.txt"
    text = lock.read_text()
    # Every hash of nvidia-cuda-runtime (one per platform's wheel) altered in one digit.
    block = re.search(r"^nvidia-cuda-runtime==.*?(?=^\S)", text, re.M | re.S)
    assert block
    altered = re.sub(r"sha256:(\w)", lambda m: "sha256:" + ("0" if m.group(1) != "0" else "1"),
                     block.group(0))
    lock.write_text(text.replace(block.group(0), altered))
    venv = "/home/admin/.gpuprov/venv-altered"
    result = invoke("provision", "--host", "sandbox1", "--inventory", str(sandbox_hosts.inventory),
                    "--recipe", str(recipes / "cuda-wheels.yaml"), "--var", "cuda_version=13.0",
                    "--var", "with_torch=false", "--var", f"venv={venv}", "--no-validate",
                    "--json", str(work / "a.json"), cwd=work, timeout=900)
    assert result.rc == 1, result.out + result.err
    step = next(s for s in _json(work / "a.json")["sandbox1"]["steps"] if s["status"] == "failed")
    assert "(locked)" in step["name"]
    assert "hash mismatch for nvidia-cuda-runtime==13.0.96" in step["message"], step["message"]
    assert "nothing was installed" in step["message"]
    # Nothing else got in: the venv holds only what `python -m venv` put there.
    names = {line.split()[0].lower() for line in packages(sandbox_hosts, "sandbox1", venv)}
    assert names <= {"pip", "setuptools", "wheel"}, names
