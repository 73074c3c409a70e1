"""ssh_config's Include as remote/transport/sshconfig.py reads it (ssh_config(5)), on real
files: where included lines land, what is ignored, and what is refused. The end-to-end case
(hosts reached through included aliases) is in test_ansible_inventory.py."""
from __future__ import annotations

import paramiko
import pytest

from remote.ground.errors import Unreachable
from remote.transport.sshconfig import _with_includes


def _lookup(lines: list[str], host: str) -> dict:
    config = paramiko.SSHConfig.from_text("\n".join(lines) + "\n")
    return dict(config.lookup(host))


def test_an_include_inside_a_host_block_applies_there_only(tmp_path):
    (tmp_path / "user.conf").write_text("User deploy\n")
    (tmp_path / "config").write_text("Host gpu*\n  Include user.conf\nHost *\n  User nobody\n")
    lines = _with_includes(tmp_path / "config", tmp_path)
    assert _lookup(lines, "gpu1")["user"] == "deploy"
    assert _lookup(lines, "cpu1")["user"] == "nobody"


def test_a_path_that_matches_nothing_is_ignored_as_ssh_does(tmp_path):
    (tmp_path / "config").write_text("Include nothing.d/* /nonexistent/file\nHost a\n  Port 2200\n")
    assert _lookup(_with_includes(tmp_path / "config", tmp_path), "a")["port"] == "2200"


@pytest.mark.parametrize("included, message", [
    ("Host b\n  Port 1\n", "has Host or Match lines of its own, inside a Host or Match block"),
    ("Match user x\n  Port 1\n", "has Host or Match lines of its own, inside a Host or Match block"),
])
def test_what_one_flat_config_cannot_say_is_refused(tmp_path, included, message):
    (tmp_path / "inc.conf").write_text(included)
    (tmp_path / "config").write_text("Host a\n  Include inc.conf\n")
    with pytest.raises(Unreachable, match=message):
        _with_includes(tmp_path / "config", tmp_path)


@pytest.mark.parametrize("jump", ["bastion:2²", "bastion:x1"])
def test_a_proxyjump_port_that_is_no_ascii_number_is_named_not_a_crash(jump):
    # "²" passes str.isdigit() and then fails int(): a traceback before this check
    from remote.config.inventory.model import Host
    from remote.ground.errors import Where
    from remote.transport.sshconfig import jump_host

    target = Host(name="gpu1", address="10.0.0.5", where=Where("inv.yaml", 3), jump=jump)
    with pytest.raises(Unreachable, match="ProxyJump .* has a port that is not a number"):
        jump_host(target, {})
