"""What a command's process imports is what it uses (issue 42, "Start-up"): a no-op
`gpuprov provision`, and `provision --list-hosts`, import neither fabric, bundle, report,
evidence nor matplotlib, nor a step kind its recipe does not name, nor a scheduler its
inventory does not name (remote/ground/rows.py). Each case is a real `gpuprov`
process; the modules it held at exit (sys.modules) are what is checked, so a later import at
the top of a command's module cannot pull them back unseen. Timings are bench/'s (not here).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, write_yaml
from tests.sshd import SshdFarm

# what a provision without --bundle, without validation, never uses
NEVER = ("remote.fabric", "remote.bundle", "remote.report", "remote.evidence", "matplotlib")
# what a recipe of `file` and `shell` steps, on an inventory without a `slurm:` host, never uses
UNUSED_ROWS = ("remote.kinds.apt", "remote.kinds.pip", "remote.kinds.pip_lock", "remote.kinds.deb",
               "remote.kinds.reboot", "remote.kinds.template", "remote.kinds.assertion",
               "remote.scheduler.slurm.row", "remote.scheduler.slurm.cluster",
               "remote.scheduler.slurm.job", "remote.scheduler.slurm.settings")
DUMP = ("import atexit, os, sys\n"
        "atexit.register(lambda: open(os.environ['MODULES_OUT'], 'w').write('\\n'.join(sys.modules)))\n"
        "from remote.program import main\n"
        "main()\n")


def _modules(work: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = work / "modules.txt"
    env = dict(os.environ, PYTHONPATH=str(REPO), MODULES_OUT=str(out))
    proc = subprocess.run([sys.executable, "-c", DUMP, *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc, set(out.read_text().split())


def _loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.fixture(scope="module")
def one_host():
    if os.geteuid() != 0:
        pytest.fail("the SSH tests start sshd for a dedicated user and must run as root")
    farm = SshdFarm(1, first=74)
    yield farm
    farm.close()


def test_list_hosts_imports_no_part_it_does_not_use(work):
    inventory = write_yaml(work / "inventory.yaml", {"hosts": {"h1": {"address": "127.0.0.9"}}})
    recipe = write_yaml(work / "r.yaml", {"steps": [{"name": "x", "shell": "true"}]})
    proc, modules = _modules(work, "provision", "--host", "all", "--inventory", str(inventory),
                             "--recipe", str(recipe), "--list-hosts")
    assert proc.returncode == 0 and proc.stdout == "  hosts (1):\n    h1\n", proc.stdout + proc.stderr
    assert _loaded(modules, NEVER + UNUSED_ROWS) == []


def test_a_no_op_provision_imports_no_part_it_does_not_use(one_host, work):
    inventory = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(one_host.known_hosts)],
        "hosts": {"h1": one_host.host_entry(one_host.addresses[0])}})
    recipe = write_yaml(work / "r.yaml", {"steps": [
        {"name": "file", "file": {"path": f"{work}/{{{{ host }}}}-f", "content": "x\n"}},
        {"name": "probe", "shell": "true", "changed_when": False}]})
    args = ("provision", "--host", "all", "--inventory", str(inventory), "--recipe", str(recipe),
            "--no-validate", "--json", str(work / "out.json"))
    first, _ = _modules(work, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    again, modules = _modules(work, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((work / "out.json").read_text())["hosts"]["h1"]["changed"] == 0
    assert "paramiko" in modules  # it did reach the host
    assert {"remote.kinds.file", "remote.kinds.shell"} <= modules  # the kinds it uses
    assert _loaded(modules, NEVER + UNUSED_ROWS) == []
