"""Installing as a new user does: the README's install step on a fresh Debian 12 (a sandbox
host: the distribution's own /usr/bin/python3, PEP 668 in force, no python3-venv), as root and
as a sudo user, then `gpuprov` in a new login shell from another folder; and `pip install .`
into any venv gives a working `gpuprov` (recipes and tasks shipped as package data)."""
from __future__ import annotations

import concurrent.futures
import io
import os
import re
import subprocess
import sys
import tarfile
import time
import traceback

import pytest

from tests.conftest import REPO
from tests.sandbox_fixture import run, sandbox_hosts  # noqa: F401

TINY_RECIPE = "name: tiny\nsteps:\n  - name: say hi\n    shell: echo hi\n"
LOCAL_INVENTORY = "hosts:\n  localhost: {connection: local}\n"


def _tree_tarball() -> bytes:
    """The working tree as a user's clone has it: tracked and untracked-but-not-ignored files."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in filter(None, names):
            path = REPO / name.decode()
            if path.exists():
                tar.add(path, arcname=f"gpuprov/{name.decode()}", recursive=False)
    return buffer.getvalue()


def _run_with_input(client, command: str, data: bytes, timeout: float = 60.0):
    stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
    stdin.write(data)
    stdin.channel.shutdown_write()
    out, err = stdout.read().decode(errors="replace"), stderr.read().decode(errors="replace")
    return stdout.channel.recv_exit_status(), out, err


@pytest.mark.slow
@pytest.mark.root
def test_fresh_debian_installs_and_runs_gpuprov_as_root_and_as_a_sudo_user(sandbox_hosts):  # noqa: F811
    """root on sandbox1 and the sudo user admin on sandbox2, side by side: two hosts, nothing
    shared but this machine's package caches, so each install makes every check of its own
    (`_install_and_run`) in half the wall time of one after the other. Each failure names its
    user@host, with its traceback."""
    tarball = _tree_tarball()
    cases = [("root", "sandbox1"), ("admin", "sandbox2")]
    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        futures = [(f"{user}@{host}", pool.submit(_install_and_run, sandbox_hosts, user, host, tarball))
                   for user, host in cases]
    failed = []
    for where, future in futures:
        error = future.exception()
        if error is not None:
            failed.append(f"{where}:\n" + "".join(traceback.format_exception(type(error), error, error.__traceback__)))
    assert not failed, "\n".join(failed)


def _install_and_run(sandbox_hosts, user: str, host: str, tarball: bytes) -> None:  # noqa: F811
    """The README's install step as `user` on `host`, then gpuprov in a new login shell."""
    # As a fresh machine: the distribution's python without pip or venv support.
    rc, out, err = sandbox_hosts.run(host, "apt-get purge -y -q python3-venv python3.11-venv "
                                     "python3-pip && apt-get autoremove -y -q", user="root",
                                     timeout=300)
    assert rc == 0, out + err
    client = sandbox_hosts.connect(host, user=user)
    try:
        rc, out, err = run(client, "/usr/bin/python3 -m pip --version; "
                                   "ls /usr/lib/python3*/EXTERNALLY-MANAGED")
        assert "No module named pip" in err and "EXTERNALLY-MANAGED" in out
        rc, out, err = _run_with_input(client, "rm -rf ~/gpuprov && tar -xzf - -C ~",
                                       tarball)
        assert rc == 0, err
        started = time.monotonic()
        rc, out, err = run(client, "cd ~/gpuprov && .ci/setup", timeout=900)
        took = time.monotonic() - started
        assert rc == 0, out + err
        apt_mb = re.search(r"After this operation, ([0-9.]+ [kM]B) of additional", out)
        rc, venv_mb, _ = run(client, "du -sm ~/.local/share/gpuprov/venv | cut -f1")
        print(f"{user}@{host}: .ci/setup took {took:.0f} s; installed: Debian packages "
              f"{apt_mb.group(1) if apt_mb else 'none'}, venv {venv_mb.strip()} MB")
        assert "Next: open a new login shell" in out and "gpuprov --help" in out

        rc, out, err = run(client, "bash -lc 'cd / && gpuprov --help'")
        assert rc == 0 and "provision" in out and "sandbox" in out, out + err
        rc, out, err = run(client, f"mkdir -p /tmp/try-{user} && cd /tmp/try-{user} && "
                                   f"printf '{LOCAL_INVENTORY}' > inv.yaml && "
                                   f"printf '{TINY_RECIPE}' > tiny.yaml")
        assert rc == 0, err
        rc, out, err = run(client, f"bash -lc 'cd /tmp/try-{user} && gpuprov provision --host "
                                   "localhost --inventory inv.yaml --recipe tiny.yaml --check "
                                   "--no-validate'", timeout=120)
        assert rc == 0, out + err
        assert "localhost would change say hi" in out
        # The README's other way: `invoke TASK` in the clone, in a new login shell too.
        rc, out, err = run(client, f"bash -lc 'cd ~/gpuprov && invoke provision --host "
                                   f"localhost -i /tmp/try-{user}/inv.yaml --recipe "
                                   f"/tmp/try-{user}/tiny.yaml -C --no-validate'", timeout=120)
        assert rc == 0, out + err
        assert "localhost would change say hi" in out

        # Again: safe to repeat, nothing recreated.
        rc, out, err = run(client, "cd ~/gpuprov && .ci/setup", timeout=900)
        assert rc == 0 and "creating the virtual environment" not in out, out + err
    finally:
        run(client, "rm -rf ~/gpuprov ~/.local/share/gpuprov /tmp/try-*; "
                    "rm -f ~/.local/bin/gpuprov /usr/local/bin/gpuprov ~/.local/bin/invoke "
                    "/usr/local/bin/invoke 2>/dev/null; true")
        client.close()


@pytest.mark.slow
def test_pip_install_into_any_venv_ships_recipes_and_tasks(work):
    """A wheel, installed into a venv (its dependencies taken from this python), runs from `/`
    with nothing of the clone on the path: the shipped recipe by name, help, the tasks."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(work / "dist"), str(REPO)], check=True, env=env, cwd=work)
    wheel = next((work / "dist").glob("gpuprov-*.whl"))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    str(wheel)], check=True, env=env, cwd=work)
    gpuprov = str(venv / "bin" / "gpuprov")
    (work / "inv.yaml").write_text(LOCAL_INVENTORY)
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import remote; print(remote.__file__)"],
                           env=env, cwd="/", capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)), where
    result = subprocess.run([gpuprov, "provision", "--help"], env=env, cwd="/",
                            capture_output=True, text=True)
    assert result.returncode == 0 and "--inventory" in result.stdout
    result = subprocess.run([gpuprov, "provision", "--host", "localhost", "--inventory",
                             str(work / "inv.yaml"), "--recipe", "cuda-wheels.yaml", "--check",
                             "--no-validate"], env=env, cwd="/", capture_output=True, text=True,
                            timeout=120)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "CUDA from wheels: 1 host(s), check" in result.stdout
    # The fleet cache's recipe copies a file shipped beside the recipes (playbooks/files/).
    result = subprocess.run([gpuprov, "provision", "--host", "localhost", "--inventory",
                             str(work / "inv.yaml"), "--recipe", "cache.yaml", "--check",
                             "--no-validate"], env=env, cwd="/", capture_output=True, text=True,
                            timeout=120)
    assert "Fleet cache: 1 host(s), check" in result.stdout, result.stdout + result.stderr
    assert "gpuprov-cache.sh" not in result.stderr
