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
# Every distribution of a venv with its version.
LIST = ("import importlib.metadata as m\n"
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
    names = sandbox_hosts.names[:3]  # GPUPROV_SANDBOX_HOSTS=3 gives the drift a majority
    first = invoke("provision", "--host", ",".join(names), "--inventory", inv, *COMMON,
                   "--no-validate", "--json", str(work / "1.json"), cwd=work, timeout=1200)
    hosts = _json(work / "1.json")
    assert first.rc == 0, first.out + first.err
    assert all(h["failed"] == 0 for h in hosts.values())
    one = packages(sandbox_hosts, "sandbox1")
    assert all(packages(sandbox_hosts, name) == one for name in names[1:])
    locked = {f"{m.group(1)} {m.group(2)}" for m in re.finditer(r"^([\w.-]+)==(\S+)", LOCK.read_text(), re.M)}
    assert locked <= set(one), locked - set(one)
    # Every provision leaves the host's stack manifest beside its run log.
    manifests = []
    for name in names:
        run = max((work / "logs" / name).iterdir())
        manifests.append(json.loads((run / "stack.json").read_text()))
    assert {p["name"]: p["version"] for p in manifests[0]["packages"]}["nvidia-cuda-runtime"] \
        == "13.0.96"
    # The same files too: each package's RECORD digest is the same on every host.
    assert all(m["packages"] == manifests[0]["packages"] for m in manifests[1:])

    # Converged: the lock is installed, nothing runs (no pip check any more).
    again = invoke("provision", "--host", ",".join(names), "--inventory", inv, *COMMON,
                   "--no-validate", "--json", str(work / "2.json"), cwd=work, timeout=300)
    assert again.rc == 0, again.out + again.err
    assert all(h["changed"] == 0 for h in _json(work / "2.json").values())

    # A package changed by hand on sandbox2; `validate` records each host's stack again, and
    # report names the host, the package and both versions.
    rc, _, err = sandbox_hosts.run(  # the venv has no pip: uv, which gpuprov put beside it
        "sandbox2", f"{VENV}-uv/uv pip install -q --system-certs --python {VENV}/bin/python "
                    "--no-deps 'nvidia-nvvm==13.0.48'", timeout=600)
    assert rc == 0, err
    invoke("validate", "--host", ",".join(names), "--inventory", inv, cwd=work, timeout=900)
    report = invoke("report", "--logs", str(work / "logs"), "--out", str(work / "report"),
                    cwd=work, timeout=300)
    assert report.rc == 0, report.out + report.err
    flags = json.loads((work / "report" / "flags.json").read_text())
    drift = {f["host"]: f for f in flags["drift"] if f["name"] == "nvidia-nvvm"}
    assert drift["sandbox2"]["kind"] == "drift" and drift["sandbox2"]["value"] == "13.0.48"
    assert drift["sandbox2"]["others"] == ["13.0.88"]
    if len(names) > 2:  # a majority: only the host changed by hand is flagged
        assert set(drift) == {"sandbox2"}
        assert drift["sandbox2"]["majority"] == "13.0.88"
        assert "DRIFT sandbox2 package nvidia-nvvm: 13.0.48 (majority 13.0.88" in report.out
    else:  # two hosts that differ: no majority, each is flagged with the other's value
        assert set(drift) == {"sandbox1", "sandbox2"}
        assert "DRIFT sandbox2 package nvidia-nvvm: 13.0.48 (no majority: 13.0.88" in report.out
    assert [f for f in flags["drift"] if f["what"] != "package" or f["name"] != "nvidia-nvvm"] == []
    html = (work / "report" / "report.html").read_text()
    assert "DRIFT sandbox2 package nvidia-nvvm: 13.0.48" in html


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
    # Nothing got in: the venv (made by uv, without pip) holds no package at all.
    assert packages(sandbox_hosts, "sandbox1", venv) == []
