"""gpuprov's paramiko Transport (`remote.transport.ssh._ClientTransport`) against real servers."""
from __future__ import annotations

import logging
import socket
import threading
import time

import paramiko

from remote.transport.ssh import _ClientTransport


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
