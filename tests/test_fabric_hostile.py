"""Issue 41, attacks 4 and 5, end to end over real sshd on loopback with real iperf3 (Debian's
3.12): a node that forges its own figures, and a stranger that reaches a pair's server first.

The forger is a node whose `iperf3` (first on its login PATH, tests/sshd.py
`server_with_tools`) runs the real iperf3 and rewrites every figure of its own JSON to
400 Gb/s. The stranger is this test itself: a real iperf3 client bound to 127.0.0.150, an
address of no node, that connects to every server port of the pair's node as soon as it
listens (seen with `ss`), before the partner's client can. A node "without authentication" is
a wrapper that runs the real iperf3 but leaves "authentication" out of `iperf3 --version`'s
features, as a build without OpenSSL prints them (the one part made up: Debian's build has
the feature)."""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from tests.sshd import server_with_tools

STRANGER = "127.0.0.150"
FORGER = ("#!/bin/sh\n/usr/bin/iperf3 \"$@\" | sed -E "
          "'s/(\"bits_per_second\":[[:space:]]*)[0-9.e+]+/\\1400000000000/'\n")
NO_AUTH = ("#!/bin/sh\nif [ \"$1\" = --version ]; then /usr/bin/iperf3 --version | "
           "sed 's/ authentication,//'; exit 0; fi\nexec /usr/bin/iperf3 \"$@\"\n")


@pytest.fixture(autouse=True)
def iperf3():
    if not shutil.which("iperf3") or not shutil.which("ss"):
        pytest.fail("iperf3 or ss is not installed (.ci/setup --dev installs them)")


def _fabric(inv: Path, work: Path, capsys) -> tuple[int, str, dict]:
    from remote.commands import fabric as fabric_cmd

    rc = fabric_cmd.run(host="all", inventory=str(inv), logs_dir=str(work / "logs"),
                    json_path=str(work / "out.json"))
    out = capsys.readouterr().out
    return rc, out, json.loads((work / "out.json").read_text())["fabric"]


def test_a_forger_frames_no_honest_node_and_is_named(farm, inventory, work, capsys):
    """n1 prints 400 Gb/s for every figure of its own (as sender in n1 -> n2, as receiver in
    n3 -> n1). Before: n3 was the SUSPECT NODE. Now each pair counts the lower of its two
    ends' own figures: no suspect, and n1 is named for figures that disagree with every
    partner's (exit 3, a finding)."""
    with server_with_tools(farm, "127.0.0.140", {"iperf3": FORGER}, "gpuprov-forger-"):
        inv = inventory({"n1": farm.host_entry("127.0.0.140"),
                         "n2": farm.host_entry(farm.addresses[0]),
                         "n3": farm.host_entry(farm.addresses[1])},
                        vars={"fabric_seconds": 1})
        rc, out, doc = _fabric(inv, work, capsys)
    assert rc == 3, out
    assert doc["suspect_nodes"] == [] and doc["suspect_links"] == [], out
    assert list(doc["disagreeing_nodes"]) == ["n1"], out
    assert "SUSPECT" not in out
    assert "FIGURES DISAGREE n1: its figures disagree with every partner's: n1 reports " \
           "400 Gb/s, its partner n2 measured" in out
    pairs = {(p["client"], p["server"]): p for p in doc["pairs"]}
    assert pairs[("n1", "n2")]["sender_value"] == 400.0
    assert pairs[("n3", "n1")]["receiver_value"] == 400.0
    assert all(p["value"] < 400 and p["ok"] for p in doc["pairs"]), out
    record = json.loads(next((work / "logs" / "n1").glob("*/fabric.json")).read_text())
    assert record["disagrees"].startswith("its figures disagree with every partner's")


class Stranger:
    """A real iperf3 client from STRANGER that connects, once each, to every port in `ports`
    that starts listening on `address`, until stopped; what each attempt printed is kept."""

    def __init__(self, address: str, ports: range):
        self.address, self.ports = address, ports
        self.outputs: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _listening(self) -> set[int]:
        out = subprocess.run(["ss", "-Hltn", f"src {self.address}"], capture_output=True,
                             text=True, timeout=10).stdout
        return {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines()
                if line.split()[3].rsplit(":", 1)[1].isdigit()}

    def _watch(self) -> None:
        hit: set[int] = set()
        while not self.stop.is_set():
            for port in sorted(self._listening() & set(self.ports) - hit):
                hit.add(port)
                run = subprocess.run(["iperf3", "-c", self.address, "-p", str(port), "-B",
                                      STRANGER, "-t", "1", "-J", "--connect-timeout", "1000"],
                                     capture_output=True, text=True, timeout=20)
                self.outputs.append(json.loads(run.stdout or "{}"))
            self.stop.wait(0.002)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)

    def served(self) -> int:
        return sum(1 for o in self.outputs if "sum_sent" in o.get("end", {}))

    def refused(self) -> int:
        return sum(1 for o in self.outputs if o.get("error") == "test authorization failed")


def _with_stranger(farm, inventory, work, capsys, server: str):
    """h1 -> h2 (h2 at `server`), `fabric_ports` 3 ports, the stranger watching h2's."""
    from tests.sshd import free_port

    first = free_port([server, farm.addresses[0]])
    inv = inventory({"h1": farm.host_entry(farm.addresses[0]), "h2": farm.host_entry(server)},
                    vars={"fabric_seconds": 1, "fabric_ports": f"{first}-{first + 2}"})
    stranger = Stranger(server, range(first, first + 3))
    try:
        rc, out, doc = _fabric(inv, work, capsys)
    finally:
        stranger.close()
    return rc, out, doc, stranger


def test_a_stranger_served_first_is_interference_never_a_failure(farm, inventory, work,
                                                                  capsys):
    """h2's iperf3 has no authentication: the stranger is served first on each port it
    reaches. Before: the pair FAILED and both nodes were suspects. Now each such try is
    interference, tried again on another port; after 3 it is "not measured (interference)"
    (exit 1), and no node is named."""
    with server_with_tools(farm, "127.0.0.141", {"iperf3": NO_AUTH}, "gpuprov-noauth-"):
        rc, out, doc, stranger = _with_stranger(farm, inventory, work, capsys, "127.0.0.141")
    assert stranger.served() >= 1, stranger.outputs  # the attack happened
    [pair] = doc["pairs"]
    assert doc["suspect_nodes"] == [] and doc["suspect_links"] == [], out
    assert "SUSPECT" not in out and "failed h1 -> h2" not in out, out
    assert out.count("iperf3 authentication off for the pairs of h2: its iperf3 lists no "
                     "'authentication' feature") == 1, out
    if pair["measured"]:  # the stranger lost one race: measured after a retry
        assert rc == 0 and pair["value"] > 0 and pair["detail"]["interference"], out
    else:
        assert rc == 1 and pair["error"].startswith("not measured (interference): 3 of 3 "
                                                    "tries on h2 reached by someone else"), out
        assert "its server was reached from '127.0.0.150', not from the partner" in pair["error"]
        assert doc["nodes"] == {"h1": "not measured", "h2": "not measured"}, out


class CommandLines:
    """Every process's command line on this machine, read from /proc until stopped, kept
    when it holds `secret` (the farm's hosts are this machine: their ps is this one's)."""

    def __init__(self, secrets_of):
        self.secrets_of, self.seen = secrets_of, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.is_set():
            for path in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    line = path.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
                except OSError:
                    continue
                if any(s in line for s in self.secrets_of()):
                    self.seen.append(line)
            self.stop.wait(0.01)

    def close(self) -> list[str]:
        self.stop.set()
        self.thread.join(30)
        return self.seen


def test_with_authentication_the_stranger_is_refused_and_the_pair_measured(farm, inventory,
                                                                           work, capsys,
                                                                           monkeypatch):
    """Both nodes' iperf3 (Debian's 3.12) has authentication: the run's servers take only
    this run's user, so iperf3 itself refuses the stranger ("test authorization failed") and
    serves the partner. The credentials travel on stdin into a private folder, removed after:
    the password and the private key are on no command line while the run goes, in no file
    it leaves, and no folder of theirs is left in /tmp."""
    from remote.commands import fabric as command

    made = []
    real = getattr(command, "new_credentials", None)
    monkeypatch.setattr(command, "new_credentials", lambda: made.append(real()) or made[-1],
                        raising=False)
    lines = CommandLines(lambda: [c.password for c in made] + ["PRIVATE KEY"])
    before = set(Path("/tmp").glob("gpuprov-auth.*"))
    try:
        rc, out, doc, stranger = _with_stranger(farm, inventory, work, capsys, farm.addresses[1])
    finally:
        seen = lines.close()
    assert len(made) == 1 and seen == [] and made[0].password not in out, seen
    for path in work.rglob("*"):
        if path.is_file():
            assert made[0].password not in path.read_text(errors="replace"), path
    assert stranger.refused() >= 1 and stranger.served() == 0, stranger.outputs
    [pair] = doc["pairs"]
    assert rc == 0, out
    assert pair["value"] > 0 and pair["ok"] and pair["detail"]["authenticated"], pair
    assert doc["suspect_nodes"] == [] and "authentication off" not in out
    assert set(Path("/tmp").glob("gpuprov-auth.*")) == before  # nothing left behind


def test_a_credentials_folder_left_by_a_killed_command_goes_with_the_next_run(farm, inventory,
                                                                              work, capsys):
    """A node killed outright (SIGKILL) mid-test leaves its command's credentials folder (as
    tests/test_fabric_netns.py's killed host did): the next run's commands on that node remove
    the login user's own folders older than 15 minutes, and leave a younger one (a run that
    may still be going) and another user's alone."""
    import os
    import pwd
    import time

    from tests.sshd import TEST_USER

    user = pwd.getpwnam(TEST_USER)
    made = {}
    for name, age, owner in (("stale", 20 * 60, user.pw_uid), ("young", 60, user.pw_uid),
                             ("others", 20 * 60, 0)):
        folder = Path(f"/tmp/gpuprov-auth.test{name}")
        folder.mkdir(mode=0o700)
        (folder / "key.pem").write_text("left behind\n")
        os.chown(folder / "key.pem", owner, owner)
        os.chown(folder, owner, owner)
        os.utime(folder, (time.time() - age,) * 2)
        made[name] = folder
    try:
        inv = inventory({"h1": farm.host_entry(farm.addresses[0]),
                         "h2": farm.host_entry(farm.addresses[1])}, vars={"fabric_seconds": 1})
        rc, out, doc = _fabric(inv, work, capsys)
        assert rc == 0, out
        assert not made["stale"].exists()
        assert made["young"].exists() and made["others"].exists()
    finally:
        for folder in made.values():
            shutil.rmtree(folder, ignore_errors=True)
