"""`gpuprov fabric` over the farm's real sshd servers on loopback, real iperf3: a node that
cannot be reached fails its own pairs, is named, and the run says so (exit 4); the pairs of
the others are measured."""
from __future__ import annotations

import json
import shutil

import pytest

from remote.ground.exitcodes import EXIT_UNREACHABLE


def test_unreachable_node_is_named_and_the_others_are_measured(farm, inventory, work, capsys):
    from remote.commands import fabric as fabric_cmd

    if not shutil.which("iperf3"):
        pytest.fail("iperf3 is not installed (.ci/setup --dev installs it)")
    inv = inventory({"h1": farm.host_entry(farm.addresses[0]),
                     "h2": farm.host_entry(farm.addresses[1]),
                     "h3": farm.host_entry(farm.addresses[2]),
                     "gone": farm.host_entry("127.0.0.9")},  # nothing listens there
                    vars={"fabric_seconds": 1}, timeouts={"connect": 3})
    rc = fabric_cmd.run(host="all", inventory=str(inv), logs_dir=str(work / "logs"),
                    json_path=str(work / "out.json"))
    out = capsys.readouterr().out
    assert rc == EXIT_UNREACHABLE, out
    doc = json.loads((work / "out.json").read_text())
    assert doc["fabric"]["suspect_nodes"] == ["gone"], out
    assert doc["fabric"]["reasons"]["gone"].startswith("no pair completed (gone unreachable:")
    assert doc["hosts"]["gone"]["unreachable"] is True
    measured = [p for p in doc["fabric"]["pairs"] if "gone" not in (p["client"], p["server"])]
    assert measured and all(p["tool"] == "iperf3" and p["value"] > 0 for p in measured), out
    assert "SUSPECT NODE gone" in out


def _profiled(farm, inventory, floors):
    hosts = {name: farm.host_entry(farm.addresses[i], vars={"node_profile": {"fabric": floor}})
             for i, (name, floor) in enumerate(floors.items())}
    return inventory(hosts, vars={"fabric_seconds": 1})


def test_the_node_profiles_fabric_floor_judges_the_pairs_the_lowest_counts(farm, inventory, work,
                                                                           capsys):
    """Issue 33: a pair is judged against the profile's floor for its tool. Each node's
    node_profile names one; the lowest holds (a pair is held to what both of its nodes can do),
    and the run says where the floor came from. Real iperf3 over loopback sshd."""
    from remote.commands import fabric as fabric_cmd

    if not shutil.which("iperf3"):
        pytest.fail("iperf3 is not installed (.ci/setup --dev installs it)")
    # h1's profile asks the impossible; h2's a trickle: the trickle is the floor, nothing slow
    inv = _profiled(farm, inventory, {"h1": {"iperf3": 1e6}, "h2": {"iperf3": 0.001},
                                      "h3": {"iperf3": 1e6}})
    rc = fabric_cmd.run(host="all", inventory=str(inv), logs_dir=str(work / "logs"),
                    json_path=str(work / "out.json"))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "below the floor 0.001 Gb/s (node_profile fabric, the lowest of the nodes')" in out
    # every node asks the impossible: every pair is slow, every node a suspect (exit 3)
    inv = _profiled(farm, inventory, {"h1": {"iperf3": 1e6}, "h2": {"iperf3": 1e6},
                                      "h3": {"iperf3": 1e6}})
    rc = fabric_cmd.run(host="all", inventory=str(inv), logs_dir=str(work / "logs"),
                    json_path=str(work / "out.json"))
    out = capsys.readouterr().out
    doc = json.loads((work / "out.json").read_text())
    assert rc == 3 and sorted(doc["fabric"]["suspect_nodes"]) == ["h1", "h2", "h3"], out


def test_a_bad_fabric_floor_in_a_node_profile_is_one_line_exit_2(farm, inventory, work, capsys):
    from remote.commands import fabric as fabric_cmd

    inv = _profiled(farm, inventory, {"h1": {"iperf3": "fast"}, "h2": {}})
    rc = fabric_cmd.run(host="all", inventory=str(inv), logs_dir=str(work / "logs"))
    err = capsys.readouterr().err
    assert rc == 2 and "node_profile: fabric: 'iperf3': 'fast' is not a tool of" in err, err
    assert not (work / "logs").exists()


def _holder(kind: str, address: str):
    """A real socket that takes a port on `address`: a listener (ss lists it), or one end of a
    connection (ss -l does not: only the tool's own message tells); closed by the caller."""
    import socket

    held = socket.socket()
    held.bind((address, 0))
    if kind == "listener":
        held.listen(1)
        return held, []
    peer = socket.socket()
    peer.bind(("127.0.0.1", 0))
    peer.listen(1)
    held.connect(peer.getsockname())
    return held, [peer]


def _fabric_with_port_taken(farm, inventory, work, capsys, kind: str, others: int = 0,
                            before=None):
    """`gpuprov fabric` over h1 and h2 while `kind` (`_holder`) takes a port on h2, with
    `fabric_ports` that port and the `others` above it (`before(port)` just before the run);
    (exit status, output, the --json's fabric, the port)."""
    from remote.commands import fabric as fabric_cmd

    held, peers = _holder(kind, farm.addresses[1])
    port = held.getsockname()[1]
    hosts = {"h1": farm.host_entry(farm.addresses[0]), "h2": farm.host_entry(farm.addresses[1])}
    inv = inventory(hosts, vars={"fabric_seconds": 1, "fabric_ports": f"{port}-{port + others}"})
    try:
        if before is not None:
            before(port)
        rc = fabric_cmd.run(host="all", inventory=str(inv), logs_dir=str(work / "logs"),
                        json_path=str(work / "out.json"))
        out = capsys.readouterr().out
    finally:
        for sock in [held, *peers]:
            sock.close()
    return rc, out, json.loads((work / "out.json").read_text())["fabric"], port


@pytest.mark.parametrize("kind", ["listener", "connection"])
def test_a_taken_port_is_tried_again_then_the_pair_is_not_measured(farm, inventory, work,
                                                                  capsys, kind):
    """h2's server port is taken on h2 by a real socket, and `fabric_ports` leaves no other:
    each of the 3 tries finds it taken (a listener: seen by ss before the server starts; a
    connection's port: iperf3's own "unable to start listener for connections: Address
    already in use"). The pair is not measured, and no node or link is a suspect: exit 1."""
    rc, out, doc, port = _fabric_with_port_taken(farm, inventory, work, capsys, kind)
    assert rc == 1, out
    assert doc["suspect_nodes"] == [] and doc["suspect_links"] == [], out
    assert doc["nodes"] == {"h1": "not measured", "h2": "not measured"}, out
    [pair] = doc["pairs"]
    assert pair["measured"] is False and pair["ok"] is False, pair
    said = f"not measured: port {port}, {port}, {port} in use on h2 (3 tries)"
    assert pair["error"].startswith(said), pair
    assert f"h1 -> h2: {said}" in out and "SUSPECT" not in out


def test_a_port_taken_under_the_tool_is_tried_again_on_another(farm, inventory, work, capsys):
    """A connection holds the first port picked on h2 (ss -l does not list it): iperf3's
    server fails with its "Address already in use", the pair is tried again on the other port
    of `fabric_ports` and measured there. (The first pick is made known by seeding Python's
    `random`, which only the port picker uses.)"""
    import random
    import socket

    def first_pick_is_taken(port: int) -> None:
        with socket.socket() as probe:
            probe.bind((farm.addresses[1], port + 1))  # the other port is free
        random.seed(next(s for s in range(1000) if random.Random(s).randint(port, port + 1) == port))

    rc, out, doc, port = _fabric_with_port_taken(farm, inventory, work, capsys, "connection",
                                                 others=1, before=first_pick_is_taken)
    assert rc == 0, out
    [pair] = doc["pairs"]
    assert pair["value"] > 0 and pair["detail"]["ports_in_use"] == [port], pair
