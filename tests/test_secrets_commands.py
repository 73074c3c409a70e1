"""Every command that touches hosts hides the inventory's secrets in what it shows and writes
(issue 42: one run assembly seeds the redactor with every secret the inventory and vars hold).

The hosts are real sshd servers on loopback (tests/sshd.py) whose every session runs one
hostile script (sshd's ForceCommand, sshd_config(5)): it prints the value of a var the
inventory marks secret, as a host's shell profile that echoes a token would, and fails. Each
command is run as the user runs it (`gpuprov ...`, a real process); its terminal output and
every file it left must show `***` and never the value.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, write_yaml
from tests.sshd import SshdFarm, shared_tmp

SECRET = "vault-token-4711-xyz"
HOSTILE = f"""#!/bin/sh
# every session of this host: it says the secret back, then fails
echo "profile: token={SECRET} loaded" >&2
echo "token={SECRET}"
exit 1
"""
# a host whose tools say the secret: its name (facts), and iperf3's refusal (fabric)
TOOLS = {
    "uname": f"""#!/bin/sh
if [ "$1" = -n ]; then echo "{SECRET}"; else exec /bin/uname "$@"; fi
""",
    "iperf3": f"""#!/bin/sh
case "$*" in *--version*|-v) echo "iperf 3.12 (cJSON 1.7.15)"; exit 0;; esac
case "$*" in *-s*) sleep 2; exit 0;; esac
echo '{{"error": "unable to connect to server: token={SECRET}"}}'
exit 1
""",
}
FIRST = 70  # 127.0.0.70..73: apart from the other SSH tests' servers


@pytest.fixture(scope="module")
def hostile_farm():
    if os.geteuid() != 0:
        pytest.fail("the SSH tests start sshd for a dedicated user and must run as root")
    folder = shared_tmp("gpuprov-hostile-secret-")
    for name, text in {"session": HOSTILE, **TOOLS}.items():
        (folder / name).write_text(text)
        os.chmod(folder / name, 0o755)
    farm = SshdFarm(4, first=FIRST)
    for n, address in enumerate(farm.addresses):  # started plain; again, hostile
        farm.stop(address)
        farm.options[address] = ({"ForceCommand": str(folder / "session")} if n < 2 else
                                 {"SetEnv": f"PATH={folder}:/usr/local/bin:/usr/bin:/bin"})
        farm.start(address)
    yield farm
    farm.close()
    shutil.rmtree(folder, ignore_errors=True)


def _inventory(farm: SshdFarm, work: Path, hostile: str) -> Path:
    """Two hosts, whose every session says the secret (`hostile` "session") or whose tools do
    ("tools"); the secret is a host var marked secret (not given on the command line)."""
    addresses = farm.addresses[:2] if hostile == "session" else farm.addresses[2:]
    return write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "secrets": ["vault_token"],
        "hosts": {f"h{n}": farm.host_entry(address, vars={"vault_token": SECRET})
                  for n, address in enumerate(addresses)}})


def _gpuprov(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("GPUPROV_BECOME_PASSWORD", None)
    return subprocess.run([sys.executable, "-c", "from remote.program import main; main()", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


# (command, which hosts, its options)
COMMANDS = [
    ("provision", "session", ["--recipe", "{work}/r.yaml", "--json", "{work}/out.json"]),
    ("validate", "session", ["--json", "{work}/out.json"]),
    ("logs", "session", []),
    ("facts", "session", ["--json", "{work}/out.json"]),
    ("facts", "tools", ["--json", "{work}/out.json"]),
    ("evidence", "session", []),
    ("fabric", "session", ["--json", "{work}/out.json"]),
    ("fabric", "tools", ["--json", "{work}/out.json", "--var", "fabric_seconds=1"]),
]


@pytest.mark.parametrize("command, hostile, options", COMMANDS,
                         ids=[f"{c}-{h}" for c, h, _ in COMMANDS])
def test_each_command_that_touches_hosts_hides_an_inventory_secret(hostile_farm, work, command,
                                                                   hostile, options):
    inventory = _inventory(hostile_farm, work, hostile)
    write_yaml(work / "r.yaml", {"steps": [{"name": "nothing", "shell": "true"}]})
    args = [a.format(work=work) for a in options]
    proc = _gpuprov(command, "--host", "all", "--inventory", str(inventory), *args, cwd=work)
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said and proc.returncode in (0, 1, 3, 4), said
    inventory.unlink()  # the one place the secret is written on purpose
    texts = {"terminal": said}
    for path in work.rglob("*"):
        if path.is_file():
            texts[str(path.relative_to(work))] = path.read_text(errors="replace")
    for name, text in texts.items():
        assert SECRET not in text, f"{command}: the secret leaked into {name}:\n{text}"
