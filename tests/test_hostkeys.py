"""Host key checking against real sshd: Fabric alone would accept any key; we must not."""
from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko

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
    assert result.rc == 4
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
    assert result.rc == 4
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


def _record_many(path: str, worker: int, start, count: int) -> None:
    from remote.transport.hostkeys import KnownHosts

    store = KnownHosts([path], "accept-new")
    key = paramiko.Ed25519Key.from_private_key_file(str(Path(path).parent / "id"))
    start.wait()
    for n in range(count):
        store.record(f"[10.{worker}.0.{n}]:22", key)


def test_concurrent_processes_recording_keys_lose_none(tmp_path):
    """Two gpuprov runs with accept-new that meet new hosts at the same moment both append
    to one known_hosts file: every line must survive (a read-append-rename without a lock
    across processes drops the other run's lines)."""
    import multiprocessing

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id")],
                   check=True)
    known = tmp_path / "known_hosts"
    known.write_text("# shared by concurrent runs\n")
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(8)
    workers = [ctx.Process(target=_record_many, args=(str(known), w, start, 25)) for w in range(8)]
    for proc in workers:
        proc.start()
    for proc in workers:
        proc.join(60)
        assert proc.exitcode == 0
    lines = [line for line in known.read_text().splitlines() if not line.startswith("#")]
    assert len(lines) == 8 * 25 and len(set(lines)) == 8 * 25
    assert not list(tmp_path.glob(".known_hosts.*")), "a temporary file was left behind"


def test_a_different_key_recorded_meanwhile_by_another_run_is_refused(tmp_path):
    """Two runs meet the same new host at once and are offered different keys (one of them is
    being intercepted): the second to record must refuse, not add a second trusted key."""
    import pytest

    from remote.transport.hostkeys import HostKeyError, KnownHosts

    known = tmp_path / "known_hosts"
    store = KnownHosts([str(known)], "accept-new")  # loaded while the file was empty
    first, second = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    KnownHosts([str(known)], "accept-new").record("[10.0.0.9]:22", first)  # the other run
    with pytest.raises(HostKeyError, match="recorded in .* by another run"):
        store.record("[10.0.0.9]:22", second)
    store.record("[10.0.0.9]:22", first)  # the same key again: nothing to add
    assert known.read_text().count("10.0.0.9") == 1


def test_a_client_gets_only_its_own_hosts_keys(tmp_path):
    """Each connection's client is given the keys of its own host (hashed entries included),
    not every known host: copying them all cost every connection time in proportion to the
    known_hosts files."""
    from remote.transport.hostkeys import KnownHosts, lookup_name

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id")],
                   check=True)
    key_type, key_b64 = (tmp_path / "id.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"[10.0.{n // 256}.{n % 256}]:2222 {key_type} {key_b64}\n"
                             for n in range(300)))
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    store = KnownHosts([known])
    client = paramiko.SSHClient()
    name = lookup_name("10.0.1.7", 2222)
    store.install(client, "h7", name)
    trusted = client.get_host_keys()
    assert list(trusted.keys()) == [name]
    assert trusted[name][key_type].get_base64() == key_b64
