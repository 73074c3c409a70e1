"""Secrets kept: values of the inventory's `secrets:` vars and the become password never appear in
the terminal, provision.log, --json, error messages or --check plans (they read ***). Plus
known_hosts written atomically under concurrency, and pulled logs written with the user's umask.

This machine has no sudo, and installing it is not allowed, so the become password is checked
against a stand-in: `sudo` on the test servers' PATH (sshd's SetEnv) is a small sh script that
prompts, reads the password from stdin as sudo -S does, and runs the command when it matches.
It is deliberately hostile: on a wrong password it echoes the password back on stderr. That
script is the only thing not real here; SSH, sshd and the commands are.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, write_yaml
from tests.sshd import SshdFarm, shared_tmp

TOKEN = "hf_SECRETtoken-4242"
DB_PASS = "db-pass-7777"
PASSWORD = "become-pw-9191"

FAKE_SUDO = r"""#!/bin/sh
# Stand-in for sudo (see tests/test_secrets.py): -H -S -p PROMPT | -n, then the command.
prompt="[sudo] password: "; nonint=
while [ $# -gt 0 ]; do
  case "$1" in
    -H|-S) shift;;
    -n) nonint=1; shift;;
    -p) prompt=$2; shift 2;;
    --) shift; break;;
    *) break;;
  esac
done
if [ -n "$nonint" ]; then echo "sudo: a password is required" >&2; exit 1; fi
for attempt in 1 2; do
  printf '%s' "$prompt" >&2
  IFS= read -r pw || exit 1
  if [ "$pw" = "$(cat __EXPECTED__)" ]; then exec "$@"; fi
  echo "Sorry, try again. (you typed '$pw')" >&2
done
echo "sudo: 2 incorrect password attempts" >&2
exit 1
"""


class _SudoFarm(SshdFarm):
    """Eight sshd servers (127.0.0.50-57) whose sessions find the stand-in sudo first."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        super().__init__(8, first=50)

    def config_for(self, address: str) -> Path:
        path = super().config_for(address)
        path.write_text(path.read_text() + f"SetEnv PATH={self.bin_dir}:/usr/bin:/bin\n")
        return path


@pytest.fixture(scope="module")
def sudo_farm():
    if os.geteuid() != 0:
        pytest.fail("the SSH tests start sshd for a dedicated user and must run as root")
    bin_dir = shared_tmp("gpuprov-fakesudo-")
    expected = bin_dir / "expected"
    expected.write_text(PASSWORD + "\n")
    os.chmod(expected, 0o644)
    sudo = bin_dir / "sudo"
    sudo.write_text(FAKE_SUDO.replace("__EXPECTED__", str(expected)))
    os.chmod(sudo, 0o755)
    farm = _SudoFarm(bin_dir)
    yield farm
    farm.close()
    shutil.rmtree(bin_dir, ignore_errors=True)


def _invoke(*args, cwd, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("GPUPROV_BECOME_PASSWORD", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _everything_written(work: Path, *procs) -> dict:
    """Every text a run left: its terminal output and every file under `work`."""
    texts = {}
    for n, proc in enumerate(procs):
        texts[f"run{n}.stdout"] = proc.stdout
        texts[f"run{n}.stderr"] = proc.stderr
    for path in work.rglob("*"):
        if path.is_file() and path.name not in ("inventory.yaml", "r.yaml", "args"):
            texts[str(path.relative_to(work))] = path.read_text(errors="replace")
    return texts


def test_secrets_never_appear_in_any_output(sudo_farm, work):
    farm = sudo_farm
    inv = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "secrets": ["hf_token", "db_pass"],
        "vars": {"hf_token": TOKEN},
        "hosts": {"h1": farm.host_entry(farm.addresses[0]),
                  "h2": farm.host_entry(farm.addresses[1])}})
    rec = write_yaml(work / "r.yaml", {"name": "secrets", "steps": [
        {"name": "login with {{ hf_token }}",
         "shell": f"echo {{{{ hf_token }}}} {{{{ db_pass }}}} > {work}/{{{{ host }}}}.tok"},
        {"name": "print it", "shell": "echo token={{ hf_token }}; echo pass={{ db_pass }} >&2",
         "changed_when": False},
        {"name": "as root", "shell": f"echo {{{{ hf_token }}}} > {work}/{{{{ host }}}}.root",
         "become": True},
        {"name": "write it", "file": {"path": f"{work}/{{{{ host }}}}.conf",
                                      "content": "token={{ hf_token }}\n", "mode": "0600"}},
        {"name": "check it", "assert": {"that": ["host == 'h1'"],
                                        "msg": "h2 has {{ hf_token }} and {{ db_pass }}"}},
        {"name": "fail with it", "shell": "echo failed: {{ hf_token }} {{ db_pass }} >&2; exit 3"},
    ]})
    common = ("--host", "all", "--inventory", str(inv), "--recipe", str(rec), "--no-validate",
              "--var", f"db_pass={DB_PASS}")
    env = {"GPUPROV_BECOME_PASSWORD": PASSWORD}
    plan = _invoke("provision", *common, "--check", "--json", str(work / "plan.json"), cwd=work,
                   env_extra=env)
    run = _invoke("provision", *common, "--json", str(work / "run.json"), cwd=work, env_extra=env)
    # the run did use them: the values reached the hosts, through sudo for the root step
    assert (work / "h1.tok").read_text() == f"{TOKEN} {DB_PASS}\n"
    assert (work / "h1.root").read_text() == f"{TOKEN}\n"
    assert run.returncode == 1, run.stdout + run.stderr
    data = json.loads((work / "run.json").read_text())["hosts"]
    assert [s["status"] for s in data["h1"]["steps"]] == \
        ["changed", "ok", "changed", "changed", "ok", "failed"]
    assert data["h1"]["steps"][-1]["message"] == "rc=3: failed: *** ***"
    assert data["h2"]["steps"][4]["message"] == "h2 has *** and ***"
    assert "would change" in plan.stdout and "***" in plan.stdout
    for path in (work / "h1.tok", work / "h1.root", work / "h1.conf", work / "h2.tok",
                 work / "h2.root", work / "h2.conf"):
        path.unlink()  # what the hosts were given, not what the tool wrote
    texts = _everything_written(work, plan, run)
    assert any(name.endswith("provision.log") for name in texts)
    for name, text in texts.items():
        for secret in (TOKEN, DB_PASS, PASSWORD):
            assert secret not in text, f"{secret} leaked into {name}"
    assert "***" in "".join(t for n, t in texts.items() if n.endswith("provision.log"))


def test_wrong_become_password_is_not_echoed(sudo_farm, work):
    """sudo (here the hostile stand-in) answers a wrong password by printing it back: the
    step fails with the reason, and the password appears nowhere."""
    farm = sudo_farm
    wrong = "wrong-pw-5151"
    inv = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "hosts": {"h1": farm.host_entry(farm.addresses[2])}})
    rec = write_yaml(work / "r.yaml", {"steps": [
        {"name": "as root", "shell": f"touch {work}/root", "become": True}]})
    run = _invoke("provision", "--host", "all", "--inventory", str(inv), "--recipe", str(rec),
                  "--no-validate", "--json", str(work / "run.json"), cwd=work,
                  env_extra={"GPUPROV_BECOME_PASSWORD": wrong})
    assert run.returncode == 1
    step = json.loads((work / "run.json").read_text())["hosts"]["h1"]["steps"][0]
    assert step["status"] == "failed"
    assert "rejected the become password" in step["message"]
    assert not (work / "root").exists()
    for name, text in _everything_written(work, run).items():
        assert wrong not in text, f"the password leaked into {name}"


def test_an_ansible_become_password_reaches_sudo_and_nowhere_else(sudo_farm, work):
    """An Ansible inventory's `ansible_become_password` (the sudo become plugin's variable) is
    the host's sudo password: the become step passes with none given to the run, and the
    password shows nowhere but in the inventory."""
    farm = sudo_farm
    home = work / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(farm.known_hosts, home / ".ssh" / "known_hosts")
    inv = work / "hosts"
    inv.write_text(f"[all]\nh1 ansible_host={farm.addresses[3]}\n\n[gpus]\nh1\n\n[gpus:vars]\n"
                   f"ansible_port={farm.port}\nansible_user={farm.user}\n"
                   f"ansible_ssh_private_key_file={farm.key}\nansible_become=yes\n"
                   f"ansible_become_password={PASSWORD}\n")
    rec = write_yaml(work / "r.yaml", {"steps": [{"name": "as root", "shell": f"touch {work}/root"}]})
    run = _invoke("provision", "--host", "gpus", "--inventory", str(inv), "--recipe", str(rec),
                  "--no-validate", "--json", str(work / "run.json"), cwd=work,
                  env_extra={"HOME": str(home)})
    assert run.returncode == 0, run.stdout + run.stderr
    assert (work / "root").exists()
    inv.unlink()
    for name, text in _everything_written(work, run).items():
        assert PASSWORD not in text, f"the password leaked into {name}"


def test_known_hosts_accept_new_under_concurrency(sudo_farm, work):
    """8 hosts met for the first time at once (accept-new): the file ends with exactly their 8
    keys, each on a well-formed line, none lost to a race."""
    farm = sudo_farm
    expected = set(farm.known_hosts.read_text().splitlines())
    assert len(expected) == 8
    for attempt in range(3):
        known = work / f"known_hosts_{attempt}"
        inv = write_yaml(work / "inventory.yaml", {
            "host_key_policy": "accept-new", "known_hosts": [str(known)],
            "hosts": {f"n{i}": farm.host_entry(a) for i, a in enumerate(farm.addresses)}})
        rec = write_yaml(work / "r.yaml", {"steps": [{"shell": "true"}]})
        run = _invoke("provision", "--host", "all", "--inventory", str(inv), "--recipe",
                      str(rec), "--no-validate", "--forks", "8", cwd=work)
        assert run.returncode == 0, run.stdout + run.stderr
        lines = known.read_text().splitlines()
        assert len(lines) == 8, lines
        assert set(lines) == expected
        for line in lines:
            name, key_type, key = line.split(" ")
            assert name.startswith("[127.0.0.") and key_type == "ssh-ed25519" and len(key) > 60
        assert stat.S_IMODE(known.stat().st_mode) == 0o600
        assert not [p for p in work.iterdir() if p.name.startswith(".known_hosts.")], \
            "a temporary file was left behind"


@pytest.mark.parametrize("umask", [0o077, 0o027])
def test_pulled_logs_follow_the_users_umask(work, umask):
    from remote.transport.transfer import pack, publish_pull

    source = work / "remote-run"
    (source / "sub").mkdir(parents=True)
    for name, mode in (("results.json", 0o644), ("validate.log", 0o664), ("run.sh", 0o755),
                       ("sub/trace.json", 0o644)):
        (source / name).write_text("x\n")
        os.chmod(source / name, mode)
    data = pack(source, ".")
    old = os.umask(umask)
    try:
        dest = work / "logs" / "h1" / "20261122T055742.123Z-14af"
        publish_pull(data, dest)
    finally:
        os.umask(old)
    for path in [dest] + list(dest.rglob("*")):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & umask == 0, f"{path.relative_to(work)} is {oct(mode)} under umask {oct(umask)}"


# Run as `nobody` (setpriv): what any local user of a host can do. It reads every process's
# command line, as `ps` does, until the stop file appears (at most 120 s), and reports how many
# times it looked, how often it saw the step's own processes (so it did watch them) and every
# command line holding a secret. The secrets come on its stdin: on its own command line they
# would be a leak of their own.
CMDLINE_WATCHER = r"""
import json, os, sys, time
secrets = sys.stdin.read().split()
stop, markers = sys.argv[1], sys.argv[2:]
me, samples, seen, leaks = os.getpid(), 0, dict.fromkeys(markers, 0), []
deadline = time.monotonic() + 120
while not os.path.exists(stop) and time.monotonic() < deadline:
    samples += 1
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                line = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        for marker in markers:
            seen[marker] += marker in line
        leaks += [line for secret in secrets if secret in line]
    time.sleep(0.003)
print(json.dumps({"uid": os.getuid(), "samples": samples, "seen": seen, "leaks": leaks[:5],
                  "leak_count": len(leaks)}))
"""


@contextlib.contextmanager
def watching_cmdlines(work: Path, secrets: str, *markers: str):
    """While the block runs, the user nobody reads every /proc/*/cmdline (CMDLINE_WATCHER)
    for `secrets` (space-separated) and counts the processes carrying each marker; yields a
    dict that holds what it saw (uid, seen, leak_count...) once the block ends."""
    stop = work / "stop-watching"
    watcher = subprocess.Popen(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3",
         "-c", CMDLINE_WATCHER, str(stop), *markers],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    watched: dict = {}
    try:
        watcher.stdin.write(secrets + "\n")
        watcher.stdin.close()
        yield watched
    finally:
        stop.touch()
        output = watcher.stdout.read()
        watcher.wait(30)
        watched.update(json.loads(output))


def test_secrets_never_reach_a_command_line_that_another_user_reads(farm, inventory, provision,
                                                                     work):
    """While a step with a secret `env:`, one with a token written into its `cmd`, and a pip
    step whose index URLs carry a password and a token run over real SSH, another local user
    (`nobody`) reads every process's command line (/proc/PID/cmdline, what `ps` shows) about
    every 10 ms: the step's own processes are seen, the secrets never. The values still reach
    the command (its environment, its script) and pip (its requests carry them), and the run
    log and terminal show them masked."""
    import base64
    import hashlib
    import time

    from tests.http_stub import serve

    hf_token, index_password, extra_token = "hf_ps-SEEN-3131", "idx-ps-pw-5252", "tok-ps-7373"
    authorizations: list = []

    def index(path, headers):
        authorizations.append((path.split("/")[1], headers.get("Authorization")))
        time.sleep(1.5)  # a slow index: pip waits, its command line stays there to be read
        return 404, "text/plain", b"not here\n"

    server = serve(index)
    port = server.server_address[1]
    inv = inventory({"h1": farm.host_entry(farm.addresses[0])},
                    secrets=["hf_token", "index_password", "extra_token"],
                    vars={"hf_token": hf_token, "index_password": index_password,
                          "extra_token": extra_token})
    rec = write_yaml(work / "r.yaml", {"name": "secrets in env", "steps": [
        {"name": "use the token", "changed_when": False,
         "shell": {"cmd": f"sh -c 'sleep 3' gpuprov-watch-shell; printf %s \"$HF_TOKEN\" | sha256sum"
                          f" > {work}/token.sha",
                   "env": {"HF_TOKEN": "{{ hf_token }}"}}},
        # a token written straight into the command: the script travels on stdin too
        {"name": "token in the command", "changed_when": False,
         "shell": f"tok={{{{ hf_token }}}}; sh -c 'sleep 2' gpuprov-watch-cmd; "
                  f"printf %s \"$tok\" | sha256sum > {work}/cmd-token.sha"},
        {"name": "from a private index", "pip": {
            # Debian's python3 refuses installs into itself (PEP 668), not into a --target
            "packages": ["gpuprov-watch-pip"], "python": "python3",
            "extra_args": ["--target", f"{work}/packages"],
            "index_url": f"http://ci:{{{{ index_password }}}}@127.0.0.1:{port}/main/",
            "extra_index_url": [f"http://{{{{ extra_token }}}}@127.0.0.1:{port}/extra/"]}},
    ]})
    try:
        with watching_cmdlines(work, f"{hf_token} {index_password} {extra_token}", "gpuprov-watch-shell",
                               "gpuprov-watch-cmd", "gpuprov-watch-pip") as watched:
            result = provision(recipe=rec, inventory=inv)
    finally:
        server.shutdown()
        server.server_close()
    # the steps ran, with the values: the command's environment, pip's requests
    assert result.json["hosts"]["h1"]["steps"][0]["status"] == "ok", result.out
    for name in ("token.sha", "cmd-token.sha"):
        assert (work / name).read_text().split()[0] == hashlib.sha256(hf_token.encode()).hexdigest()
    sent = {(where, base64.b64decode(auth.split()[1]).decode()) for where, auth in
            authorizations if auth}
    assert ("main", f"ci:{index_password}") in sent and ("extra", f"{extra_token}:") in sent, \
        authorizations
    # another user watched the steps' processes the whole time and never saw a secret
    assert watched["uid"] == 65534
    assert all(watched["seen"].values()), watched
    assert watched["leak_count"] == 0, watched
    # and the control side still masks them
    texts = _everything_written(work)
    texts.update({"stdout": result.out, "stderr": result.err})
    for name, text in texts.items():
        for secret in (hf_token, index_password, extra_token):
            assert secret not in text, f"{secret} leaked into {name}"
    print(f"nobody read every command line {watched['samples']} times: "
          f"{watched['seen']}, {watched['leak_count']} secrets seen")


def test_lock_index_and_download_urls_never_reach_a_command_line(farm, inventory, provision,
                                                                  work):
    """Issue 31, item 5: `cuda-wheels.yaml` and `pytorch.yaml` give `pip_lock` an
    `index_url` that may carry a password, and a `deb` URL may carry a token. While uv, the uv
    fetcher, pip (where uv cannot be fetched) and curl talk to a slow index over real SSH,
    another local user (`nobody`) reads every process's command line: it sees each of those
    processes, and never a secret. The secrets still reach the index (its requests carry
    them), and the plan, log and terminal show them masked."""
    import base64
    import time

    from tests.http_stub import serve

    index_password, deb_token = "lock-ps-pw-6161", "deb-ps-tok-8181"
    authorizations: list = []

    def index(path, headers):
        authorizations.append((path, headers.get("Authorization")))
        # a slow index: the installers wait, their command lines stay there; curl asks once,
        # so it waits longer, to be read on a busy machine too
        time.sleep(4 if path.startswith("/deb/") else 1.5)
        return 404, "text/plain", b"not here\n"

    server = serve(index)
    port = server.server_address[1]
    locks = work / "locks"
    locks.mkdir()
    shutil.copy(REPO / "tests/kinds/pip_lock/locks/small.txt", locks / "small.txt")
    shutil.copy(REPO / "playbooks/locks/uv.txt", locks / "uv.txt")
    # uv already beside its venv (the real binary, the version uv.txt locks), so this step
    # runs `uv venv` and `uv pip install`; the next one fetches uv, then falls back to pip
    import uv as uv_package
    (work / "gpuprov-watch-uv-uv").mkdir()
    shutil.copy(uv_package.find_uv_bin(), work / "gpuprov-watch-uv-uv" / "uv")
    inv = inventory({"h1": farm.host_entry(farm.addresses[1])},
                    secrets=["index_password", "deb_token"],
                    vars={"index_password": index_password, "deb_token": deb_token})
    index_url = f"http://ci:{{{{ index_password }}}}@127.0.0.1:{port}/main/"
    rec = write_yaml(work / "r.yaml", {"name": "secret index", "steps": [
        {"name": "with uv", "failed_when": False, "pip_lock": {
            "lock": "locks/small.txt", "venv": f"{work}/gpuprov-watch-uv", "installer": "uv",
            "index_url": index_url}},
        {"name": "uv fetched, then pip", "failed_when": False, "pip_lock": {
            "lock": "locks/small.txt", "venv": f"{work}/gpuprov-watch-auto",
            "index_url": index_url}},
        {"name": "a deb", "failed_when": False, "deb": {
            "name": "gpuprov-watch-deb", "sha256": "0" * 64,
            "url": f"http://{{{{ deb_token }}}}@127.0.0.1:{port}/deb/gpuprov-watch.deb"}},
    ]})
    markers = {"uv": "gpuprov-watch-uv/bin/python", "fetcher": "gpuprov-watch-auto-uv",
               "pip": "gpuprov-watch-auto/bin/python -m pip", "curl": "curl -fsSL --retry 3 -o /"}
    try:
        with watching_cmdlines(work, f"{index_password} {deb_token}", *markers.values()) as watched:
            plan = provision(recipe=rec, inventory=inv, check=True)
            result = provision(recipe=rec, inventory=inv)
    finally:
        server.shutdown()
        server.server_close()
    steps = result.json["hosts"]["h1"]["steps"]
    assert [s["name"] for s in steps] == ["with uv", "uv fetched, then pip", "a deb"], result.out
    # another user watched those processes and never saw a secret
    assert watched["uid"] == 65534
    assert all(watched["seen"].values()), watched
    assert watched["leak_count"] == 0, watched
    # every consumer asked the index, with the secret
    sent = {(path.split("/")[1], path.split("/")[2],
             base64.b64decode(auth.split()[1]).decode() if auth else None)
            for path, auth in authorizations}
    assert ("main", "six", f"ci:{index_password}") in sent, authorizations  # uv, pip
    assert ("main", "uv", f"ci:{index_password}") in sent, authorizations   # the uv fetcher
    assert ("deb", "gpuprov-watch.deb", f"{deb_token}:") in sent, authorizations  # curl
    # the plan, the log and the terminal show them masked
    assert "from http://ci:***@127.0.0.1" in plan.out
    for made in work.glob("gpuprov-watch-*"):  # the venvs and uv: what the host made
        shutil.rmtree(made)
    texts = _everything_written(work)
    texts.update({"plan": plan.out + plan.err, "stdout": result.out, "stderr": result.err})
    for name, text in texts.items():
        for secret in (index_password, deb_token):
            assert secret not in text, f"{secret} leaked into {name}"
    print(f"nobody read every command line {watched['samples']} times: "
          f"{watched['seen']}, {watched['leak_count']} secrets seen")


def _one_wheel_index(authorizations: list, delay: float):
    """A PEP 503 index on 127.0.0.1 serving one small wheel (`gpuprovdemo` 1.0) and its
    metadata (PEP 658, so uv needs no HEAD request); each request's Authorization is kept,
    and each answer waits `delay` s. Returns the server and the wheel's sha256."""
    import hashlib
    import io
    import time
    import zipfile

    from tests.http_stub import serve

    metadata = b"Metadata-Version: 2.1\nName: gpuprovdemo\nVersion: 1.0\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr("gpuprovdemo/__init__.py", "")
        wheel.writestr("gpuprovdemo-1.0.dist-info/METADATA", metadata)
        wheel.writestr("gpuprovdemo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\n"
                       "Root-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr("gpuprovdemo-1.0.dist-info/RECORD", "")
    data = buffer.getvalue()
    digest, meta_digest = hashlib.sha256(data).hexdigest(), hashlib.sha256(metadata).hexdigest()
    name = "gpuprovdemo-1.0-py3-none-any.whl"

    def answer(path, headers):
        authorizations.append((path, headers.get("Authorization")))
        time.sleep(delay)
        if path.rstrip("/").endswith("/gpuprovdemo"):
            return 200, "text/html", (f'<a href="/files/{name}#sha256={digest}" '
                                      f'data-dist-info-metadata="sha256={meta_digest}">'
                                      f'{name}</a>').encode()
        if path == f"/files/{name}.metadata":
            return 200, "application/octet-stream", metadata
        if path == f"/files/{name}":
            return 200, "application/octet-stream", data
        return 404, "text/plain", b"not here\n"

    return serve(answer), digest


def test_lock_keeps_an_index_password_off_this_machines_command_lines(work):
    """`gpuprov lock --torch-index` with credentials: uv resolved with the index on its
    command line, where any user of the control machine reads it, and wrote the password
    into the lock (`--emit-index-url`), a file that is committed and shipped. Now `nobody`,
    reading every process's command line while uv runs, sees uv and never the password; the
    index still gets it; the lock names the index without it."""
    import base64

    from remote.lock import LockSpec, compile_lock

    password = "torch-idx-pw-4646"
    authorizations: list = []
    server, digest = _one_wheel_index(authorizations, delay=1.0)
    index = f"http://ci:{password}@127.0.0.1:{server.server_address[1]}/simple"
    try:
        with watching_cmdlines(work, password, "pip compile") as watched:
            spec = LockSpec("torch-demo.txt", ["gpuprovdemo"], index_url=index)
            lock = compile_lock(spec, work / "locks").read_text()
    finally:
        server.shutdown()
        server.server_close()
    assert watched["uid"] == 65534 and watched["seen"]["pip compile"] > 0, watched
    assert watched["leak_count"] == 0, watched
    sent = {base64.b64decode(auth.split()[1]).decode() for _, auth in authorizations if auth}
    assert sent == {f"ci:{password}"}, authorizations
    assert f"gpuprovdemo==1.0 \\\n    --hash=sha256:{digest}" in lock
    assert f"--index-url http://127.0.0.1:{server.server_address[1]}/simple\n" in lock
    assert password not in lock and "ci:" not in lock
    print(f"nobody read every command line {watched['samples']} times: "
          f"{watched['seen']}, {watched['leak_count']} secrets seen")


def test_lock_takes_a_credentialed_torch_index_from_the_environment(work):
    """$GPUPROV_TORCH_INDEX: the index reaches uv, with its password, and `gpuprov lock`'s own
    command line never holds it. PyPI (the rest of the row) is out of reach from here, so the
    lock fails: in one line, without the password."""
    import base64

    password = "env-idx-pw-5757"
    authorizations: list = []
    server, _ = _one_wheel_index(authorizations, delay=0)
    try:
        run = _invoke("lock", "--cuda", "12.6", "--out", str(work / "locks"), cwd=work,
                      env_extra={"GPUPROV_TORCH_INDEX":
                                 f"http://ci:{password}@127.0.0.1:{server.server_address[1]}/s"})
    finally:
        server.shutdown()
        server.server_close()
    sent = {base64.b64decode(auth.split()[1]).decode() for _, auth in authorizations if auth}
    assert sent == {f"ci:{password}"}, authorizations
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith("lock: uv pip compile failed for cuda-12.6-wheels-torch.txt")
    assert password not in run.stdout + run.stderr
    assert not (work / "locks").exists() or not list((work / "locks").iterdir())


# STAND-IN for apt-get (installing packages on the test machine is not allowed): it keeps the
# proxy apt itself reads from the configuration file it is given (`-c`, read by the real
# apt-config), and stays 3 s so that its command line can be read on a busy machine too.
STANDIN_APT_GET = """#!/bin/sh
conf=
while [ $# -gt 0 ]; do
  case "$1" in -c) conf=$2; shift 2;; *) shift;; esac
done
[ -n "$conf" ] && /usr/bin/apt-config -c "$conf" shell proxy Acquire::http::Proxy >> {tools}/proxies
sleep 3
"""


def test_an_apt_proxy_password_never_reaches_a_command_line(farm, inventory, provision, work):
    """An apt step's `proxy:` may carry a password (a company proxy). It was an `-o` option of
    apt-get, on the host's process list for every user. Now `nobody`, reading every command
    line while apt-get update and install run, sees them and never the password; apt reads it
    from the configuration file it is given; the plan and the log show it masked."""
    from tests.sshd import server_with_tools

    password = "apt-proxy-pw-9292"
    proxy = "http://corp:{{ proxy_password }}@127.0.0.1:9/"
    with server_with_tools(farm, "127.0.0.93", {"apt-get": STANDIN_APT_GET},
                           "gpuprov-apt-proxy-") as tools:
        inv = inventory({"h1": farm.host_entry("127.0.0.93")}, secrets=["proxy_password"],
                        vars={"proxy_password": password})
        rec = write_yaml(work / "r.yaml", {"name": "apt proxy", "steps": [
            {"name": "install", "apt": {"packages": ["gpuprov-watch-apt"], "proxy": proxy}},
            # failed_when: the update ends by touching apt's stamp, which only root may
            {"name": "update", "failed_when": False, "apt": {
                "packages": ["gpuprov-watch-apt-2"], "proxy": proxy, "update_cache": True,
                "cache_valid_time": 0}},
        ]})
        markers = ["install gpuprov-watch-apt", "update -q -o"]
        with watching_cmdlines(work, password, *markers) as watched:
            plan = provision(recipe=rec, inventory=inv, check=True)
            result = provision(recipe=rec, inventory=inv)
        proxies = (tools / "proxies").read_text() if (tools / "proxies").exists() else ""
    assert watched["uid"] == 65534 and all(watched["seen"].values()), watched
    assert watched["leak_count"] == 0, watched
    # apt read it from its configuration: install; update, install
    assert proxies.splitlines() == [f"proxy='http://corp:{password}@127.0.0.1:9/'"] * 3, \
        proxies + result.out
    assert [s["status"] for s in result.json["hosts"]["h1"]["steps"]] == ["changed"] * 2
    assert "apt-get install gpuprov-watch-apt via http://corp:***@127.0.0.1:9/" in plan.out
    texts = _everything_written(work)
    texts.update({"plan": plan.out + plan.err, "stdout": result.out, "stderr": result.err})
    for name, text in texts.items():
        assert password not in text, f"the proxy's password leaked into {name}"
    print(f"nobody read every command line {watched['samples']} times: "
          f"{watched['seen']}, {watched['leak_count']} secrets seen")
