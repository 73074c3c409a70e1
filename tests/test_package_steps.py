"""pip and apt step kinds.

pip runs for real over SSH into a virtual environment in a scratch folder. apt never installs on
this machine (machine safety): here its real probe reads this machine's dpkg database and the
plan is checked in --check mode; real installs are tested inside sandbox hosts. What apt and
pip plan for a given probe output is in their tables (tests/kinds/apt, tests/kinds/pip).
"""
from __future__ import annotations

import subprocess

from tests.conftest import write_yaml


def test_pip_creates_venv_installs_then_is_satisfied(farm, work, inventory, provision):
    venv = work / "venv"
    rec = write_yaml(work / "r.yaml", {"steps": [
        {"name": "six", "pip": {"packages": ["six>=1.16"], "venv": str(venv)}}]})
    first = provision("h1", rec, inventory())
    assert first.rc == 0, first.out
    assert first.statuses("h1") == ["changed"]
    version = subprocess.run([str(venv / "bin/python"), "-c", "import six; print(six.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith("1.")
    assert provision("h1", rec, inventory()).statuses("h1") == ["ok"]
    # A requirement the installed version does not meet is planned (shown in check mode).
    strict = write_yaml(work / "r2.yaml", {"steps": [
        {"pip": {"packages": [f"six!={version}"], "venv": str(venv)}}]})
    planned = provision("h1", strict, inventory(), check=True)
    assert planned.statuses("h1") == ["changed"]
    assert f"pip install --disable-pip-version-check --no-input -q 'six!={version}'" in planned.out


def test_pip_absent_removes_only_installed(farm, work, inventory, provision):
    venv = work / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin/pip"), "install", "-q", "iniconfig"], check=True)
    subprocess.run(["chmod", "-R", "a+rwX", str(venv)], check=True)
    rec = write_yaml(work / "r.yaml", {"steps": [
        {"pip": {"packages": ["iniconfig", "six"], "venv": str(venv), "state": "absent"}}]})
    result = provision("h1", rec, inventory())
    assert result.statuses("h1") == ["changed"]
    assert subprocess.run([str(venv / "bin/python"), "-c", "import iniconfig"]).returncode != 0
    assert provision("h1", rec, inventory()).statuses("h1") == ["ok"]


def _local(work):
    return write_yaml(work / "inv.yaml", {"hosts": {"localhost": {"connection": "local"}}})


def test_apt_installed_package_is_ok(work, provision):
    rec = write_yaml(work / "r.yaml", {"steps": [
        {"apt": {"packages": ["coreutils", "dpkg"], "update_cache": True}}]})
    result = provision("localhost", rec, _local(work), check=True)
    assert result.statuses("localhost") == ["ok"], result.out


def test_apt_plans_missing_packages_pins_and_holds(work, provision):
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "coreutils"],
                               capture_output=True, text=True, check=True).stdout
    rec = write_yaml(work / "r.yaml", {"steps": [
        {"name": "missing", "apt": {"packages": ["gpuprov-no-such-package"], "update_cache": True,
                                    "cache_valid_time": 1}},
        {"name": "pinned", "apt": {"packages": ["coreutils=0.0.*"]}},
        {"name": "same pin", "apt": {"packages": [f"coreutils={installed}"]}},
        {"name": "hold", "apt": {"packages": ["coreutils"], "hold": True}},
    ]})
    result = provision("localhost", rec, _local(work), check=True)
    assert result.statuses("localhost") == ["changed", "changed", "ok", "changed"], result.out
    out = result.out
    assert "$ apt-get update" in out, "a stale cache is refreshed before installing"
    assert "apt-get install gpuprov-no-such-package" in out
    assert "apt-get install coreutils=0.0.*" in out
    assert "apt-mark hold coreutils" in out
    held = subprocess.run(["apt-mark", "showhold"], capture_output=True, text=True).stdout
    assert "coreutils" not in held, "check mode changed nothing"
