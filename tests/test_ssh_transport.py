"""gpuprov's paramiko Transport (`remote.transport.ssh._ClientTransport`) against real servers."""
from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest

from remote.transport.ssh import _ClientTransport
from tests.conftest import invoke, write_yaml
from tests.sshd import SshdFarm, keygen


def test_a_stalled_key_exchange_ends_at_the_handshake_deadline():
    """A server that sends its banner and then nothing: the packetizer's own deadline ends
    the handshake (paramiko's EOFError), well before the caller's longer wait runs out."""
    server = socket.socket()
    server.bind(("127.0.0.9", 0))
    server.listen(1)
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        done.wait(60)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    transport = _ClientTransport(socket.create_connection(server.getsockname()))
    transport.handshake_timeout = 1
    try:
        transport.start_client(timeout=60)
        raised = None
    except Exception as exc:  # noqa: BLE001 - the type is what is checked
        raised = exc
    finally:
        done.set()
        transport.close()
        server.close()
    assert isinstance(raised, EOFError)


def test_the_servers_debug_message_is_still_logged_when_asked(farm, caplog):
    """OpenSSH sends a debug message after login (the key's options): formatted only for a
    debug log, and then logged as paramiko logs it."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # loopback farm only
    with caplog.at_level(logging.DEBUG, logger="paramiko.transport"):
        client.connect(farm.addresses[0], port=farm.port, username=farm.user,
                       key_filename=str(farm.key), look_for_keys=False, allow_agent=False,
                       transport_factory=_ClientTransport)
        deadline = time.monotonic() + 10
        while not any("Debug msg:" in r.getMessage() for r in caplog.records) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
    client.close()
    assert any("Debug msg:" in r.getMessage() and "key options" in r.getMessage()
               for r in caplog.records)


class _KeyLoggingFarm(SshdFarm):
    """sshd at LogLevel VERBOSE: it logs each public key a client offers ("Failed publickey
    for USER from ... ssh2: ED25519 SHA256:...", or "Accepted publickey ...")."""

    def config_for(self, address: str) -> Path:
        path = super().config_for(address)
        path.write_text(path.read_text().replace("LogLevel ERROR", "LogLevel VERBOSE"))
        return path

    def offered(self) -> list[str]:
        log = (self.dir / f"sshd_{self.addresses[0]}.log").read_text()
        return re.findall(r"(?:Failed|Accepted|Postponed) publickey for \S+ from .* ssh2: \S+ "
                          r"(SHA256:\S+)", log)


def _fingerprint(key: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", f"{key}.pub"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()[1]


@pytest.mark.root
def test_only_the_inventorys_key_is_offered_unless_it_asks_for_the_agent(work):
    """A host that refuses the inventory's `identity_file` learns no other identity: not the
    ssh-agent's key (a real ssh-agent the test starts) nor ~/.ssh/id_ed25519, although the
    host would have let either in. `ssh_agent: true` offers the agent's keys after it."""
    if os.geteuid() != 0:
        pytest.fail("the SSH tests start sshd for a dedicated user and must run as root")
    farm = _KeyLoggingFarm(1, first=71)
    agent = None
    try:
        home = work / "home"
        (home / ".ssh").mkdir(parents=True)
        named, agents, homes = work / "named_key", work / "agent_key", home / ".ssh" / "id_ed25519"
        for key in (named, agents, homes):
            keygen(key)
        # the agent's and the home folder's keys would log in; the inventory's key would not
        farm.authorized.write_text(f"{agents.with_suffix('.pub').read_text()}"
                                   f"{homes.with_suffix('.pub').read_text()}")
        sock = work / "agent.sock"
        agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        env = {"HOME": str(home), "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(agents)], env=dict(os.environ, **env), check=True)
        address = farm.addresses[0]
        inv = write_yaml(work / "inventory.yaml", {
            "known_hosts": [str(farm.known_hosts)],
            "hosts": {"only": farm.host_entry(address, identity_file=str(named)),
                      "agent": farm.host_entry(address, identity_file=str(named),
                                               ssh_agent=True)}})

        refused = invoke("facts", "--host", "only", "--inventory", str(inv), cwd=work, env=env)
        assert refused.rc == 4, refused.out + refused.err  # unreachable
        assert "only unreachable login as gpuprovtest" in refused.out
        offered = farm.offered()
        assert offered and set(offered) == {_fingerprint(named)}, offered

        with_agent = invoke("facts", "--host", "agent", "--inventory", str(inv), cwd=work,
                            env=env)
        assert with_agent.rc == 0, with_agent.out + with_agent.err
        offered = farm.offered()[len(offered):]
        assert offered == [_fingerprint(named), _fingerprint(agents)], offered
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(5)
        farm.close()


@pytest.mark.root
def test_ssh_configs_identityfile_is_the_only_key_offered(work):
    """A host named by a ~/.ssh/config alias whose IdentityFile the host refuses learns no
    other identity either: that IdentityFile is the configured key (IdentitiesOnly), not the
    ssh-agent's key nor ~/.ssh/id_ed25519, which the host would have let in."""
    if os.geteuid() != 0:
        pytest.fail("the SSH tests start sshd for a dedicated user and must run as root")
    farm = _KeyLoggingFarm(1, first=72)
    agent = None
    try:
        home = work / "home"
        (home / ".ssh").mkdir(parents=True)
        named, agents, homes = work / "named_key", work / "agent_key", home / ".ssh" / "id_ed25519"
        for key in (named, agents, homes):
            keygen(key)
        farm.authorized.write_text(f"{agents.with_suffix('.pub').read_text()}"
                                   f"{homes.with_suffix('.pub').read_text()}")
        (home / ".ssh" / "config").write_text(
            f"Host sbx-alias\n  HostName {farm.addresses[0]}\n  Port {farm.port}\n"
            f"  User {farm.user}\n  IdentityFile {named}\n")
        (home / ".ssh" / "known_hosts").write_text(farm.known_hosts.read_text())
        sock = work / "agent.sock"
        agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        env = {"HOME": str(home), "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(agents)], env=dict(os.environ, **env), check=True)
        inv = write_yaml(work / "inventory.yaml", {"hosts": {"sbx-alias": {}}})

        refused = invoke("facts", "--host", "sbx-alias", "--inventory", str(inv), cwd=work,
                         env=env)
        assert refused.rc == 4, refused.out + refused.err  # unreachable
        assert "sbx-alias unreachable login as gpuprovtest" in " ".join(refused.out.split())
        offered = farm.offered()
        assert offered and set(offered) == {_fingerprint(named)}, offered
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(5)
        farm.close()


def test_closing_a_command_whose_link_died_does_not_mask_the_commands_error(farm):
    """A channel closed after its socket died (the peer gone mid-command) raised EOFError from
    close(), which replaced the error the command had ended with (a pull's size cap)."""
    from remote.transport.ssh import _SSHCommand

    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # loopback farm only
    client.connect(farm.addresses[0], port=farm.port, username=farm.user,
                   key_filename=str(farm.key), look_for_keys=False, allow_agent=False)
    transport = client.get_transport()
    channel = transport.open_session()
    channel.exec_command("sleep 30")
    command = _SSHCommand(channel, transport, "h1", None)
    transport.sock.shutdown(socket.SHUT_RDWR)  # the link dies; paramiko still thinks it is up
    try:
        command.close()  # raised EOFError before
    finally:
        client.close()
