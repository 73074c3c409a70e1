"""Existing inventories as they are (issue 23, point 3), run as a user runs `gpuprov` (a
subprocess, a HOME of its own with ~/.ssh/config and ~/.ssh/known_hosts, sshd on loopback):
Ansible INI and YAML inventories with ranges, children, group vars and ansible_connection=local;
an ssh_config alias with HostName, Port, User, IdentityFile and ProxyJump through a second farm
server; a failing jump host blamed by name; bad input in one line with exit 2."""
from __future__ import annotations

import json
import pwd
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import forwarding_refused_server
from tests.sshd import TEST_USER, ensure_user
from tests.test_cli import gpuprov

# Writes a file whose name carries the host and the vars it got (host, group, all).
RECIPE = """\
name: marks
steps:
  - name: mark
    file: {path: "{{ mark_dir }}/mark-{{ host }}-{{ role }}-{{ greeting }}", content: "x\\n"}
"""


def _home(farm, work: Path, ssh_config: str = "") -> Path:
    """A HOME whose ~/.ssh trusts the farm's host keys and holds `ssh_config`."""
    home = work / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    shutil.copy(farm.known_hosts, home / ".ssh" / "known_hosts")
    (home / ".ssh" / "config").write_text(ssh_config)
    return home


def _provision(inv: Path, work: Path, home: Path, *args: str):
    rec = work / "marks.yaml"
    rec.write_text(RECIPE)
    return gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--no-validate", *args,
                   cwd=work, home=home)


def _marks(work: Path) -> set[str]:
    return {p.name for p in work.glob("mark-*")}


def test_an_ansible_ini_inventory_as_it_is(farm, work):
    """A range of farm servers (`127.0.0.[2:3]`), their connection settings in [farm:vars],
    a [fleet:children] group, [all:vars], a host var and a local host."""
    inv = work / "hosts"  # Ansible's customary name: no suffix
    inv.write_text(f"""\
# an Ansible INI inventory, unchanged
ctl ansible_connection=local role=ctl

[farm]
127.0.0.[2:3]

[farm:vars]
ansible_port={farm.port}
ansible_user={farm.user}
ansible_ssh_private_key_file={farm.key}
role=gpu

[fleet:children]
farm

[all:vars]
greeting=hello
mark_dir={work}
""")
    home = _home(farm, work)
    listed = _provision(inv, work, home, "--list-hosts", "-l", "fleet")
    assert [line.strip() for line in listed.out.splitlines()[1:]] == ["127.0.0.2", "127.0.0.3"], \
        listed.out + listed.err
    result = _provision(inv, work, home, "--host", "all")
    assert result.rc == 0, result.out + result.err
    assert _marks(work) == {"mark-ctl-ctl-hello", "mark-127.0.0.2-gpu-hello",
                            "mark-127.0.0.3-gpu-hello"}


def test_an_ansible_yaml_inventory_as_it_is(farm, work):
    """`all:` with vars, hosts and nested children; a range with a stride, vars at every level
    (the child group's win over its parent's), a local host."""
    inv = work / "inventory.yml"
    inv.write_text(f"""\
all:
  vars:
    greeting: hi
    mark_dir: {work}
    role: none
  hosts:
    ctl:
      ansible_connection: local
      role: ctl
  children:
    fleet:
      vars:
        role: fleet
        ansible_user: {farm.user}
        ansible_ssh_private_key_file: {farm.key}
      children:
        farm:
          hosts:
            127.0.0.[2:5:2]:
              ansible_port: {farm.port}
          vars:
            role: gpu
""")
    result = _provision(inv, work, _home(farm, work), "--host", "all")
    assert result.rc == 0, result.out + result.err
    assert _marks(work) == {"mark-ctl-ctl-hi", "mark-127.0.0.2-gpu-hi", "mark-127.0.0.4-gpu-hi"}


BECOME_RECIPE = """\
name: whoami
steps:
  - name: become, as the host says
    shell: id -un > {{ mark_dir }}/who-become
  - name: a file written as the host's become user
    file: {path: "{{ mark_dir }}/owned-become", content: "x\\n"}
  - name: not become
    shell: id -un > {{ mark_dir }}/who-plain
    become: false
"""


@pytest.mark.root
def test_ansible_become_user_runs_steps_as_that_user(work):
    """`ansible_become_user` (Ansible's own test inventory sets it) is `sudo -u USER`: a step
    with become runs as that user, commands, probes and the file kind alike, through the real
    sudo; a step with `become: false` stays the login user (root here: the tests run as root,
    and root too goes through `sudo -u` to become another user)."""
    ensure_user(TEST_USER)
    inv = work / "hosts"
    inv.write_text(f"[local]\ntesthost ansible_connection=local ansible_become=yes "
                   f"ansible_become_user={TEST_USER}\n\n[all:vars]\nmark_dir={work}\n")
    rec = work / "whoami.yaml"
    rec.write_text(BECOME_RECIPE)
    result = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--no-validate",
                     "--host", "all", cwd=work, home=work)
    assert result.rc == 0, result.out + result.err
    assert (work / "who-become").read_text() == f"{TEST_USER}\n"
    assert pwd.getpwuid((work / "owned-become").stat().st_uid).pw_name == TEST_USER
    assert (work / "who-plain").read_text() == "root\n"
    # Run again: the file step's probe, sent through `sudo -u` as well, finds it as written.
    again = gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--no-validate",
                    "--host", "all", "--json", str(work / "again.json"), cwd=work, home=work)
    assert again.rc == 0, again.out + again.err
    steps = json.loads((work / "again.json").read_text())["hosts"]["testhost"]["steps"]
    assert [s["status"] for s in steps] == ["changed", "ok", "changed"]


PASSWORD_USER = "gpuprovpw"


def test_deepops_vagrant_inventory_logs_in_with_ansible_password(farm, work):
    """DeepOps's Vagrant inventories log in with `ansible_user=vagrant ansible_password=vagrant`
    in [all:vars], after an [all] section of hosts with `ansible_host=`. Here the same shape
    against an sshd on loopback that takes passwords, with no key to offer: the step runs as
    that user; a wrong password is the host's login failure (exit 4); the password shows
    nowhere, in the terminal or the run's files."""
    password = "pw-" + secrets.token_hex(8)
    ensure_user(PASSWORD_USER)
    subprocess.run(["chpasswd"], input=f"{PASSWORD_USER}:{password}\n", text=True, check=True)
    address = "127.0.0.33"
    farm.add_server(address, PasswordAuthentication="yes",
                    AllowUsers=f"{farm.user} {PASSWORD_USER}")
    try:
        home = _home(farm, work)  # known_hosts only: no key in ~/.ssh
        inv = work / "virtual_inventory"

        def run(given: str):
            inv.write_text(f"[all]\nvirtual-gpu01 ansible_host={address} ansible_port={farm.port}"
                           f" ip={address}\n\n[slurm-node]\nvirtual-gpu01\n\n[all:vars]\n"
                           f"ansible_user={PASSWORD_USER}\nansible_password={given}\n"
                           f"mark_dir={work}\nrole=gpu\ngreeting=hi\n")
            rec = work / "whoami.yaml"
            rec.write_text("steps:\n  - shell: id -un > {{ mark_dir }}/who-{{ ip }}\n")
            return gpuprov("provision", "-i", str(inv), "--recipe", str(rec), "--no-validate",
                           "--host", "slurm-node", cwd=work, home=home,
                           env={"SSH_AUTH_SOCK": ""})

        right = run(password)
        assert right.rc == 0, right.out + right.err
        assert (work / f"who-{address}").read_text() == f"{PASSWORD_USER}\n"
        wrong = run(password + "x")
        assert wrong.rc == 4, wrong.out + wrong.err
        assert f"login as {PASSWORD_USER} on {address}:{farm.port} failed" in wrong.out
        inv.unlink()  # the one file that holds it
        written = [right.out, right.err, wrong.out, wrong.err] + [
            p.read_text(errors="replace") for p in work.rglob("*") if p.is_file()]
        assert not any(password in text for text in written)
    finally:
        farm.stop(address)


def _entry(name: str, address: str, farm, proxy_jump: str = "") -> str:
    return (f"Host {name}\n  HostName {address}\n  Port {farm.port}\n  User {farm.user}\n"
            f"  IdentityFile {farm.key}\n" + (f"  ProxyJump {proxy_jump}\n" if proxy_jump else ""))


def test_ssh_config_aliases_and_proxyjump(farm, work):
    """Hosts named by ~/.ssh/config aliases only (no address, port, user or key in the
    inventory): reached directly, through a ProxyJump farm server, and not through a jump
    host that refuses forwarding (so the ProxyJump really carries the connection)."""
    target, jump = farm.addresses[0], farm.addresses[1]
    no_forwarding = forwarding_refused_server(farm)
    home = _home(farm, work, _entry("sbx-alias", target, farm)
                 + _entry("sbx-via-jump", target, farm, proxy_jump="sbx-jump")
                 + _entry("sbx-jump", jump, farm)
                 + _entry("sbx-via-nofwd", target, farm, proxy_jump="sbx-nofwd")
                 + _entry("sbx-nofwd", no_forwarding, farm))
    shutil.copy(farm.known_hosts, home / ".ssh" / "known_hosts")  # the no-forwarding server's
    inv = work / "hosts"
    inv.write_text(f"sbx-alias\nsbx-via-jump\nsbx-via-nofwd\n[all:vars]\nmark_dir={work}\n"
                   "role=alias\ngreeting=hi\n")
    result = _provision(inv, work, home, "-l", "sbx-alias,sbx-via-jump")
    assert result.rc == 0, result.out + result.err
    assert _marks(work) == {"mark-sbx-alias-alias-hi", "mark-sbx-via-jump-alias-hi"}
    result = _provision(inv, work, home, "-l", "sbx-via-nofwd")
    assert result.rc == 4, result.out + result.err
    assert "mark-sbx-via-nofwd-alias-hi" not in _marks(work)


def test_ssh_config_includes_are_read_as_ssh_reads_them(farm, work):
    """`Include config.d/*` (relative to ~/.ssh, globbed in lexical order, first value wins),
    `~` paths, and a port that only an included file gives; paramiko alone ignores Include
    and these hosts were not found. A file that includes itself is one clear line."""
    target = farm.addresses[0]
    home = _home(farm, work, "Include config.d/*\nInclude ~/.ssh/extra.conf\n")
    (home / ".ssh" / "config.d").mkdir()
    (home / ".ssh" / "config.d" / "10-fleet").write_text(_entry("sbx-inc", target, farm))
    # a later file's value for the same host loses, as with ssh
    (home / ".ssh" / "config.d" / "20-later").write_text("Host sbx-inc\n  Port 1\n")
    (home / ".ssh" / "extra.conf").write_text(
        f"Host sbx-extra\n  HostName {target}\n  User {farm.user}\n  IdentityFile {farm.key}\n"
        f"Host sbx-*\n  Port {farm.port}\n")
    inv = work / "hosts"
    inv.write_text(f"sbx-inc\nsbx-extra\n[all:vars]\nmark_dir={work}\nrole=inc\ngreeting=hi\n")
    result = _provision(inv, work, home, "--host", "all")
    assert result.rc == 0, result.out + result.err
    assert _marks(work) == {"mark-sbx-inc-inc-hi", "mark-sbx-extra-inc-hi"}

    (home / ".ssh" / "extra.conf").write_text("Include ~/.ssh/extra.conf\n")
    result = gpuprov("facts", "-i", str(inv), "--host", "sbx-extra", cwd=work, home=home)
    assert result.rc == 4, result.out + result.err
    assert f"{home}/.ssh/extra.conf:1: Include nested more than 16 deep" in " ".join(result.out.split())


def test_a_failing_jump_host_is_blamed_by_name(farm, work):
    """ProxyJump to a port nothing listens on: the error names the jump host, not the target."""
    home = _home(farm, work, _entry("sbx-target", farm.addresses[0], farm,
                                    proxy_jump=f"{farm.user}@127.0.0.9:{farm.port}"))
    inv = work / "hosts"
    inv.write_text("sbx-target\n")
    result = gpuprov("facts", "-i", str(inv), "--host", "sbx-target", cwd=work, home=home)
    assert result.rc == 4, result.out + result.err
    reason = result.out
    assert f"jump host {farm.user}@127.0.0.9:{farm.port} (127.0.0.9:{farm.port}) failed, " \
           "so sbx-target was not tried: connection to" in " ".join(reason.split()), reason


BAD = [
    ("hosts", "gpu1 ansible_ssh_extra_args=-v\n", 1,
     "host 'gpu1': ansible_ssh_extra_args is not supported"),
    ("hosts", "[all]\ngpu1 ansible_become=yes\n[gpus]\ngpu1 ansible_become_user=-oops\n", 4,
     "host 'gpu1': ansible_become_user: '-oops' is not a user name"),
    ("hosts", "gpu1 ansible_host=\"{{ lookup('env', 'GPU1') }}\"\n", 1,
     "host 'gpu1': ansible_host={{ lookup('env', 'GPU1') }} is a Jinja template"),
    ("hosts", "[all]\ngpu1\n[all:vars]\nansible_pipelining=perhaps\n", 4,
     "host 'gpu1': ansible_pipelining must be true or false"),
    ("hosts", "[all]\ngpu1\n[all:children]\ngpus\n", 4,
     "group 'gpus' is named here but never declared"),
    ("hosts", "[gpus]\ngpu1\n[gpus:vars]\nansible_ssh_common_args='-o ProxyCommand=nc %h %p'\n",
     4, "host 'gpu1': ansible_ssh_common_args is not supported"),
    ("hosts", "[gpus]\ngpu[01:5]\n", 2,
     "host range in 'gpu[01:5]': with a leading zero, begin and end must have the same width"),
    ("inv.ini", "[fleet:children]\ngpus\n", 2, "group 'gpus' is named here but never declared"),
    ("inv.ini", "[gpus]\ngpu1 ansible_port=http\n", 2,
     "host 'gpu1': ansible_port must be a number from 1 to 65535"),
    # a superscript two: str.isdigit() takes it, int() does not (a traceback before)
    ("inv.ini", "[gpus]\ngpu1 ansible_port=\u00b2\n", 2,
     "host 'gpu1': ansible_port must be a number from 1 to 65535"),
    ("inv.yml", "all:\n  hosts:\n    gpu1:\n      ansible_port: \"\u00b2\"\n", 4,
     "host 'gpu1': ansible_port must be a number from 1 to 65535"),
    ("hosts", "[gpus]\ngpu[1:\u00b2]\n", 2,
     "host range in 'gpu[1:\u00b2]' must be numbers or single letters"),
    ("inv.yml", "all:\n  children:\n    gpus:\n      host:\n        gpu1:\n", 4,
     "group 'gpus': unknown key 'host'"),
    ("inv.yml", "all:\n  hosts:\n    gpu1:\n      ansible_become: maybe\n", 4,
     "host 'gpu1': ansible_become must be true or false"),
]


@pytest.mark.parametrize("name,text,line,message", BAD)
def test_bad_ansible_inventories_are_one_line_with_exit_2(work, name, text, line, message):
    inv = work / name
    inv.write_text(text)
    result = gpuprov("facts", "-i", str(inv), "--host", "all", cwd=work, home=work)
    assert result.rc == 2, result.out + result.err
    assert result.err.strip().startswith(f"error: {inv}:{line}: {message}"), result.err
    assert len(result.err.strip().splitlines()) == 1 and result.out == ""
