"""Host key checking against real sshd: Fabric alone would accept any key; we must not."""
from __future__ import annotations

import subprocess

from tests.conftest import write_yaml


def _recipe(work):
    return write_yaml(work / "r.yaml", {"steps": [{"shell": f"touch {work}/{{{{ host }}}}"}]})


def _inv(farm, work, known: str, policy="strict"):
    known_file = work / "known_hosts"
    known_file.write_text(known)
    return write_yaml(work / "inv.yaml", {
        "host_key_policy": policy, "known_hosts": [str(known_file)],
        "hosts": {"h1": farm.host_entry(farm.addresses[0])}}), known_file


def test_unknown_key_is_refused(farm, work, provision):
    inv, known = _inv(farm, work, "")
    result = provision("h1", _recipe(work), inv)
    assert result.rc == 1
    host = result.host("h1")
    assert host["unreachable"] is True
    assert "is unknown" in host["message"] and str(known) in host["message"]
    assert "accept-new" in host["message"], "the message says how to fix it"
    assert not (work / "h1").exists()
    assert known.read_text() == "", "strict never records keys"


def test_changed_key_is_refused_even_with_accept_new(farm, work, provision):
    other = work / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kt, kb = (work / "other.pub").read_text().split()[:2]
    name = f"[{farm.addresses[0]}]:{farm.port}"
    inv, known = _inv(farm, work, f"# comment\n{name} {kt} {kb}\n", policy="accept-new")
    result = provision("h1", _recipe(work), inv)
    assert result.rc == 1
    message = result.host("h1")["message"]
    assert "CHANGED" in message
    assert f"{known} line 2" in message, message
    assert f"ssh-keygen -R '{name}' -f {known}" in message
    assert not (work / "h1").exists()


def test_accept_new_records_then_strict_accepts(farm, work, provision):
    inv, known = _inv(farm, work, "", policy="accept-new")
    assert provision("h1", _recipe(work), inv).rc == 0
    recorded = known.read_text().split()
    expected = farm.known_hosts.read_text().splitlines()[0].split()
    assert recorded == expected, "the server's real key was recorded under its [addr]:port name"
    strict = write_yaml(work / "strict.yaml", {"host_key_policy": "strict",
                                               "known_hosts": [str(known)],
                                               "hosts": {"h1": farm.host_entry(farm.addresses[0])}})
    (work / "h1").unlink()
    assert provision("h1", _recipe(work), strict).rc == 0
    assert (work / "h1").exists()


def test_hashed_known_hosts_entries_are_understood(farm, work, provision):
    inv, known = _inv(farm, work, farm.known_hosts.read_text())
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert "|1|" in known.read_text()
    assert provision("h1", _recipe(work), inv).rc == 0
